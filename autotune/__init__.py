"""mmtune: tune Numba CUDA matmul kernels per shape, cache the verified best, and use it.

    from autotune import matmul, lookup

Importing the package loads nothing heavy: numba is imported on first use of `lookup`, or of
`matmul` when it has to compile or runs under the simulator, so NUMBA_ENABLE_CUDASIM (or
`mmtune --simulate`) can still be set before that.
"""

__all__ = ["matmul", "lookup"]


def __getattr__(name: str):
    if name == "matmul":
        from autotune.calls import matmul

        return matmul
    if name == "lookup":
        from autotune.runtime import lookup

        return lookup
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
