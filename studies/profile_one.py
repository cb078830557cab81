"""Launch one config and cuBLAS a few times at one shape, for a profiler to watch (ncu -k ...).

    ncu --clock-control none -k 'regex:matmul|gemm' --launch-skip 2 --launch-count 2 \
        python studies/profile_one.py vector '{"bm": 256, ...}' 4096x4096x4096
"""

from __future__ import annotations

import json
import sys

import numpy as np
from numba import cuda

import kernels
from autotune.measure.measurement import cublas_matmul, random_inputs


def main() -> None:
    family, config, shape = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    m, n, k = (int(x) for x in shape.split("x"))
    A, B = random_inputs(m, n, k, "float32", np.random.default_rng(0))
    dA, dB, dC = cuda.to_device(A), cuda.to_device(B), cuda.device_array((m, n), A.dtype)
    kernel = kernels.build(family, config, "float32")
    cublas = cublas_matmul()
    for _ in range(3):
        kernel.launch(dA, dB, dC)
    for _ in range(3):
        cublas(dA, dB, dC)
    cuda.synchronize()


if __name__ == "__main__":
    main()
