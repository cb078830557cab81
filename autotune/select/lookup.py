"""matmul(A, B, out=None) with the tuned kernel for the shape, and lookup(): which one and why.

Where a config comes from: the rows of the local cache and the records shipped in the package,
for this dtype, ranked in this order (the first that fits wins):
  1. exact    a row for this (M, N, K)
     few-rows a product of fewer rows than the smallest tile: B streamed once (the gemv family)
              for a few rows of float32 or float64, else the rule's 16-row tile, K split by the rule
              (autotune.space.guesses.few_rows_guess)
     small-k  a float32 product of a short K (a few k-steps): the rule's 32x64 tile for a small C,
              else its 64x64 tile, through registers or copied asynchronously by B's alignment
              and C's tiles an SM (autotune.space.guesses.small_k_guess)
     small-c  a product of a small C and little work: its family's small tile, the larger the more
              of them C makes an SM, the smallest K split for two waves; a skinny C of few tiles over
              a long K: its long-K tile, K split for two waves; more work on a C of more tiles over a
              short K: the squarest tile of its tier, whole
              (autotune.space.guesses.small_c_guess: dmma's, float64 from sm_90 on)
  2. measured the candidate that the nearest shapes of a shipped measured table rate best
              (autotune.select.neighbours), where a table of this dtype and architecture ships
  3. nearest  a row for the tuned shape closest by autotune.store.rows.shape_distance (log2 scale;
              doubling one dimension = 1) within NEAREST_MAX_DISTANCE whose tile spans a skinny C's
              short side (autotune.select.model.covers_short_side), if its config loads the GPU
              alike at this shape (autotune.select.model.similar_load: about as many blocks, waves as full)
  4. model    the cheapest config by the cost model fitted on the usable rows (autotune.select.model):
              their tiles, vector tiles with every K-split too; of them, only those spanning a skinny C's
              short side where any does
  5. measured as 2, from the table of the nearest other architecture, where nothing of this
              architecture serves the shape; only configs whose instructions this GPU has
              (autotune.space.configs.arch_infeasibility)
  6. default  the register family's DEFAULT config, where no table of the dtype ships either
Within steps 1 and 3 rows are ranked by the layout they were tuned for (`layout_rank`: a row of
the layout asked, then an NN row, whose config serves every layout, built for the one asked; rows
of other layouts are not used), then by the GPU they were measured on: this GPU model, then one
of the same compute capability and SM count, then one of the same compute capability (rows of
other architectures are never used); then the faster (exact) or the closer (nearest) row. A row
measured on other kernel code than today's (its source hash differs) is stale: it is used only
when no fresh row fits at steps 1 and 3, with a one-time warning to re-tune. A deterministic
lookup skips every config that adds into C (split-K, stream-K: their atomic additions land in any
order), at every step; a lookup of a precision (autotune.space.precision: "ieee" unless asked) takes
only configs whose family computes in that precision or a stricter one, a `tf32x3` family only for
a K of at least autotune.space.precision.MIN_K, at every step.
A pick whose tiles would spend a whole tile row on C's last few rows leaves those rows to a
product of their own (`Choice.peel`, kernels.rules.peeled_rows), looked up as any other.
Lookups and built kernels are memoized per process (autotune.memos); call `autotune.clear()` after
tuning in-process.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import kernels
from autotune import backends
from autotune.backends import Device
from autotune.errors import OperandError
from autotune.memos import MEMOS
from autotune.select import neighbours
from autotune.select.model import covers_short_side, predict, similar_load
from autotune.space.configs import DEFAULT_FAMILY, GpuLimits, default_config, infeasibility
from autotune.space.guesses import few_rows_guess, small_c_guess, small_k_guess
from autotune.space.precision import allows
from autotune.space.precision import resolve as resolve_precision
from autotune.space.problem import Problem
from autotune.store import records
from autotune.store.cache import Cache, CacheError
from autotune.store.records import ANOTHER_ARCHITECTURE, GPU_MATCHES, closest_table, gpu_rank, measured_on
from autotune.store.rows import Row, shape_distance, stale
from kernels import DTYPES, LAYOUTS, Config, Kernel
from kernels.rules import adds_into_c, peeled_rows

NEAREST_MAX_DISTANCE = 3.0  # e.g. 8x along one dimension, or 2x along all three


@dataclass(frozen=True)
class Choice:
    family: str
    config: dict
    source: str  # exact | few-rows | small-k | small-c | measured | nearest | model | default
    device: str  # this GPU
    tuned_shape: tuple[int, int, int] | None = None  # the shape the config was tuned for
    distance: float | None = None  # shape_distance to tuned_shape
    gflops: float | None = None  # as measured when tuned
    origin: str | None = None  # cache | shipped
    measured_on: str | None = None  # the GPU model the row was measured on
    gpu_match: str | None = None  # one of GPU_MATCHES
    stale: bool = False  # measured on other kernel code than today's
    tuned_layout: str | None = None  # the layout the row was tuned for (kernels.LAYOUTS)
    #: for sources "measured" and "model": what the pick rests on (the measured shapes and how the
    #: config fared there; the row its tile comes from and the predicted time)
    basis: str | None = None
    #: C's last rows that a product of their own computes (kernels.rules.peeled_rows); 0: none
    peel: int = 0
    #: the config of that product, as lookup picks it for a (peel x N x K) product
    rest: "Choice | None" = None
    #: how the config's kernel computes (its family's precision, autotune.space.precision)
    precision: str = "ieee"


@dataclass(frozen=True)
class Candidate:
    """A row that may serve the problem asked, and how well it fits: the order ranks them."""

    origin: str  # cache | shipped
    row: Row
    match: int  # index into GPU_MATCHES
    served: int  # layout_rank
    distance: float  # shape_distance to the problem's shape
    stale: bool

    @property
    def order(self) -> tuple:
        return (self.stale, self.distance > 0, self.served, self.match, self.distance, -self.row.gflops,
                self.origin != "cache")


_choices: dict[tuple, Choice] = MEMOS.table("select.choices")
_kernels: dict[tuple, Kernel] = MEMOS.table("select.kernels")
_shipped: dict[str, list] = MEMOS.table("select.shipped")  # the shipped rows and tables, read once


def lookup(m: int, n: int, k: int, dtype: str = "float32", device: Device | None = None, layout: str = "NN",
           deterministic: bool = False, precision: str | None = None) -> Choice:
    """The config `matmul` uses for an (M x K) @ (K x N) product of `dtype` on `device` (default:
    the current GPU) with operands in `layout` (kernels.LAYOUTS), and where it came from; with
    `deterministic`, one that does not add into C (split-K, stream-K); of `precision` or a
    stricter one (autotune.space.precision; default: its default for the dtype and GPU)."""
    device = device or _this_gpu()
    wanted = resolve_precision(precision, dtype, device.cc)
    return choose(Problem(device=device.name, dtype=dtype, m=m, n=n, k=k, layout=layout, precision=wanted), device,
                  deterministic)


def choose(problem: Problem, device: Device, deterministic: bool = False) -> Choice:
    """`lookup` of a problem on `device`, memoized (autotune.memos)."""
    key = (problem, device, deterministic)
    choice = _choices.get(key)
    if choice is None:
        found = _find(problem, device, deterministic)
        peel = peeled_rows(problem.m, found.config, problem.layout)
        rest = choose(replace(problem, m=peel), device, deterministic) if peel else None
        choice = _choices[key] = replace(found, peel=peel, rest=rest, precision=kernels.family(found.family).precision)
    return choice


def _find(problem: Problem, device: Device, deterministic: bool) -> Choice:
    (m, n, k), dtype, layout, wanted = problem.shape, problem.dtype, problem.layout, problem.precision
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    if layout not in LAYOUTS:
        raise OperandError(f"unknown layout {layout}; known: {', '.join(LAYOUTS)}")
    hashes = kernels.source_hashes()
    ranked, usable = [], []
    for origin, rows in (("cache", _cached_rows(dtype)), ("shipped", _shipped_rows(dtype))):
        for row in rows:
            match, served = gpu_rank(measured_on(row), device), layout_rank(row, layout)
            if (match is None or served is None or (deterministic and adds_into_c(row.params))
                    or not allows(wanted, row.precision, k) or not _usable(row, dtype)):
                continue
            candidate = Candidate(origin=origin, row=row, match=match, served=served,
                                  distance=shape_distance(problem.shape, row.shape), stale=stale(row, hashes))
            usable.append(candidate)
            if candidate.distance == 0 or (candidate.distance <= NEAREST_MAX_DISTANCE and covers_short_side(
                    row.family, row.params, dtype, problem.shape)):
                ranked.append(candidate)
    best = min(ranked, key=lambda c: c.order) if ranked else None
    if best is None or best.distance > 0:
        gpu = GpuLimits.for_cc(device.cc, device.sm_count)
        few = few_rows_guess((m, n, k), dtype, gpu, deterministic, layout)
        if few is not None:
            entry = kernels.family(few.family)  # a family's own rule (Family.few_rows_config), or the tile rule
            tile = f"{entry.summary or 'its own tile'} ({few.family})" if entry.few_rows_config else "the 16-row tile"
            return Choice(few.family, few.params, "few-rows", device.name,
                          basis=f"{m} rows: {tile}, K split {few.params.get('splits', 1)} ways")
        short = small_k_guess((m, n, k), dtype, gpu, layout)
        if short is not None:
            tile = short.params
            pipeline = f"{tile['stages']} async stages" if tile["async_copy"] else "through registers"
            return Choice(short.family, tile, "small-k", device.name,
                          basis=f"K = {k}: the {tile['bm']}x{tile['bn']} tile, BK {tile['bk']}, {pipeline}")
        small = small_c_guess((m, n, k), dtype, gpu, deterministic, layout)
        if small is not None and allows(wanted, kernels.family(small.family).precision, k):
            tile, family = small.params, small.family
            return Choice(family, tile, "small-c", device.name,
                          basis=f"a {m}x{n} C of {m * n * k:,} multiply-adds: {family}'s "
                                f"{tile['bm']}x{tile['bn']} tile, K split {tile.get('splits', 1)} ways")
        measured = _measured(problem, device, deterministic)
        if measured is not None:
            return measured
    if best is None or (best.distance > 0 and not similar_load(best.row, problem.shape, device)):
        fresh = [c.row for c in usable if not c.stale] or [c.row for c in usable]
        prediction = predict(problem.shape, dtype, device, fresh, deterministic)
        if prediction is not None:
            return Choice(prediction.family, prediction.config, "model", device.name, basis=prediction.basis)
    if best is None:
        return (_measured(problem, device, deterministic, other_architectures=True)
                or Choice(DEFAULT_FAMILY, default_config(DEFAULT_FAMILY), "default", device.name))
    row = best.row
    if best.stale:
        warnings.warn(
            f"mmtune: using a {row.family} config for {row.m}x{row.n}x{row.k} measured on older kernel "
            f"code ({best.origin}); `mmtune tune --m {m} --n {n} --k {k}` re-times it", stacklevel=4,
        )
    return Choice(
        row.family, row.params, "exact" if best.distance == 0 else "nearest", device.name, tuned_shape=row.shape,
        distance=best.distance, gflops=row.gflops, origin=best.origin, measured_on=row.device,
        gpu_match=GPU_MATCHES[best.match], stale=best.stale, tuned_layout=row.layout,
    )


def _measured(problem: Problem, device: Device, deterministic: bool,
              other_architectures: bool = False) -> Choice | None:
    """The measured table's pick (autotune.select.neighbours) from the table of the GPU closest to this
    one (records.closest_table), or None where no table of this dtype and architecture ships.
    With `other_architectures` (when nothing of this architecture can serve the shape), also the
    table of the nearest other architecture, its picks limited to the instructions this GPU has
    (autotune.space.configs.arch_infeasibility): the register default is the slowest config there is. Only
    candidates whose family computes as the problem's precision allows (autotune.space.precision.allows)."""
    found = closest_table(_measured_tables(), problem.dtype, device)
    if found is None or not device.sm_count or (found[0] == ANOTHER_ARCHITECTURE and not other_architectures):
        return None
    match, table = found
    limits = GpuLimits.for_cc(device.cc)

    def feasible(family: str, params: dict) -> bool:
        return (allows(problem.precision, kernels.family(family).precision, problem.k)
                and not (deterministic and adds_into_c(params))
                and infeasibility(family, params, problem.dtype, limits) is None)

    pick = neighbours.choose(table, problem.shape, device.sm_count, feasible, problem.layout)
    if pick is None:
        return None
    return Choice(pick.family, pick.config, "measured", device.name, measured_on=table["device"],
                  gpu_match=GPU_MATCHES[match], basis=pick.basis)


