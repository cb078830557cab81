"""On a GPU: a real illegal-address fault in an isolated measurement fails that call only; the next
call gets a fresh process and measures normally.  python studies/fault_check.py"""

import numpy as np

import kernels
from autotune.isolation import Isolated, MeasureFailed
from autotune.measure import measure


def illegal_address_measure(kernel, m, n, k, rng, warmup=3, repeat=20, lock=None):
    """Launch a kernel that writes far outside its array (CUDA_ERROR_ILLEGAL_ADDRESS, which
    poisons this process's CUDA context), then synchronize."""
    from numba import cuda

    @cuda.jit
    def scribble(out):
        out[cuda.grid(1) * 1_000_000_007] = 1.0

    out = cuda.device_array(16, dtype="float32")
    scribble[64, 256](out)
    cuda.synchronize()
    raise AssertionError("the illegal write was not reported")


def main() -> None:
    kernel = kernels.build("vector", kernels.vector.DEFAULT, "float32")
    rng = np.random.default_rng(0)
    faulty = Isolated(illegal_address_measure, timeout_s=60)
    try:
        faulty(kernel, 1024, 1024, 1024, rng)
    except MeasureFailed as error:
        print("fault reported:", error)
    faulty.close()
    healthy = Isolated(measure, timeout_s=120)
    result = healthy(kernel, 1024, 1024, 1024, rng)
    print(f"next measurement in a fresh process: verified={result.verification.ok} {result.gflops:,.0f} GFLOPS")
    healthy.close()


if __name__ == "__main__":  # the measuring children re-import this module
    main()
