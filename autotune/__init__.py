"""mmtune: tune Numba CUDA matmul kernels per shape, cache the verified best, and use it.

    from autotune import matmul, lookup

Importing the package loads nothing heavy: numba is imported on first use of `matmul`/`lookup`,
so NUMBA_ENABLE_CUDASIM (or `mmtune --simulate`) can still be set before that.
"""

__all__ = ["matmul", "lookup"]


def __getattr__(name: str):
    if name in __all__:
        from autotune import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