def _shipped_rows(dtype: str) -> list[Row]:
    if dtype not in _shipped:
        _shipped[dtype] = records.shipped_rows(dtype=dtype)
    return _shipped[dtype]


def _measured_tables() -> list[dict]:
    if "measured" not in _shipped:
        _shipped["measured"] = records.measured_tables()
    return _shipped["measured"]


def prepare() -> None:
    """Read now what every process's first lookups read: the shipped rows and measured tables, and
    the kernel sources' hashes (autotune.call.front.prepare)."""
    for dtype in DTYPES:
        _shipped_rows(dtype)
    _measured_tables()
    kernels.source_hashes()


def layout_rank(row: Row, layout: str) -> int | None:
    """0 for a row tuned for `layout`, 1 for an NN row serving another layout (the transfer rule:
    a config tuned for NN is built for the layout asked), None for a row of another layout."""
    if row.layout == layout:
        return 0
    return 1 if row.layout == "NN" else None


@MEMOS.function
def _this_gpu() -> Device:
    backends.require_gpu()
    return backends.current().device()


def _device() -> str:
    return _this_gpu().name


def _cached_rows(dtype: str) -> list[Row]:
    try:
        cache = Cache()
    except CacheError as error:
        warnings.warn(f"mmtune: ignoring the cache: {error}", stacklevel=4)
        return []
    try:
        return cache.rows(dtype=dtype)
    finally:
        cache.close()


def _usable(row: Row, dtype: str) -> bool:
    """A row whose family or params no longer fit the code (after an upgrade) is skipped."""
    try:
        reason = infeasibility(row.family, row.params, dtype, GpuLimits.for_cc(row.cc))
    except ValueError as error:  # unknown family
        reason = str(error)
    if reason:
        warnings.warn(f"mmtune: skipping cached {row.family} config for {row.m}x{row.n}x{row.k}: {reason}")
    return reason is None


def kernel_for(choice: Choice, dtype: str, shape: tuple[int, int, int], layout: str = "NN") -> Kernel:
    """`choice`'s kernel built as a product of `shape` in `layout` needs it (kernels.build_for),
    once per process for each build."""
    build = (kernels.offset_bits_for(*shape), kernels.unaligned_for(*shape, layout, dtype))
    key = (Config.of(choice.family, choice.config), dtype, layout, *build)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = kernels.build(choice.family, choice.config, dtype, layout, *build)
    return kernel
