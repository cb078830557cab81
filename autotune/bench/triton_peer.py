"""The Triton peers of `mmtune bench --peers`: a standard autotuned FP32 matmul, as a Triton user
would write it: grouped program order (GROUP_M rows of tiles share B's columns in L2), masked
loads and stores for any M, N, K. `matmul` computes IEEE FP32 products (no TF32); `matmul_tf32x3`
asks `tl.dot` for three TF32 products (input_precision="tf32x3"), Triton's accurate float32 on the
tensor cores, with its own configs. Importing this module imports Triton; autotune.bench.peers
imports it only where Triton imports.
"""

from __future__ import annotations

import inspect

import triton
import triton.language as tl

#: (BM, BN, BK, stages, warps): the configs the IEEE kernel's autotuner times at each new (M, N, K)
CONFIGS = (
    (128, 128, 32, 3, 8), (128, 128, 16, 4, 8), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
    (128, 256, 16, 3, 8), (256, 128, 16, 3, 8), (64, 64, 32, 4, 4), (128, 128, 32, 2, 4),
    (64, 256, 32, 3, 8), (32, 64, 32, 5, 2), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2),
)
#: the tf32x3 kernel's: tensor-core tiles, 256x64x32 with 8 warps and 4 stages among them
TF32X3_CONFIGS = (
    (256, 64, 32, 4, 8), (128, 128, 32, 4, 8), (128, 128, 32, 3, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (256, 128, 32, 3, 8), (128, 256, 32, 3, 8), (64, 256, 32, 4, 8),
    (256, 64, 64, 3, 8), (128, 64, 64, 3, 4), (64, 64, 32, 5, 4), (64, 32, 32, 5, 2),
)
GROUP_M = 8


def has_input_precision() -> bool:
    """Whether tl.dot takes input_precision (Triton 3.0 on): tf32x3 needs it."""
    try:
        return "input_precision" in inspect.signature(tl.dot).parameters
    except (TypeError, ValueError):  # no signature to read: assume a current Triton
        return True


if has_input_precision():

    @triton.jit
    def _dot(a, b, acc, PRECISION: tl.constexpr):
        return tl.dot(a, b, acc, input_precision=PRECISION)

else:  # Triton before 3.0: IEEE only

    @triton.jit
    def _dot(a, b, acc, PRECISION: tl.constexpr):
        return acc + tl.dot(a, b, allow_tf32=False)


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        acc = _dot(a, b, acc, PRECISION)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _autotuned(configs):
    return triton.autotune(
        configs=[
            triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": GROUP_M}, num_stages=stages, num_warps=warps)
            for bm, bn, bk, stages, warps in configs
        ],
        key=["M", "N", "K"],
    )(_matmul_kernel)


_IEEE, _TF32X3 = _autotuned(CONFIGS), _autotuned(TF32X3_CONFIGS)


def _launch(kernel, precision: str, A, B, C) -> None:
    M, K = A.shape
    N = B.shape[1]

    def grid(meta):
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                 PRECISION=precision)


def matmul(A, B, C) -> None:
    """C = A @ B for float32 torch CUDA tensors in IEEE FP32, on torch's current stream; the first
    call at a new (M, N, K) times every config first."""
    _launch(_IEEE, "ieee", A, B, C)


def matmul_tf32x3(A, B, C) -> None:
    """C = A @ B as three TF32 products (Triton's accurate float32 on the tensor cores); as `matmul`."""
    _launch(_TF32X3, "tf32x3", A, B, C)
