"""How exactly a float32 product must be computed: the precision a caller asks for, and its default.

A kernel computes in one precision (its family's `precision`, kernels.base.Family):
  ieee     every product and sum in the element type on the CUDA cores (FFMA), as cuBLAS's SGEMM
           and DGEMM do; float64's tensor-core family (dmma) too, whose products and sums are
           float64's own
  tf32x3   float32 as three TF32 products on the tensor cores (kernels.tf32x3, and on Hopper
           kernels.wgmma): float32's accuracy on normal numbers, and IEEE's Inf and NaN, but
           operands held to 2**-147 only (kernels.warp_mma.split_tf32), and by the warpgroup
           family to 2**-137 (its small parts unscaled), where float32 holds them to 2**-149
A caller asks for a precision, and gets a kernel of that precision or of a stricter one:
"tf32x3" allows the tensor cores (for products of at least MIN_K terms), "ieee" does not. float64 and int32 have IEEE kernels alone,
so that either request gives them the same kernels.

Knows nothing of Numba, so that the call path can check and default a request without loading it.
"""

from __future__ import annotations

from autotune.errors import PrecisionError

#: strictest first
PRECISIONS = ("ieee", "tf32x3")
#: the kernel precisions each requested precision allows
ALLOWS = {"ieee": ("ieee",), "tf32x3": ("ieee", "tf32x3")}
#: the shortest K whose products a kernel precision serves: with fewer terms the tensor cores'
#: float32 errs more than cuBLAS's SGEMM on the bench's measures (docs/performance.md, step 55),
#: so a lookup or a tune of such a product takes the IEEE kernels
MIN_K = {"tf32x3": 256}
#: the families of rows written before rows recorded their precision whose kernels are not IEEE's
#: (every later row records it: caches, export files and shipped records of earlier releases)
UNRECORDED = {"tf32x3": "tf32x3"}


def check(precision: str) -> str:
    """`precision` in its canonical spelling (any case); PrecisionError if unknown."""
    name = str(precision).lower()
    if name not in PRECISIONS:
        raise PrecisionError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return name


def default(dtype: str, cc: str | None) -> str:
    """The precision a float32 product gets when the caller names none: "ieee" everywhere.

    The tensor cores' float32 (tf32x3) is as accurate as cuBLAS's SGEMM on normal numbers, but
    holds operands to 2**-147 (2**-137 on Hopper's warpgroup family), which leaves a product of
    operands below about 2**-130 (2**-120) times cuBLAS's error and more (docs/performance.md):
    until it is exact there, it is asked for, not given. `cc` is the GPU's compute capability,
    which a later default may weigh."""
    return "ieee"


def resolve(precision: str | None, dtype: str, cc: str | None) -> str:
    """The precision asked for, checked, or the default for `dtype` on a GPU of compute capability `cc`."""
    return default(dtype, cc) if precision is None else check(precision)


def allows(requested: str, kernel_precision: str, k: int | None = None) -> bool:
    """Whether a kernel of `kernel_precision` may serve a request for `requested`, for a product
    of `k` terms (None: any K; MIN_K)."""
    return kernel_precision in ALLOWS[requested] and (k is None or k >= MIN_K.get(kernel_precision, 0))


def of_row(row: dict) -> str:
    """A cache or records row's precision: as recorded, else what its family computed before rows
    recorded it (UNRECORDED)."""
    return row.get("precision") or UNRECORDED.get(row.get("family"), "ieee")
