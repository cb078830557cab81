"""The rules a product's kernels and the call path share, without numba: element types, layouts,
offset width, unaligned rows, CUDA's grid and shared-memory limits, which configs add into C, and
compute capabilities. The kernels import them from here, and so do the kernel store and the
driver launch, which must not import numba (it costs more than a launch).
"""

from __future__ import annotations

from dataclasses import dataclass

#: element type -> bytes per element; kernels accumulate in the element type
ITEMSIZES = {"float32": 4, "float64": 8, "int32": 4}
DTYPE_NAMES = tuple(ITEMSIZES)
#: which operands are passed transposed: "T" for A means the kernel receives A's C-contiguous
#: transpose, K x M (a view A = X.T of a K x M array X); likewise N x K for B
LAYOUTS = ("NN", "NT", "TN", "TT")
#: element offsets are computed in 32 bits (cheaper) unless an operand has this many elements
WIDE_OFFSET_ELEMENTS = 2**32
MAX_GRID_X = 2**31 - 1  # CUDA's limit on gridDim.x, where the tiles of C go
#: the widest load, store and atomic add a thread issues: rows whose bytes are not a multiple of it
#: cannot be moved that wide
VECTOR_BYTES = 16
#: shared memory every kernel may take; more must be opted in to, per kernel and device
DEFAULT_DYNAMIC_SHARED = 48 * 1024


class GridTooLarge(ValueError):
    """The product needs more blocks along a grid dimension than CUDA allows."""


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return layout


def offset_bits_for(m: int, n: int, k: int) -> int:
    """32, or 64 when an operand of an (M x K) @ (K x N) product is too large for 32-bit offsets."""
    return 64 if max(m * k, k * n, m * n) >= WIDE_OFFSET_ELEMENTS else 32


def memory_shapes(m: int, n: int, k: int, layout: str) -> list[tuple[int, int]]:
    """The shapes of the C-contiguous arrays a kernel of `layout` receives for A, B and C: a "T"
    A is its K x M transpose, a "T" B its N x K one."""
    return [(k, m) if layout[0] == "T" else (m, k), (n, k) if layout[1] == "T" else (k, n), (m, n)]


def unaligned_for(m: int, n: int, k: int, layout: str, dtype: str) -> str:
    """The operands ("A", "B", "C") of an (M x K) @ (K x N) product in `layout` whose rows in
    memory are not a multiple of 16 bytes: what a kernel is built for (kernels.build's
    `unaligned`), so that it moves their tiles untested in groups or one element at a time rather
    than testing every tile, and adds into C as each group's address allows."""
    rows = zip("ABC", memory_shapes(m, n, k, layout))
    return "".join(name for name, (_, length) in rows if length * ITEMSIZES[dtype] % VECTOR_BYTES)


def grid_of(m: int, n: int, tile: tuple[int, int], splits: int = 1, workers: int = 0) -> tuple[int, int, int]:
    """(tiles of C, K-splits, 1): every tile on grid x, whose limit no product in memory reaches;
    (workers, 1, 1) for a stream-K kernel, whose blocks share out the tiles themselves."""
    if workers:
        return workers, 1, 1
    rows, cols = tile
    tiles = -(-m // rows) * -(-n // cols)
    if tiles > MAX_GRID_X:
        raise GridTooLarge(f"{m}x{n} needs {tiles} blocks, over CUDA's {MAX_GRID_X}")
    return tiles, splits, 1


def adds_into_c(params: dict) -> bool:
    """Whether a config's kernel adds partial products into C (split-K, stream-K), which must then
    be zeroed first, and whose results vary in the last bits from run to run."""
    return params.get("splits", 1) > 1 or params.get("workers_per_sm", 0) > 0


#: `peeled_rows`: the tiles it peels from (BM at least this), the most tile rows they may span, and
#: the most rows (a 1/PEEL_FRACTION of BM) it peels
PEEL_MIN_TILE, PEEL_MAX_TILE_ROWS, PEEL_FRACTION = 64, 8, 16


def peeled_rows(m: int, params: dict, layout: str = "NN") -> int:
    """How many of C's last rows the call path computes apart, by a product of their own, rather
    than by `params`'s tiles: a bottom tile row of C that holds only M mod BM rows costs a whole
    tile row (kernels.vector.edge_origin), a fifth of the work at M = 257 with BM = 64. Peeled
    where those rows are a few (at most BM / PEEL_FRACTION) and the tile row they would cost is a
    large share of the product (M / BM at most PEEL_MAX_TILE_ROWS); A's rows must be rows in memory
    (layout "N."), so that A's last rows are a contiguous view. 0: not peeled."""
    bm = params.get("bn" if params.get("swap") else "bm", 0)  # a swapped wgmma tile's bn runs along M
    if bm < PEEL_MIN_TILE or layout[0] != "N" or m <= bm:
        return 0
    rest = m % bm
    return rest if rest <= bm // PEEL_FRACTION and m // bm <= PEEL_MAX_TILE_ROWS else 0


@dataclass(frozen=True, order=True)
class Arch:
    """A compute capability: parsed from "9.0", "sm_90" or (9, 0) here and nowhere else. `variant`
    "a" ("9.0a", "sm_90a", (9, 0, "a")) names the features of exactly that architecture (sm_90a's
    wgmma): code built for it runs on no other GPU."""

    major: int
    minor: int
    variant: str = ""

    @classmethod
    def of(cls, cc: str | tuple | Arch) -> Arch:
        if isinstance(cc, Arch):
            return cc
        if isinstance(cc, tuple):
            return cls(int(cc[0]), int(cc[1]), *(str(part) for part in cc[2:3]))
        text = str(cc).strip().lower().removeprefix("sm_")
        variant = text[-1] if text[-1:] == "a" else ""
        digits = text.removesuffix(variant)
        try:
            if "." in digits:
                major, minor = digits.split(".")
                return cls(int(major), int(minor), variant)
            return cls(int(digits[:-1]), int(digits[-1]), variant)
        except ValueError:
            raise ValueError(f"not a compute capability: {cc!r} (expected e.g. 9.0, sm_90 or sm_90a)") from None

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.variant}"

    @property
    def pair(self) -> tuple[int, int]:
        return self.major, self.minor

    @property
    def target(self) -> tuple:
        """The `cc` numba-cuda compiles for: (9, 0), or (9, 0, "a") for sm_90a."""
        return (*self.pair, self.variant) if self.variant else self.pair

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{self.variant}"

    @property
    def native(self) -> Arch:
        """What numba-cuda compiles for on a GPU of this compute capability: from 9.0 on, its
        arch-specific target (sm_90a), so that a kernel stored for it is the one a tune timed."""
        return Arch(*self.pair, "a") if self.pair >= (9, 0) else Arch(*self.pair)

    def has(self, needed: str | tuple | Arch) -> bool:
        """Whether a GPU of this compute capability has what code built for `needed` uses: an
        arch-specific target's features exist on that architecture alone, the rest on it and on
        every later one."""
        needed = Arch.of(needed)
        return self.pair == needed.pair if needed.variant else self.pair >= needed.pair
