"""matmul(A, B, out=None) with the tuned kernel for the shape, and lookup(): which one and why.

Where a config comes from: the rows of the local cache and the records shipped in the package,
for this dtype, ranked in this order (the first that fits wins):
  1. exact    a row for this (M, N, K)
     few-rows a product of fewer rows than the smallest tile: B streamed once (the gemv family)
              for a few rows of float32, else the rule's 16-row tile, K split by the rule
              (autotune.space.guesses.few_rows_guess)
     small-k  a float32 product of a short K (a few k-steps), no skinny side and a C of a few
              tiles an SM: the rule's 64x64 tile (autotune.space.guesses.small_k_guess)
  2. measured the candidate that the nearest shapes of a shipped measured table rate best
              (autotune.select.neighbours), where a table of this dtype and architecture ships
  3. nearest  a row for the tuned shape closest by autotune.store.cache.shape_distance (log2 scale;
              doubling one dimension = 1) within NEAREST_MAX_DISTANCE, if its config loads the GPU
              alike at this shape (autotune.select.model.similar_load: about as many blocks, waves as full)
  4. model    the cheapest config by the cost model fitted on the usable rows (autotune.select.model):
              their tiles, vector tiles with every K-split too
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
only configs whose family computes in that precision or a stricter one, at every step.
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
from autotune.select.model import predict, similar_load
from autotune.space.configs import DEFAULT_FAMILY, GpuLimits, default_config, infeasibility
from autotune.space.guesses import few_rows_guess, small_k_guess
from autotune.space.precision import allows, of_row
from autotune.space.precision import resolve as resolve_precision
from autotune.store import records
from autotune.store.cache import Cache, CacheError, shape_distance, stale
from autotune.store.records import ANOTHER_ARCHITECTURE, GPU_MATCHES, closest_table, gpu_rank
from kernels import DTYPES, LAYOUTS, Config, Kernel
from kernels.rules import adds_into_c, peeled_rows

NEAREST_MAX_DISTANCE = 3.0  # e.g. 8x along one dimension, or 2x along all three


@dataclass(frozen=True)
class Choice:
    family: str
    config: dict
    source: str  # exact | few-rows | small-k | measured | nearest | model | default
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


_choices: dict[tuple, Choice] = MEMOS.table("select.choices")
_kernels: dict[tuple, Kernel] = MEMOS.table("select.kernels")
_shipped: dict[str, list[dict]] = MEMOS.table("select.shipped")  # the shipped tables, read once


def lookup(m: int, n: int, k: int, dtype: str = "float32", device: Device | None = None, layout: str = "NN",
           deterministic: bool = False, precision: str | None = None) -> Choice:
    """The config `matmul` uses for an (M x K) @ (K x N) product of `dtype` on `device` (default:
    the current GPU) with operands in `layout` (kernels.LAYOUTS), and where it came from; with
    `deterministic`, one that does not add into C (split-K, stream-K); of `precision` or a
    stricter one (autotune.space.precision; default: its default for the dtype and GPU)."""
    device = device or _this_gpu()
    wanted = resolve_precision(precision, dtype, device.cc)
    key = (m, n, k, dtype, device, layout, deterministic, wanted)
    choice = _choices.get(key)
    if choice is None:
        found = _find(m, n, k, dtype, device, layout, deterministic, wanted)
        peel = peeled_rows(m, found.config, layout)
        rest = lookup(peel, n, k, dtype, device, layout, deterministic, wanted) if peel else None
        choice = _choices[key] = replace(found, peel=peel, rest=rest, precision=kernels.family(found.family).precision)
    return choice


def _find(m: int, n: int, k: int, dtype: str, device: Device, layout: str, deterministic: bool,
          wanted: str) -> Choice:
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    if layout not in LAYOUTS:
        raise OperandError(f"unknown layout {layout}; known: {', '.join(LAYOUTS)}")
    if dtype not in _shipped:
        _shipped[dtype] = records.shipped_rows(dtype=dtype)
    candidates = [("cache", row) for row in _cached_rows(dtype)] + [("shipped", row) for row in _shipped[dtype]]
    hashes = kernels.source_hashes()
    ranked, usable = [], []
    for origin, row in candidates:
        match, served = gpu_match(row, device), layout_rank(row, layout)
        if (match is None or served is None or (deterministic and adds_into_c(row["params"]))
                or not allows(wanted, of_row(row))):
            continue
        if not _usable(row, dtype):
            continue
        is_stale = stale(row, hashes)
        usable.append((is_stale, row))
        distance = shape_distance((m, n, k), (row["m"], row["n"], row["k"]))
        if distance <= NEAREST_MAX_DISTANCE:
            order = (is_stale, distance > 0, served, match, distance, -row["gflops"], origin != "cache")
            ranked.append((order, origin, row, match, distance, is_stale))
    best = min(ranked, key=lambda entry: entry[0]) if ranked else None
    if best is None or best[4] > 0:
        limits = GpuLimits.for_cc(device.cc)
        few = few_rows_guess(m, n, k, dtype, limits, device.sm_count, deterministic, layout)
        if few is not None:
            entry = kernels.family(few.family)  # a family's own rule (Family.few_rows_config), or the tile rule
            tile = f"{entry.summary or 'its own tile'} ({few.family})" if entry.few_rows_config else "the 16-row tile"
            return Choice(few.family, few.params, "few-rows", device.name,
                          basis=f"{m} rows: {tile}, K split {few.params.get('splits', 1)} ways")
        short = small_k_guess(m, n, k, dtype, limits, device.sm_count)
        if short is not None:
            return Choice(short.family, short.params, "small-k", device.name,
                          basis=f"K = {k}: the 64x64 tile, BK {short.params['bk']}")
        measured = _measured(m, n, k, dtype, device, deterministic, wanted)
        if measured is not None:
            return measured
    if best is None or (best[4] > 0 and not similar_load(best[2], m, n, k, device)):
        fresh = [row for is_stale, row in usable if not is_stale] or [row for _, row in usable]
        prediction = predict(m, n, k, dtype, device, fresh, deterministic)
        if prediction is not None:
            return Choice(prediction.family, prediction.config, "model", device.name, basis=prediction.basis)
    if best is None:
        return (_measured(m, n, k, dtype, device, deterministic, wanted, other_architectures=True)
                or Choice(DEFAULT_FAMILY, default_config(DEFAULT_FAMILY), "default", device.name))
    _, origin, row, match, distance, is_stale = best
    if is_stale:
        warnings.warn(
            f"mmtune: using a {row['family']} config for {row['m']}x{row['n']}x{row['k']} measured on older kernel "
            f"code ({origin}); `mmtune tune --m {m} --n {n} --k {k}` re-times it", stacklevel=3,
        )
    return Choice(
        row["family"], row["params"], "exact" if distance == 0 else "nearest", device.name,
        (row["m"], row["n"], row["k"]), distance, row["gflops"], origin, row["device"], GPU_MATCHES[match], is_stale,
        row.get("layout") or "NN",
    )


def _measured(m: int, n: int, k: int, dtype: str, device: Device, deterministic: bool, wanted: str,
              other_architectures: bool = False) -> Choice | None:
    """The measured table's pick (autotune.select.neighbours) from the table of the GPU closest to this
    one (records.closest_table), or None where no table of this dtype and architecture ships.
    With `other_architectures` (when nothing of this architecture can serve the shape), also the
    table of the nearest other architecture, its picks limited to the instructions this GPU has
    (autotune.space.configs.arch_infeasibility): the register default is the slowest config there is. Only
    candidates whose family computes as `wanted` allows (autotune.space.precision.allows)."""
    if "measured" not in _shipped:
        _shipped["measured"] = records.measured_tables()
    found = closest_table(_shipped["measured"], dtype, device.name, device.cc, device.sm_count)
    if found is None or not device.sm_count or (found[0] == ANOTHER_ARCHITECTURE and not other_architectures):
        return None
    match, table = found
    limits = GpuLimits.for_cc(device.cc)

    def feasible(family: str, params: dict) -> bool:
        return (allows(wanted, kernels.family(family).precision)
                and infeasibility(family, params, dtype, limits) is None)

    pick = neighbours.choose(table, m, n, k, device.sm_count, deterministic, feasible=feasible)
    if pick is None:
        return None
    return Choice(pick.family, pick.config, "measured", device.name, measured_on=table["device"],
                  gpu_match=GPU_MATCHES[match], basis=pick.basis)


def layout_rank(row: dict, layout: str) -> int | None:
    """0 for a row tuned for `layout`, 1 for an NN row serving another layout (the transfer rule:
    a config tuned for NN is built for the layout asked), None for a row of another layout."""
    tuned = row.get("layout") or "NN"
    if tuned == layout:
        return 0
    return 1 if tuned == "NN" else None


def gpu_match(row: dict, device: Device) -> int | None:
    """How closely the GPU `row` was measured on matches `device` (records.gpu_rank)."""
    return gpu_rank(row, device.name, device.cc, device.sm_count)


@MEMOS.function
def _this_gpu() -> Device:
    backends.require_gpu()
    return backends.current().device()


def _device() -> str:
    return _this_gpu().name


def _cached_rows(dtype: str) -> list[dict]:
    try:
        cache = Cache()
    except CacheError as error:
        warnings.warn(f"mmtune: ignoring the cache: {error}", stacklevel=3)
        return []
    try:
        return cache.rows(dtype=dtype)
    finally:
        cache.close()


def _usable(row: dict, dtype: str) -> bool:
    """A row whose family or params no longer fit the code (after an upgrade) is skipped."""
    try:
        reason = infeasibility(row["family"], row["params"], dtype, GpuLimits.for_cc(row.get("cc")))
    except ValueError as error:  # unknown family
        reason = str(error)
    if reason:
        warnings.warn(f"mmtune: skipping cached {row['family']} config for {row['m']}x{row['n']}x{row['k']}: {reason}")
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
