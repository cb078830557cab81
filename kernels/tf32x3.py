"""float32 products on the tensor cores, each as three TF32 products ("3xTF32").

FFMA caps float32 at the CUDA cores' rate, where cuBLAS's SGEMM runs; the tensor cores multiply
TF32 (float32 with a 10-bit mantissa) several times faster. A lane splits each float32 element
x of A and B it reads into a big and a small TF32 part (kernels.warp_mma.split_tf32: x's TF32
rounding, and the rest held scaled so that it does not underflow), and the warp adds
small_A @ big_B and big_A @ small_B, scales their sum back, then adds big_A @ big_B: the term left
out, small_A @ small_B, and the bits neither part holds are below float32's rounding of each
product, so the result is float32's to within its verification bound (autotune.measure), unlike
one TF32 product (torch's allow_tf32), which is not. Inf and NaN come out where IEEE arithmetic
puts them: no big part overflows, and Inf enters the sums through the small products alone.
The tensor cores round their sums toward zero, so a warp sums `chunk` steps of the instruction's
K into a fresh zero per tile and adds that to its float32 accumulators: a longer chunk adds less
often (faster) and holds more fragments (registers). Everything else is `dmma`'s kernel
(kernels.dmma.make) with float32 tiles; the parameters are dmma's, with the TF32 instruction
shapes, and chunk. Its precision is "tf32x3" (autotune.space.precision): subnormal operands are held
to 2**-147, not float32's 2**-149.
"""

from __future__ import annotations

from . import dmma
from .base import DeviceLimits, Family, Kernel, Schedules
from .warp_mma import KINDS, needs

DTYPE = "float32"
#: dmma's space but for float64's paired stores and third min_blocks, neither measured in float32
SPACE = {**dmma.SPACE, "mma": list(KINDS["tf32"]), "chunk": [1, 2, 4], "stores": ["elements"], "min_blocks": [1, 2]}
DEFAULT = {**dmma.DEFAULT, "mma": "m16n8k8", "bk": 16, "chunk": 2}
shared_bytes = dmma.shared_bytes
#: the tile a cold tune tries first (autotune.space.guesses), from sm_80 on: its tiles as they lie
#: in memory, so that blocks inside C transpose nothing one float32 a copy (docs/performance.md,
#: step 49)
FIRST_TILE = {"bm": 64, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "chunk": 2, "min_blocks": 1,
              "stored": "memory", "stores": "elements"}
FIRST_BY_ARCH = {(8, 0): {"mma": "m16n8k8"}}


def instructions(config: dict, dtype: str) -> dict:
    """The config's TF32 mma.sync."""
    return needs("tf32", config.get("mma"))


def first_tile(dtype: str, cc: str | None) -> dict | None:
    """FIRST_TILE for float32 on a GPU with fast TF32 tensor cores (kernels.dmma.tensor_tile)."""
    return dmma.tensor_tile(FIRST_TILE, FIRST_BY_ARCH, cc) if dtype == DTYPE else None


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    if dtype != DTYPE:
        return f"three TF32 products make {DTYPE} only"
    return dmma.fits(config, dtype, limits)


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    if dtype != DTYPE:
        raise ValueError(f"tf32x3 multiplies {DTYPE} only, not {dtype}")
    return dmma.make(config, dtype, "tf32x3", layout, offset_bits, unaligned)


#: a tile computed whole or with K split by the config's own `splits`
FAMILY = Family(name="tf32x3", space=SPACE, default=DEFAULT, restrict=restrict, build=build, first_guess=0,
                shared_bytes=shared_bytes,
                precision="tf32x3", instructions=instructions, footprint=dmma.footprint,
                schedules=Schedules(whole="tf32x3", split="tf32x3"), first_tile=first_tile)
