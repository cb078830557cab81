"""The tensor-core families give IEEE's answers at the edges: Inf and NaN where IEEE arithmetic puts
them, nothing finite overflowing, and tiny operands within the documented bound, in every layout.

Each family is driven directly (not through lookup, which may pick another family), under the
simulator on a small odd shape, and with MMTUNE_TEST_GPU=1 on a GPU at a shape of several
blocks. The reference is NumPy's float64 product summed element by element, so that Inf * 0 and
Inf - Inf are NaN as IEEE arithmetic gives them (a BLAS may skip zeros).
"""

import functools
import math
import sys

import numpy as np
import pytest
from conftest import ON_GPU
from numba import cuda

import kernels
from kernels import warp_mma

LAYOUTS = kernels.LAYOUTS
if ON_GPU:
    SHAPE = (300, 261, 203)
    CONFIGS = {
        "tf32x3": [{"bm": 64, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "chunk": 2, "splits": 1,
                    "min_blocks": 1, "mma": "m16n8k8"},
                   {"bm": 64, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "chunk": 2, "splits": 2,
                    "min_blocks": 1, "mma": "m16n8k8"}],
        "dmma": [{"bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "splits": 1,
                  "min_blocks": 1, "mma": "m16n8k4"},
                 {"bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "splits": 2,
                  "min_blocks": 1, "mma": "m8n8k4"}],
        "wgmma": [{"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1, "producer": 1},
                  {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1, "producer": 2},
                  {"bm": 64, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 0},
                  {"bm": 128, "bn": 72, "stages": 4, "splits": 1, "min_blocks": 1, "producer": 2, "swap": 1}],
        "gemv": [{"rows": 4, "cols": 64, "threads": 256, "unroll": 4, "splits": 1},
                 {"rows": 4, "cols": 16, "threads": 256, "unroll": 4, "splits": 4}],
    }
else:
    # several tiles each way, a partial tile at every edge, K over several k-steps; K split in two
    SHAPE = (19, 21, 27)
    CONFIGS = {
        "tf32x3": [{"mma": "m16n8k8", "bm": 16, "bn": 8, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 3,
                    "chunk": 1, "splits": 1, "min_blocks": 1},
                   {"mma": "m16n8k4", "bm": 16, "bn": 8, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 2,
                    "chunk": 2, "splits": 2, "min_blocks": 1}],
        "dmma": [{"mma": "m8n8k4", "bm": 8, "bn": 8, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 2, "splits": 1,
                  "min_blocks": 1},
                 {"mma": "m16n8k4", "bm": 16, "bn": 8, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 2,
                  "splits": 2, "min_blocks": 1}],
        # with two producers, the odd rows move as whole 16-byte words (kernels.wgmma_copies.shifted_copier);
        # swapped, C's transpose from B^T A^T, 24 columns along M (step 55)
        "wgmma": [{"bm": 64, "bn": 64, "stages": 2, "splits": 1, "min_blocks": 1, "producer": 0},
                  {"bm": 128, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 2},
                  {"bm": 128, "bn": 24, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 2, "swap": 1}],
        # float64 products of a few rows take gemv (step 53): B streamed in 16-byte pairs, K split;
        # the first past L1 with A read as vectors, as the few-rows rule serves them (step 54)
        "gemv": [{"rows": 4, "cols": 16, "threads": 64, "unroll": 2, "splits": 1, "streamed": True, "a_vectors": True},
                 {"rows": 4, "cols": 16, "threads": 32, "unroll": 1, "splits": 2}],
    }
DTYPE = {"tf32x3": "float32", "dmma": "float64", "wgmma": "float32", "gemv": "float64"}
#: float32 operands are held to 2**-147 by tf32x3's scaled small parts (kernels.warp_mma.split_tf32)
#: and to 2**-137 by wgmma's unscaled ones (kernels.wgmma): the bound allows twice that
HELD = {"tf32x3": 2.0**-146, "wgmma": 2.0**-136}


def special(rng, m: int, n: int, k: int, dtype: str, where: str):
    """Positive operands with +Inf, -Inf and NaN in rows of A (where="A") or columns of B, an Inf
    that meets zeros (Inf * 0) and a row with both infinities (Inf - Inf)."""
    A = rng.uniform(0.5, 1.5, (m, k)).astype(dtype)
    B = rng.uniform(0.5, 1.5, (k, n)).astype(dtype)
    X, Y = (A, B) if where == "A" else (B.T, A.T)
    X[1, 3], X[2, 5], X[3, 7] = math.inf, -math.inf, math.nan
    X[4, 2], X[4, 9] = math.inf, -math.inf
    X[5, 4] = math.inf
    Y[4, 6] = Y[4, 10] = 0.0
    return A, B


def ieee_product(A, B) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.stack([(A[i].astype(np.float64)[:, None] * B.astype(np.float64)).sum(axis=0)
                         for i in range(A.shape[0])])


@functools.cache
def built(family: str, index: int, dtype: str, shape: tuple[int, int, int], layout: str) -> kernels.Kernel:
    """CONFIGS[family][index] built for the product in `layout`, compiled once for the module."""
    return kernels.build_for(family, CONFIGS[family][index], dtype, shape, layout)


def run(family: str, index: int, A, B, layout: str) -> np.ndarray:
    """The kernel of CONFIGS[family][index] built for the product in `layout`, on A and B stored
    as the layout says, into a poisoned C."""
    m, k = A.shape
    n = B.shape[1]
    kernel = built(family, index, str(A.dtype), (m, n, k), layout)
    a = np.ascontiguousarray(A.T) if layout[0] == "T" else A
    b = np.ascontiguousarray(B.T) if layout[1] == "T" else B
    C = cuda.to_device(np.full((m, n), np.nan, A.dtype))
    kernel(cuda.to_device(a), cuda.to_device(b), C)
    return C.copy_to_host()


def mismatches(C: np.ndarray, A: np.ndarray, B: np.ndarray, held: float = HELD["tf32x3"]) -> list[str]:
    """How C departs from IEEE's answer: Inf, its sign or NaN elsewhere than the reference has
    them, or a finite element off by more than the element type's rounding over K and, for
    float32's tensor cores, twice what an operand is held to (`held`)."""
    expected = ieee_product(A, B)
    problems = []
    for name, test in (("Inf", np.isposinf), ("-Inf", np.isneginf), ("NaN", np.isnan)):
        wrong = np.argwhere(test(C) != test(expected))
        if len(wrong):
            problems.append(f"{name} at {len(wrong)} elements where IEEE's has it or not, first {tuple(wrong[0])}")
    finite = np.isfinite(expected) & np.isfinite(C)
    k = A.shape[1]
    eps = np.finfo(A.dtype).eps
    with np.errstate(all="ignore"):
        scale = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
        absolute = 0  # each operand held to `held`: A's error times |B|, and B's times |A|
        if A.dtype == np.float32:
            absolute = held * (np.ones_like(A, np.float64) @ np.abs(B.astype(np.float64))
                               + np.abs(A.astype(np.float64)) @ np.ones_like(B, np.float64))
        bound = (k * eps + 8 * eps) * scale + absolute
        over = finite & (np.abs(C - expected) > bound)
    if over.any():
        i, j = np.argwhere(over)[0]
        problems.append(f"{over.sum()} finite elements off by more than the bound, first ({i}, {j}): "
                        f"{C[i, j]!r} for {expected[i, j]!r}")
    return problems


def edges(rng, m: int, n: int, k: int):
    """float32 operands at the edges of its range, whose products are all finite and normal."""
    return {
        "near FLT_MAX": (rng.uniform(3.4021e38, 3.4027e38, (m, k)), rng.uniform(0.5e-30, 1.5e-30, (k, n))),
        "tiny normal": (rng.uniform(1, 2, (m, k)) * 2.0**-120, rng.uniform(0.5, 1.5, (k, n)) * 2.0**100),
        "subnormal": (rng.uniform(0.5e-39, 1.5e-39, (m, k)), rng.uniform(0.5e30, 1.5e30, (k, n))),
        "deep subnormal": (rng.uniform(0.5e-42, 1.5e-42, (m, k)), rng.uniform(0.5e35, 1.5e35, (k, n))),
        "subnormal B": (rng.uniform(0.5e30, 1.5e30, (m, k)), rng.uniform(-1.5e-39, 1.5e-39, (k, n))),
    }


CASES = [pytest.param(family, i, id=f"{family}-{i}") for family in CONFIGS for i in range(len(CONFIGS[family]))]


#: NN and TT (each operand read as stored and transposed) in every run; NT and TN with `-m long`
EVERY_READ = [layout if layout in ("NN", "TT") else pytest.param(layout, marks=pytest.mark.long) for layout in LAYOUTS]


@pytest.mark.parametrize("layout", EVERY_READ)
@pytest.mark.parametrize("where", ["A", "B"])
@pytest.mark.parametrize("family,index", CASES)
def test_inf_and_nan_land_where_ieee_puts_them(family, index, where, layout, rng):
    A, B = special(rng, *SHAPE, DTYPE[family], where)
    C = run(family, index, A, B, layout)
    assert mismatches(C, A, B, HELD.get(family, 0.0)) == []
    assert np.isposinf(C).any() and np.isneginf(C).any() and np.isnan(C).any()


FLOAT32_CASES = [pytest.param(family, i, id=f"{family}-{i}") for family in HELD for i in range(len(CONFIGS[family]))]


@pytest.mark.parametrize("layout", ["NN", "TN"] if not ON_GPU else LAYOUTS)
@pytest.mark.parametrize("family,index", FLOAT32_CASES)
def test_float32_families_hold_operands_at_the_edges_of_the_float32_range(family, index, layout, rng):
    for case, (A, B) in edges(rng, *SHAPE).items():
        A, B = A.astype(np.float32), B.astype(np.float32)
        C = run(family, index, A, B, layout)
        assert mismatches(C, A, B, HELD[family]) == [], case
        assert np.isfinite(C).all(), case


def unfixed_split(x, shift=warp_mma.SMALL_SHIFT):
    """The split before IEEE's edges were handled, with today's scaled small part: big rounded to
    TF32 as it comes (Inf past 3.4020e38), the rest rounded before it is scaled (underflowing
    below 2**-115) and Inf - Inf = NaN for an infinite x."""
    big = warp_mma.round_tf32(float(x))
    with np.errstate(all="ignore"):
        rest = np.float32(x) - np.float32(big)
    return big, warp_mma.round_tf32(float(rest)) * warp_mma.SMALL_SCALE


@pytest.mark.skipif(ON_GPU, reason="the simulator's split can be swapped")
def test_the_checks_catch_the_split_that_ignored_the_edges(monkeypatch, rng):
    """Mutation check: with the split as it was before the fix, every kind of edge fails."""
    monkeypatch.setattr(warp_mma, "split_parts", unfixed_split)
    unfixed = kernels.build_for("tf32x3", CONFIGS["tf32x3"][0], "float32", SHAPE, "NN")
    monkeypatch.setattr(sys.modules[__name__], "built", lambda *key: unfixed)
    A, B = special(rng, *SHAPE, "float32", "A")
    assert any("Inf" in problem for problem in mismatches(run("tf32x3", 0, A, B, "NN"), A, B))
    cases = edges(rng, *SHAPE)
    for case in ("near FLT_MAX", "subnormal", "deep subnormal"):
        A, B = (x.astype(np.float32) for x in cases[case])
        assert mismatches(run("tf32x3", 0, A, B, "NN"), A, B), case
