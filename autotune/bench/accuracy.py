"""How right a peer's product is: the check a timed call must pass, and the two error measures the
peers report against float64 for operands drawn two ways.

The measures, over C's checked rows (all rows, or REFERENCE_ROWS random ones of a large product):
  elementwise  max_ij |C - C64|_ij / (|A| |B|)_ij: the error of each element against what its own
               terms allow, so a small element summed from large terms is judged fairly
  normwise     ||C - C64||_F / ||C64||_F
where C64 is the float64 product of the same float32 operands. Each is the median over SEEDS draws
of operands from U[-1, 1] ("uniform") and from +-2^U[-30, 30] ("wide": sixty binades, where a
kernel that drops small terms or flushes them to zero shows).

The formulas take NumPy arrays or torch tensors alike: the GPU computes them on the GPU.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

import numpy as np

from autotune.measure.measurement import FULL_REFERENCE_MACS, REFERENCE_ROWS, all_written, relative_error

#: what the peers multiply
DTYPE = "float32"
#: how operands are drawn for the error measures
DRAWS = ("uniform", "wide")
#: draws of each kind; the median counts
SEEDS = 5
#: the two measures, as the row keys name them: <peer>_error_<measure>_<draw>
MEASURES = ("elementwise", "normwise")
ERROR_KEYS = tuple(f"error_{measure}_{draw}" for draw in DRAWS for measure in MEASURES)


@dataclass
class Operands:
    """A, B and a C to write, on the device; what C's checked rows must hold."""

    A: object
    B: object
    C: object
    rows: object  # rows of C compared with the reference: a slice or sorted indices
    expected: np.ndarray  # the float64 reference of those rows
    bound: float

    def error(self, out: np.ndarray) -> float:
        """Relative error of a C copied to the host; inf if any element was left unwritten."""
        return relative_error(out[self.rows], self.expected) if all_written(out) else math.inf


def checked_rows(m: int, n: int, k: int, rng: np.random.Generator):
    """The rows of C to compare with the reference, as measure.compare picks them."""
    if m * n * k > FULL_REFERENCE_MACS and m > REFERENCE_ROWS:
        return np.sort(rng.choice(m, REFERENCE_ROWS, replace=False))
    return slice(None)


@dataclass(frozen=True)
class Exact:
    """Operands drawn one way, a C to write, and the float64 truth of C's checked rows: the product
    and |A| |B| (arrays or tensors of the device's kind)."""

    A: object
    B: object
    C: object
    rows: object
    product: object
    scale: object


@dataclass(frozen=True)
class Errors:
    elementwise: float
    normwise: float


def errors(rows64, exact: Exact) -> Errors:
    """Both measures of C's checked rows (in float64) against `exact`; NaN where C holds NaN."""
    diff = abs(rows64 - exact.product)
    elementwise = float((diff / exact.scale).max())
    normwise = math.sqrt(float((diff * diff).sum()) / max(float((exact.product * exact.product).sum()), 1e-300))
    return Errors(elementwise, normwise)


def _median(values: list[float]) -> float | None:
    """The median, with NaN counted as the worst; None unless finite (JSON has no inf)."""
    middle = statistics.median(math.inf if math.isnan(value) else value for value in values)
    return middle if math.isfinite(middle) else None


def in_layout(A, B, layout: str, transposed: Callable) -> tuple:
    """A and B holding the same values, stored as `layout` (kernels.LAYOUTS) says: a "T" operand as
    the transposed view of a C-contiguous array, which `transposed(X)` makes of X."""
    return transposed(A) if layout[0] == "T" else A, transposed(B) if layout[1] == "T" else B


def peer_errors(shape: tuple[int, int, int], device, binds: dict[str, Callable], layout: str = "NN") -> dict:
    """Each peer's median of both measures for each draw, as row keys. `binds` maps a peer's name
    to its bind(A, B, C); `device` draws operands (`exact`), stores them as `layout` says
    (`transposed`) and reads C's rows back (`rows64`)."""
    m, n, k = shape
    samples = {(name, draw): [] for name in binds for draw in DRAWS}
    for draw in DRAWS:
        for seed in range(SEEDS):
            exact = device.exact(m, n, k, draw, seed)
            A, B = in_layout(exact.A, exact.B, layout, device.transposed)
            for name, bind in binds.items():
                try:
                    bind(A, B, exact.C)()
                    device.sync()
                    samples[name, draw].append(errors(device.rows64(exact.C, exact.rows), exact))
                except Exception:  # noqa: BLE001 - a peer failing on these operands has no error to report
                    samples[name, draw].append(Errors(math.nan, math.nan))
    return {f"{name}_error_{measure}_{draw}": _median([getattr(e, measure) for e in found])
            for (name, draw), found in samples.items() for measure in MEASURES}


def drawn(uniform: Callable, exp2: Callable, shape: tuple[int, int], draw: str):
    """float32 operands drawn as DRAWS names, from the device's `uniform(shape, low, high)` and
    `exp2`."""
    if draw == "uniform":
        return uniform(shape, -1.0, 1.0)
    signs = (uniform(shape, -1.0, 1.0) > 0) * 2 - 1
    return signs * exp2(uniform(shape, -30.0, 30.0))


def draw_seed(draw: str, seed: int) -> int:
    """The random stream of `seed`'s draw of kind `draw`: each kind and seed its own."""
    if draw not in DRAWS:
        raise ValueError(f"unknown draw {draw!r}: expected one of {', '.join(DRAWS)}")
    return seed * len(DRAWS) + DRAWS.index(draw)


def exact_of(A, B, C, rows, to64: Callable) -> Exact:
    """The float64 truth of C's `rows`, computed where A and B live (`to64` widens an array)."""
    A_rows, B64 = to64(A[rows]), to64(B)
    return Exact(A=A, B=B, C=C, rows=rows, product=A_rows @ B64, scale=abs(A_rows) @ abs(B64))


def exact_on_host(m: int, n: int, k: int, draw: str, seed: int) -> Exact:
    """An Exact of NumPy arrays, for devices that compute on the host."""
    rng = np.random.default_rng(draw_seed(draw, seed))

    def uniform(shape, low, high):
        return rng.uniform(low, high, shape).astype(np.float32)

    A, B = (drawn(uniform, np.exp2, shape, draw).astype(np.float32) for shape in ((m, k), (k, n)))
    return exact_of(A, B, np.empty((m, n), np.float32), checked_rows(m, n, k, rng), lambda x: x.astype(np.float64))
