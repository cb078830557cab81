"""The warpgroup family's error at short K next to cuBLAS's, in one process (docs/performance.md,
step 55): what autotune.space.precision.MIN_K rests on.

For each shape, the table's 128-column wgmma tiles (swapped and not, fitted to the shape as a lookup
fits them) and `torch.matmul` (cuBLAS, TF32 off) multiply the bench's operands
(autotune.bench.accuracy: both measures, U[-1, 1] and +-2^U[-30, 30], the median of 5 draws).

    python3 studies/tensor_core_short_k.py OUT.json
"""

from __future__ import annotations

import json
import sys

import torch
from numba import cuda

import kernels
from autotune.bench.accuracy import peer_errors
from autotune.bench.torch_device import TorchDevice
from autotune.select.neighbours import config_for

TILE = {"family": "wgmma", "bm": 128, "bn": 128, "stages": 4, "min_blocks": 1, "producer": 2}
SIDES = ((3001, 997), (1024, 1024), (200, 4096))
KS = (16, 32, 48, 64, 77, 96, 128, 160, 192, 256, 384, 512)


def binding(kernel):
    def bind(A, B, C):
        return lambda: kernel.launch(cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(C))

    return bind


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    device, found = TorchDevice(), []
    for m, n in SIDES:
        for k in KS:
            binds = {"cublas": lambda A, B, C: (lambda: torch.matmul(A, B, out=C))}
            for name, swap in (("swap128", 1), ("wgmma128", 0)):
                family, params = config_for({**TILE, "swap": swap}, "whole", (m, n, k), 132, "9.0")
                binds[name] = binding(kernels.build_for(family, params, "float32", (m, n, k), "NN"))
            found.append({"shape": [m, n, k], **peer_errors((m, n, k), device, binds)})
            print(found[-1], flush=True)
    with open(sys.argv[1], "w") as out:
        json.dump(found, out, indent=0)


if __name__ == "__main__":
    main()
