"""The tensor-core families at the edges of the float range, next to cuBLAS, in one process.

For each shape, case and layout: operands drawn on the GPU through PyTorch, C from
`torch.matmul` (cuBLAS, TF32 off) and from the family's kernel built for the shape (the config
given, launched on the same tensors), both against C64, the float64 product of the same
operands. Reports whether Inf and NaN land where cuBLAS puts them (positions and signs), and on
the finite elements max |C - C64| / (|A| |B|) and ||C - C64||_F / ||C64||_F.

    python studies/tensor_core_edges.py --shapes 1024x1024x1024,4096x4096x4096 [--families tf32x3,wgmma] --out OUT

Cases: uniform (U[-1, 1]), wide (+-2^U[-30, 30]), special values in A or in B (+Inf, -Inf, NaN,
Inf times 0, Inf - Inf), near FLT_MAX (A in [3.4021e38, 3.4027e38], B about 1e-30), tiny normal
(A about 2^-120, B about 2^100), subnormal (A about 1e-39, B about 1e30) and deep subnormal
(A about 1e-42, B about 1e35). float64 (dmma) runs the special-value cases.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from numba import cuda

import kernels
from autotune.measure.measurement import device_info, versions

TF32X3 = {"bm": 64, "bn": 128, "bk": 16, "chunk": 2, "min_blocks": 1, "mma": "m16n8k8", "splits": 1, "stages": 3,
          "warps_m": 2, "warps_n": 2}
DMMA = {"bm": 64, "bn": 128, "bk": 16, "min_blocks": 1, "mma": "m16n8k4", "splits": 1, "stages": 3, "warps_m": 1,
        "warps_n": 4}
WGMMA = {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1}
SPECIAL = ("special-A", "special-B")
CASES = ("uniform", "wide", *SPECIAL, "near-max", "tiny-normal", "subnormal", "deep-subnormal")
LAYOUTS = ("NN", "NT", "TN", "TT")


def draw(case: str, m: int, n: int, k: int, dtype, generator) -> tuple[torch.Tensor, torch.Tensor]:
    def uniform(shape, low, high):
        return torch.empty(shape, dtype=torch.float64, device="cuda").uniform_(low, high, generator=generator)

    if case == "uniform":
        A, B = uniform((m, k), -1, 1), uniform((k, n), -1, 1)
    elif case == "wide":
        def wide(shape):
            signs = torch.where(uniform(shape, 0, 1) < 0.5, -1.0, 1.0)
            return signs * torch.exp2(uniform(shape, -30, 30))
        A, B = wide((m, k)), wide((k, n))
    elif case in SPECIAL:
        A, B = uniform((m, k), 0.5, 1.5), uniform((k, n), 0.5, 1.5)
        X = A if case == "special-A" else B.T  # rows of X are rows of A or columns of B
        X[1, 3] = math.inf
        X[2, 5] = -math.inf
        X[3, 7] = math.nan
        X[4, 2], X[4, 9] = math.inf, -math.inf  # Inf - Inf
        X[5, 4] = math.inf  # times the zeros below: Inf * 0
        Y = B if case == "special-A" else A.T
        Y[4, 6] = 0.0
        Y[4, 10] = 0.0
    elif case == "near-max":
        A, B = uniform((m, k), 3.4021e38, 3.4027e38), uniform((k, n), 0.5e-30, 1.5e-30)
    elif case == "tiny-normal":
        A, B = uniform((m, k), 1, 2) * 2.0**-120, uniform((k, n), 0.5, 1.5) * 2.0**100
    elif case == "subnormal":
        A, B = uniform((m, k), 0.5e-39, 1.5e-39), uniform((k, n), 0.5e30, 1.5e30)
    elif case == "deep-subnormal":
        A, B = uniform((m, k), 0.5e-42, 1.5e-42), uniform((k, n), 0.5e35, 1.5e35)
    else:
        raise ValueError(case)
    return A.to(dtype), B.to(dtype)


def as_layout(X: torch.Tensor, transposed: bool) -> torch.Tensor:
    """X itself, or the transposed view of a C-contiguous copy of X.T (the same values)."""
    return X.T.contiguous().T if transposed else X.contiguous()


def stored(X: torch.Tensor) -> torch.Tensor:
    """What a kernel receives for X: X, or the array X transposes."""
    return X if X.is_contiguous() else X.T


def compare(C: torch.Tensor, C64: torch.Tensor, scale: torch.Tensor, cublas: torch.Tensor) -> dict:
    """Where C's Inf and NaN lie against cuBLAS's, and its error on the elements both hold finite."""
    def infinities(X):
        return torch.where(torch.isinf(X), torch.sign(X), 0)

    inf_same = bool(torch.equal(infinities(C), infinities(cublas)))
    nan_same = bool(torch.equal(torch.isnan(C), torch.isnan(cublas)))
    finite = torch.isfinite(cublas) & torch.isfinite(C64)
    diff = (C.double() - C64)[finite]
    reference = C64[finite]
    return {
        "inf": int(torch.isinf(C).sum()), "nan": int(torch.isnan(C).sum()),
        "inf_and_signs_as_cublas": inf_same, "nan_as_cublas": nan_same,
        "nonfinite_where_cublas_finite": int((~torch.isfinite(C) & finite).sum()),
        "max_error_over_AB": float((diff.abs() / scale[finite]).max()) if diff.numel() else 0.0,
        "frobenius": float(diff.norm() / reference.norm()) if diff.numel() and reference.norm() > 0 else 0.0,
    }


def run_case(case: str, shape, layout: str, dtype, built: dict, generator) -> list[dict]:
    m, n, k = shape
    A, B = draw(case, m, n, k, dtype, generator)
    A, B = as_layout(A, layout[0] == "T"), as_layout(B, layout[1] == "T")
    C64 = A.double() @ B.double()
    scale = A.double().abs() @ B.double().abs()
    cublas = A @ B
    rows = [{"impl": "cublas", **compare(cublas, C64, scale, cublas)}]
    kernel = built[layout]
    C = torch.full((m, n), math.nan, dtype=dtype, device="cuda")
    kernel.launch(cuda.as_cuda_array(stored(A)), cuda.as_cuda_array(stored(B)), cuda.as_cuda_array(C))
    torch.cuda.synchronize()
    rows.append({"impl": kernel.family, **compare(C, C64, scale, cublas)})
    return [{"case": case, "m": m, "n": n, "k": k, "layout": layout, "dtype": str(dtype).split(".")[-1], **r}
            for r in rows]


_built: dict[tuple, kernels.Kernel] = {}


def build(family: str, config: dict, dtype: str, shape, layout: str) -> kernels.Kernel:
    """The kernel as kernels.build_for builds it for the shape, compiled once per distinct build."""
    key = (family, dtype, layout, kernels.offset_bits_for(*shape), kernels.unaligned_for(*shape, layout, dtype))
    if key not in _built:
        _built[key] = kernels.build_for(family, config, dtype, shape, layout)
    return _built[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024x1024x1024,2048x2048x2048,4096x4096x4096")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="layouts of the special-value cases")
    parser.add_argument("--families", default="tf32x3,dmma", help="of tf32x3, dmma and wgmma (sm_90 alone)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    generator = torch.Generator(device="cuda").manual_seed(37)
    layouts = args.layouts.split(",")
    rows = []
    for shape in [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]:
        families = (("tf32x3", TF32X3, torch.float32, CASES), ("dmma", DMMA, torch.float64, SPECIAL),
                    ("wgmma", WGMMA, torch.float32, CASES))
        for family, config, dtype, cases in (f for f in families if f[0] in args.families.split(",")):
            name = str(dtype).split(".")[-1]
            built = {layout: build(family, config, name, shape, layout) for layout in layouts}
            for case in cases:
                for layout in layouts if case in SPECIAL else ["NN"]:
                    rows += run_case(case, shape, layout, dtype, built, generator)
                    for r in rows[-2:]:
                        print(f"{r['m']}x{r['n']}x{r['k']} {r['dtype']} {r['case']:15} {r['layout']} {r['impl']:7} "
                              f"inf {r['inf']:6} nan {r['nan']:6} as cuBLAS {r['inf_and_signs_as_cublas']!s:5} "
                              f"{r['nan_as_cublas']!s:5} max/|A||B| {r['max_error_over_AB']:.2e} "
                              f"frob {r['frobenius']:.2e}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = {"tf32x3": TF32X3, "dmma": DMMA, "wgmma": WGMMA}
    result = {**device_info(), **versions(), "torch": torch.__version__, "configs": configs,
              "rows": rows}
    (args.out / "edges.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
