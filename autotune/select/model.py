"""Configs for shapes nobody tuned: a cost model fitted on the tuned rows of this architecture.

A tuned row says how long its config took at its shape. The model reads that time as waves of
blocks, each block running its k-steps plus a fixed overhead of steps (prologue, epilogue). A
step costs `tau` (the tile's own price, as measured) for each block sharing its SM, but a block
with fewer beside it than the SM holds is bound by its latency: its step takes no less than a
share (LONE_SHARE) of a full SM's. So a shape's last wave, where it leaves SMs less than
full, runs faster per block than its full waves. A vector tile may also split K (the splitk
family with the same tile): more blocks, fewer steps each, for the price of zeroing C and adding
every split's partial product into it. `predict` prices every candidate and takes the cheapest;
`similar_load` says whether a nearby tuned shape loads the GPU alike, so that its config may
serve as it is; `covers_short_side` keeps a skinny C's long operand read once (the model prices
the other tiles only where none spans C's short side); `leave_one_out` measures the model on the
rows themselves.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import kernels
from autotune.memos import MEMOS
from autotune.space.configs import GpuLimits, infeasibility
from autotune.space.guesses import MIN_FIT_SIDE, SKINNY
from autotune.store.rows import Row
from kernels import Config
from kernels.base import DeviceLimits, Schedules, itemsize

SPLITS = (1, 2, 4, 8, 16, 32)
#: fixed steps per block tried when fitting; the one that best predicts rows from each other wins
OVERHEADS = (0, 2, 4, 8, 16)
DEFAULT_OVERHEAD = 4
#: a step of a block with fewer beside it than its SM holds, as a share of its step on a full
#: SM: 1 would be latency alone (never faster), 0 arithmetic alone (faster in proportion to the
#: blocks missing). Chosen by timing lookup's picks at shapes nobody tuned, not fitted to the
#: rows: they favour a lower share, which picked worse there (docs/performance.md, step 53)
LONE_SHARE = 0.75
#: bytes per second at which split-K zeroes C and adds the partial products into it
SPLIT_BYTES_PER_S = 1.5e12
#: zeroing C is a launch of its own before the kernel: a fixed cost besides the bytes, which
#: decides tiny products (one memset node in a CUDA graph: studies/h200/step21/rejected-store/timing.txt)
SPLIT_LAUNCH_MS = 1e-3
#: shared memory per SM by compute capability, which resident blocks share
SHARED_PER_SM = {"9.0": 228 * 1024, "8.0": 164 * 1024, "8.7": 164 * 1024}
DEFAULT_SHARED_PER_SM = 100 * 1024
#: a nearby tuned shape serves as it is when its config makes within this factor as many blocks
#: at the new shape, and fills its waves at least this well relative to its own shape
LOAD_FACTOR = 2.0
WAVE_EFFICIENCY = 0.8


@dataclass(frozen=True)
class Geometry:
    """How a config's blocks cover a product and share an SM."""

    tile: tuple[int, int]
    bk: int
    splits: int
    resident: int  # blocks per SM

    def blocks(self, m: int, n: int) -> int:
        return -(-m // self.tile[0]) * -(-n // self.tile[1]) * self.splits

    def waves(self, m: int, n: int, sm_count: int) -> int:
        return -(-self.blocks(m, n) // (sm_count * self.resident))

    def steps(self, k: int) -> int:
        return max(1, -(-k // (self.splits * self.bk)))

    def step_units(self, m: int, n: int, sm_count: int, lone_share: float) -> float:
        """A k-step of every wave, in `tau`s: blocks sharing an SM cost a tau each, a wave that
        leaves SMs less than full no less than `lone_share` of a full SM's."""
        full, rest = divmod(self.blocks(m, n), sm_count * self.resident)
        units = full * self.resident
        if rest:
            units += max(-(-rest // sm_count), lone_share * self.resident)
        return units

    def efficiency(self, m: int, n: int, sm_count: int) -> float:
        """The share of the SMs' block slots its waves fill."""
        return self.blocks(m, n) / (self.waves(m, n, sm_count) * sm_count * self.resident)


@dataclass(frozen=True)
class Prediction:
    family: str
    config: dict
    predicted_ms: float
    basis: str  # the tuned row the tile and its cost come from, and how it loads the GPU


def geometry(family: str, params: dict, dtype: str, cc: str) -> Geometry:
    """How blocks of `params` cover a product and share an SM of compute capability `cc`, from
    its family's footprint (Family.footprint)."""
    limits = DeviceLimits()
    block = kernels.family(family).footprint(params, dtype)
    threads, shared = block.threads, block.shared
    registers = min(block.registers, limits.max_registers_per_thread)
    resident = min(
        limits.max_threads_per_sm // threads,
        limits.max_registers_per_block // (threads * registers),
        SHARED_PER_SM.get(cc, DEFAULT_SHARED_PER_SM) // (shared + 1024) if shared else 32,
        32,
    )
    # launch bounds make ptxas fit min_blocks blocks, spilling if it must
    resident = max(resident, min(params.get("min_blocks", 1), limits.max_threads_per_sm // threads), 1)
    return Geometry(block.tile, block.bk, params.get("splits", 1), resident)


def priced(family: str) -> bool:
    """Whether the model prices a family's configs: it knows their footprint (Family.footprint)
    and their blocks run in waves, which stream-K's do not (Family.streams)."""
    entry = kernels.FAMILIES.get(family)
    return entry is not None and entry.footprint is not None and not entry.streams


def split_ms(m: int, n: int, splits: int, dtype: str) -> float:
    """Zeroing C (a launch of its own) and adding `splits` partial products into it."""
    if splits == 1:
        return 0.0
    return SPLIT_LAUNCH_MS + m * n * itemsize(dtype) * (1 + splits) / SPLIT_BYTES_PER_S * 1e3


def tile_key(family: str, params: dict) -> tuple:
    """A config without its schedule (Family.schedules): the configs of one tile, whole or with K
    split (vector and splitk; a tensor-core tile's splits), share a tau."""
    schedules = kernels.family(family).schedules
    return (schedules.whole if schedules else family, tuple(sorted(Schedules.tile_of(params).items())))


@dataclass(frozen=True)
class Priced:
    """A config the model may pick: a tuned tile (whole, or with K split), its step cost and the
    row of its tile that cost comes from."""

    config: Config
    tau: float
    row: Row


class Model:
    """The cost model of one set of rows (one architecture) for GPUs of `sm_count` SMs."""

    def __init__(self, rows: list[Row], sm_count: int, cc: str):
        # a stream-K row's blocks do not run in waves, which is what the model prices
        self.rows = [r for r in rows if (r.median_ms or 0) > 0 and priced(r.family)]
        self.sm_count, self.cc = sm_count, cc
        self.overhead = self._fit_overhead()
        self.taus = self._taus(self.overhead)

    def _tau(self, row: Row, overhead: int) -> float:
        g = geometry(row.family, row.params, row.dtype, self.cc)
        work = max(row.median_ms - split_ms(row.m, row.n, g.splits, row.dtype), 1e-6)
        return work / ((g.steps(row.k) + overhead) * g.step_units(row.m, row.n, self.sm_count, LONE_SHARE))

    def _taus(self, overhead: int) -> dict[tuple, list[tuple[float, Row]]]:
        """Each tile's per-step costs, one from each of its rows."""
        taus: dict[tuple, list[tuple[float, Row]]] = {}
        for row in self.rows:
            taus.setdefault(tile_key(row.family, row.params), []).append((self._tau(row, overhead), row))
        return taus

    def _fit_overhead(self) -> int:
        """The OVERHEADS value that best predicts each row's time from the other rows of its tile."""
        best, best_error = DEFAULT_OVERHEAD, math.inf
        for overhead in OVERHEADS:
            taus, errors = self._taus(overhead), []
            for row in self.rows:
                others = [(t, r) for t, r in taus[tile_key(row.family, row.params)] if r is not row]
                if others:
                    tau, source = _median_entry(others)
                    predicted = self.cost(Priced(row.config, tau, source), row.dtype, row.shape, overhead)
                    errors.append(abs(math.log(predicted / row.median_ms)))
            if errors and statistics.fmean(errors) < best_error:
                best, best_error = overhead, statistics.fmean(errors)
        return best

    def cost(self, candidate: Priced, dtype: str, shape: tuple[int, int, int], overhead: int | None = None) -> float:
        """Predicted ms of `candidate` at `shape`: its k-steps in every wave (Geometry.step_units)."""
        m, n, k = shape
        g = geometry(candidate.config.family, candidate.config.params, dtype, self.cc)
        overhead = self.overhead if overhead is None else overhead
        units = g.step_units(m, n, self.sm_count, LONE_SHARE)
        return (g.steps(k) + overhead) * candidate.tau * units + split_ms(m, n, g.splits, dtype)

    def candidates(self, dtype: str, deterministic: bool):
        """Each tuned tile, those whose schedules split K (Family.schedules: vector tiles, the
        tensor cores') with every K-split too (none when `deterministic`), as Priced records."""
        limits = GpuLimits.for_cc(self.cc)
        for key in sorted(self.taus, key=repr):
            tau, row = _median_entry(self.taus[key])
            schedules = kernels.family(row.family).schedules
            if schedules and schedules.split:
                tile = Schedules.tile_of(row.params)
                options = [schedules.config(tile, s) for s in SPLITS]
            else:
                options = [(row.family, dict(row.params))]
            for family, params in options:
                if deterministic and params.get("splits", 1) > 1:
                    continue
                if infeasibility(family, params, dtype, limits) is None:
                    yield Priced(Config.of(family, params), tau, row)

    def predict(self, shape: tuple[int, int, int], dtype: str, deterministic: bool = False) -> Prediction | None:
        candidates = list(self.candidates(dtype, deterministic))
        spanning = [c for c in candidates if covers_short_side(c.config.family, c.config.params, dtype, shape)]
        priced = [(self.cost(c, dtype, shape), c) for c in spanning or candidates]
        if not priced:
            return None
        ms, best = min(priced, key=lambda entry: entry[0])
        m, n, k = shape
        family, params, row = best.config.family, best.config.params, best.row
        g = geometry(family, params, dtype, self.cc)
        split = f", K split {g.splits} ways" if g.splits > 1 else ""
        basis = (f"cost model: the tile tuned for {row.m}x{row.n}x{row.k}{split}: {g.blocks(m, n)} blocks "
                 f"in {g.waves(m, n, self.sm_count)} waves of {self.sm_count}x{g.resident}, {g.steps(k)} k-steps "
                 f"each, predicted {ms:.3f} ms")
        return Prediction(family, params, ms, basis)


def _median_entry(entries: list[tuple[float, Row]]) -> tuple[float, Row]:
    """The (tau, row) of the median tau (the lower middle one of an even count)."""
    ordered = sorted(entries, key=lambda entry: (entry[0], entry[1].shape))
    return ordered[(len(ordered) - 1) // 2]


_models: dict[tuple, Model] = MEMOS.table("select.models")


def model_for(rows: list[Row], sm_count: int, cc: str) -> Model:
    """The model of these rows, fitted once per process (lookups of many shapes share it)."""
    key = (sm_count, cc, tuple(sorted(
        (r.m, r.n, r.k, r.dtype, r.family, repr(sorted(r.params.items())), r.median_ms or 0.0) for r in rows
    )))
    found = _models.get(key)
    if found is None:
        found = _models[key] = Model(rows, sm_count, cc)
    return found


def predict(shape: tuple[int, int, int], dtype: str, device, rows: list[Row],
            deterministic: bool = False) -> Prediction | None:
    """The cheapest candidate for `shape` on `device` (a backends.Device: its SM count and compute
    capability) by the model of `rows`, tuned rows usable on `device`; None without rows or SMs."""
    rows = [r for r in rows if r.dtype == dtype]
    if not rows or not device.sm_count:
        return None
    return model_for(rows, device.sm_count, device.cc).predict(shape, dtype, deterministic)


def similar_load(row: Row, shape: tuple[int, int, int], device) -> bool:
    """Whether `row`'s config loads `device` at `shape` about as it did at its own shape: within
    LOAD_FACTOR as many blocks, and waves at least WAVE_EFFICIENCY as full."""
    if not device.sm_count:
        return True
    if kernels.family(row.family).footprint is None:
        return False  # a load the model cannot tell: let it price the shape instead
    m, n, _ = shape
    g = geometry(row.family, row.params, row.dtype, device.cc)
    ratio = g.blocks(m, n) / g.blocks(row.m, row.n)
    sms = device.sm_count
    return (1 / LOAD_FACTOR <= ratio <= LOAD_FACTOR
            and g.efficiency(m, n, sms) >= WAVE_EFFICIENCY * g.efficiency(row.m, row.n, sms))


def covers_short_side(family: str, params: dict, dtype: str, shape: tuple[int, int, int]) -> bool:
    """Whether a config's tile spans a skinny C's short side (MIN_FIT_SIDE to SKINNY, its long side
    longer) in one block, so that its blocks read the long operand once: each further block along
    that side reads it again, which the steps the model prices do not show (docs/performance.md,
    step 61). True for a C that is not skinny (a small one included), for one of fewer rows or
    columns (the few-rows rule's: gemv reads B once a row of C), and for configs without a footprint."""
    m, n, _ = shape
    if not MIN_FIT_SIDE <= min(m, n) <= SKINNY < max(m, n) or kernels.family(family).footprint is None:
        return True
    bm, bn = kernels.family(family).footprint(params, dtype).tile
    return bm >= m if m <= n else bn >= n


def leave_one_out(rows: list[Row], device) -> list[dict]:
    """For each row: the config the model predicts for its shape from the rows of other shapes
    (a report for studies/loo.py)."""
    found = []
    for row in rows:
        others = [r for r in rows if r.shape != row.shape]
        prediction = predict(row.shape, row.dtype, device, others)
        found.append({
            "m": row.m, "n": row.n, "k": row.k, "dtype": row.dtype,
            "tuned_family": row.family, "tuned_params": row.params, "tuned_gflops": row.gflops,
            "tuned_ms": row.median_ms,
            "predicted_family": prediction and prediction.family, "predicted_params": prediction and prediction.config,
            "predicted_ms": prediction and prediction.predicted_ms, "basis": prediction and prediction.basis,
        })
    return found
