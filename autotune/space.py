"""The search space: each family's parameters as data, cut by the device's limits.

Nothing here compiles or launches a kernel except `compile_check`, which compiles for a target
architecture on the CPU to read the resources a config really uses.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields
from typing import Callable

import kernels
from autotune.precision import allows
from kernels.base import Config, DeviceLimits, all_configs

FAMILY_NAMES = tuple(kernels.FAMILIES)
#: the family whose DEFAULT config `matmul` falls back to: small tiles that suit any shape and
#: every dtype
DEFAULT_FAMILY = "register"


@dataclass(frozen=True)
class GpuLimits(DeviceLimits):
    """A device's limits and its compute capability ("" where unknown). The families'
    restrictions weigh resources; the compute capability decides which instructions a config may
    use (arch_infeasibility), so that a tune or a lookup on an older GPU never picks a kernel
    that cannot compile there."""

    cc: str = ""

    @classmethod
    def of(cls, limits: DeviceLimits, cc: str | None) -> "GpuLimits":
        return cls(**{f.name: getattr(limits, f.name) for f in fields(DeviceLimits)}, cc=cc or "")

    @classmethod
    def for_cc(cls, cc: str | tuple | None) -> "GpuLimits":
        key = "{}.{}".format(*cc) if isinstance(cc, tuple) else cc
        return cls.of(DeviceLimits.for_cc(key), key)


def device_limits() -> GpuLimits:
    """The current device's limits and compute capability (the defaults under the simulator, with
    the compute capability of the GPU it pretends to be)."""
    from autotune import backends

    backend = backends.current()
    return GpuLimits.of(backend.limits(), backend.device().cc)


#: the oldest compute capability whose PTX has the instructions a config may use: `cp.async`
#: (vector, splitk and streamk's async_copy), the 16-byte float32 atomic adds of the families that
#: add into C (`red.global.add.v4.f32`, kernels.intrinsics.reduce_add), and each mma.sync shape by
#: its kind (kernels.warp_mma)
ASYNC_COPY_CC = (8, 0)
VECTOR_ADD_CC = (9, 0)
MMA_CC = {("f64", "m8n8k4"): (8, 0), ("f64", "m16n8k4"): (9, 0), ("f64", "m16n8k8"): (9, 0),
          ("f64", "m16n8k16"): (9, 0), ("tf32", "m16n8k4"): (8, 0), ("tf32", "m16n8k8"): (8, 0)}
#: the FFMA families that add partial products into C
ADDING_FAMILIES = ("splitk", "streamk")
#: the tensor-core families and the mma kind they issue
MMA_KINDS = {"dmma": "f64", "tf32x3": "tf32"}


def arch_infeasibility(family: str, config: dict, dtype: str, cc: str | None) -> str | None:
    """Why `config` of `family` in `dtype` does not compile for compute capability `cc`, or None
    if it does (or `cc` is unknown)."""
    if not cc:
        return None
    needs = {"cp.async": ASYNC_COPY_CC if config.get("async_copy") else None,
             "red.global.add.v4.f32 (16-byte adds into C)": VECTOR_ADD_CC if _adds_vectors(family, dtype) else None,
             f"mma.sync {config.get('mma')}": MMA_CC.get((MMA_KINDS.get(family), config.get("mma")))}
    for instruction, arch in needs.items():
        if arch and _version(cc) < arch:
            return f"{instruction} needs compute capability {_cc(arch)}, this GPU has {cc}"
    return None


def _adds_vectors(family: str, dtype: str) -> bool:
    return family in ADDING_FAMILIES and dtype == "float32"


def infeasibility(family: str, config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    """Why `config` of `family` cannot run on a device with `limits` (and, for GpuLimits, its
    compute capability), or None if it can."""
    entry = kernels.family(family)
    unknown = set(config) ^ set(entry.space)
    if unknown:
        return f"parameters {sorted(unknown)} do not match family {family!r}"
    for name, value in config.items():
        if value not in entry.space[name]:
            return f"{name}={value!r} is not one of {entry.space[name]}"
    return entry.restrict(config, dtype, limits) or arch_infeasibility(family, config, dtype, getattr(limits, "cc", ""))


def feasible_configs(family: str, dtype: str, limits: DeviceLimits) -> list[dict]:
    entry, cc = kernels.family(family), getattr(limits, "cc", "")
    return [c for c in all_configs(entry.space)
            if entry.restrict(c, dtype, limits) is None and arch_infeasibility(family, c, dtype, cc) is None]


def families_for(dtype: str, cc: str | None = None, m: int | None = None, precision: str | None = None) -> list[str]:
    """The families whose kernels multiply `dtype` (whose restriction takes their default config
    in it) on a GPU of compute capability `cc` (None or "": any; runs_on), for products of `m`
    rows (None: any; ROW_FAMILIES), in a precision that `precision` allows (None: any;
    autotune.precision), in kernels.FAMILIES order: what a tune searches unless told."""
    return [name for name, entry in kernels.FAMILIES.items()
            if entry.restrict(entry.default, dtype, DeviceLimits()) is None and runs_on(name, dtype, cc)
            and (m is None or m <= ROW_FAMILIES.get(name, m))
            and (precision is None or allows(precision, entry.precision))]


def runs_on(family: str, dtype: str, cc: str | None) -> bool:
    """Whether GPUs of compute capability `cc` have the instructions of some config of `family`
    in `dtype`: a tensor-core family needs the oldest architecture of its instructions (MMA_CC),
    float32 split-K and stream-K the 16-byte atomic adds."""
    kind = MMA_KINDS.get(family)
    if kind:
        needs = min(arch for (of, _), arch in MMA_CC.items() if of == kind)
    else:
        needs = VECTOR_ADD_CC if _adds_vectors(family, dtype) else None
    return not cc or needs is None or _version(cc) >= needs


def _version(cc: str) -> tuple[int, ...]:
    return tuple(int(part) for part in cc.split("."))


def _cc(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def default_config(family: str) -> dict:
    return dict(kernels.family(family).default)


#: a family space of at most this many configs is enumerated to sample it; a larger one is drawn
#: from parameter by parameter, at most SAMPLE_DRAWS_PER_CONFIG draws per config asked for
ENUMERATED_SPACE, SAMPLE_DRAWS_PER_CONFIG = 20_000, 2_000


def sample_configs(family: str, dtype: str, limits: DeviceLimits, count: int, seed: int = 0,
                   accept: Callable[[dict], bool] | None = None) -> list[dict]:
    """`count` distinct feasible configs (that `accept` takes too, if given) drawn at random with
    `seed`, the family's default first where it qualifies; fewer where fewer are found; a
    ValueError where none is. A large space is sampled without enumerating it, so that a sample
    costs milliseconds whatever the space's size."""
    entry, rng = kernels.family(family), random.Random(seed)

    def qualifies(config: dict) -> bool:
        return infeasibility(family, config, dtype, limits) is None and (accept is None or accept(config))

    default = default_config(family)
    found = [default] if qualifies(default) else []
    if math.prod(len(values) for values in entry.space.values()) <= ENUMERATED_SPACE:
        rest = [c for c in all_configs(entry.space) if c != default and qualifies(c)]
        found += rng.sample(rest, min(max(count - len(found), 0), len(rest)))
    else:
        for _ in range(SAMPLE_DRAWS_PER_CONFIG * count):
            if len(found) >= count:
                break
            config = {name: rng.choice(values) for name, values in entry.space.items()}
            if config not in found and qualifies(config):
                found.append(config)
    if not found:
        raise ValueError(f"no {family} config runs here for {dtype}: {infeasibility(family, default, dtype, limits)}")
    return found[:count]


#: a product is skinny when its C is at most this many rows (or columns) wide
SKINNY = 64


#: what the shape rule's tiles are built with: a 4-stage pipeline of asynchronous copies
PIPELINE = {"pad": 4, "stages": 4, "unroll": True, "fragments": 1, "wide_fetch": True, "async_copy": True,
            "min_blocks": 1}
#: the rule's tiles, before fit_tile shrinks them to the shape: a skinny product's short side and
#: long side, and 64x64 tiles for shapes that 128x128 tiles would leave with fewer blocks than SMs
SKINNY_TILE = {"bm": 128, "bn": 128, "bk": 32, "tm": 8, "tn": 8}
FEW_TILE = {"bm": 64, "bn": 64, "bk": 32, "tm": 8, "tn": 4}
#: fit_tile's smallest side, the smallest register tile side the families take, and a warp
MIN_FIT_SIDE, MIN_FIT_THREAD_SIDE, MIN_FIT_THREADS = 16, 4, 32


def fit_tile(tile: dict, m: int, n: int, k: int) -> dict:
    """`tile` with each side longer than the product's shrunk to the next power of 2 that covers
    the product (at least MIN_FIT_SIDE), since rows and columns past C, and steps past K, are
    pure waste: BM to M, BN to N, BK to K. A shrunk side keeps its threads where it can, taking a
    smaller register tile (not under MIN_FIT_THREAD_SIDE); a block keeps a warp of threads."""
    fitted = dict(tile)
    for side, thread_side, length in (("bm", "tm", m), ("bn", "tn", n)):
        size = max(MIN_FIT_SIDE, 1 << (max(length, 1) - 1).bit_length())
        if size < tile[side]:
            threads = tile[side] // tile[thread_side]
            fitted[side] = size
            fitted[thread_side] = max(MIN_FIT_THREAD_SIDE, min(tile[thread_side], size // threads))

    def threads():
        return (fitted["bm"] // fitted["tm"]) * (fitted["bn"] // fitted["tn"])

    for side in ("bn", "bm"):
        while threads() < MIN_FIT_THREADS and fitted[side] < tile[side]:
            fitted[side] *= 2
    if "bk" in tile:
        fitted["bk"] = min(tile["bk"], max(8, 1 << (max(k, 1) - 1).bit_length()))
    return fitted


def shape_guesses(m: int, n: int, k: int, dtype: str, limits: DeviceLimits, sm_count: int,
                  cc: str | None = None) -> list[Config]:
    """Configs a rule picks for a shape that big square tiles would leave the GPU idle on:
    - skinny (M or N <= SKINNY): SKINNY_TILE fitted to the shape (fit_tile), so the short side is
      one tile of the next power of 2 and the long operand streams through once, with K split
      for two waves;
    - few tiles (fewer 128x128 tiles than SMs): FEW_TILE, whole and with K split for two waves.
    Each is a split-K config only where K leaves every split at least MIN_SPLIT_STEPS steps.
    float64 and float32 on a GPU of compute capability `cc` with tensor cores get their
    tensor-core tile first, whole and split for two waves (mma_guesses)."""
    guesses = mma_guesses(m, n, k, dtype, limits, sm_count, cc)
    tiles = []
    if min(m, n) <= SKINNY:
        tiles.append(fit_tile(SKINNY_TILE, m, n, k))
    elif -(-m // 128) * -(-n // 128) < sm_count:
        tiles.append(FEW_TILE)
    for tile in tiles:
        splits = wave_splits(m, n, k, tile, sm_count)
        family, params = ("splitk", {**tile, "splits": splits}) if splits > 1 else ("vector", tile)
        guesses += [_deepest(family, {**PIPELINE, **params}, dtype, limits), _deepest("vector", {**PIPELINE, **tile}, dtype, limits)]
    return list(dict.fromkeys(c for c in guesses if c is not None))


#: float64's tile on the FP64 tensor cores (kernels.dmma), with the instruction shape each compute
#: capability has: sm_90 adds 16-row ones to sm_80's m8n8k4
DMMA_TILE = {"bm": 64, "bn": 128, "bk": 16, "warps_m": 1, "warps_n": 4, "stages": 3, "min_blocks": 1}
DMMA_SHAPES = {(8, 0): "m8n8k4", (9, 0): "m16n8k4"}
#: float32's tile as three TF32 products (kernels.tf32x3), from sm_80 on
TF32X3_TILE = {"bm": 64, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 2, "stages": 3, "chunk": 2, "min_blocks": 1}
#: dtype -> the tensor-core family, its tile and the instruction shape by compute capability
MMA_TILES = {"float64": ("dmma", DMMA_TILE, DMMA_SHAPES), "float32": ("tf32x3", TF32X3_TILE, {(8, 0): "m16n8k8"})}
#: the data-center GPUs whose tensor cores multiply float64 and TF32 faster than their FFMA units;
#: others (sm_86, sm_89, sm_120) run the instructions at no more than their FFMA rate
FAST_TENSOR_CORES = {"8.0", "9.0", "10.0"}


def mma_guesses(m: int, n: int, k: int, dtype: str, limits: DeviceLimits, sm_count: int,
                cc: str | None) -> list[Config]:
    """The dtype's tensor-core tile (MMA_TILES) with the instruction of the newest architecture
    that `cc` runs, whole and with K split for two waves; none for other dtypes or GPUs without
    FAST_TENSOR_CORES."""
    if dtype not in MMA_TILES or cc not in FAST_TENSOR_CORES:
        return []
    family, tile, by_arch = MMA_TILES[dtype]
    shapes = [shape for arch, shape in sorted(by_arch.items()) if _version(cc) >= arch]
    if not shapes:
        return []
    tile = {**tile, "mma": shapes[-1]}
    splits = wave_splits(m, n, k, tile, sm_count)
    configs = [Config.of(family, {**tile, "splits": s}) for s in dict.fromkeys((splits, 1))]
    return [c for c in configs if infeasibility(c.family, c.params, dtype, limits) is None]


#: K-splits by wave arithmetic: double them while the blocks fill fewer than this many waves...
SPLIT_WAVES = 2
#: ...and every split keeps at least this many k-steps of BK
MIN_SPLIT_STEPS = 4
MAX_SPLITS = 128
#: how a candidate splits K (autotune.neighbours): not at all, for SPLIT_WAVES waves with
#: MIN_SPLIT_STEPS steps each, or "deep", for 8 waves with as few as 2 steps each, which a tiny
#: C over a long K needs to keep the SMs busy
SPLIT_POLICIES = {"whole": None, "split": (SPLIT_WAVES, MIN_SPLIT_STEPS), "deep": (8, 2)}


def wave_splits(m: int, n: int, k: int, tile: dict, sm_count: int, waves: int = SPLIT_WAVES,
                min_steps: int = MIN_SPLIT_STEPS) -> int:
    """How many ways to split K for a BM x BN tile: the fewest (a power of 2) giving `waves`
    waves of blocks over `sm_count` SMs, as long as each split keeps `min_steps` k-steps."""
    blocks = -(-m // tile["bm"]) * -(-n // tile["bn"])
    splits = 1
    while blocks * splits < waves * sm_count and k >= 2 * splits * min_steps * tile["bk"] and splits < MAX_SPLITS:
        splits *= 2
    return splits


#: products of fewer rows than the smallest tile (M < MIN_FIT_SIDE: a batch of a few, or the rows
#: left over by autotune.operands.peeled_rows): a 16-row tile of which only the first rows hold C,
#: B fetched through registers 16 bytes at a time, and K split for FEW_ROWS_WAVES waves of blocks
#: of at least FEW_ROWS_STEPS k-steps each (studies/step33_rows.py)
FEW_ROWS_TILE = {"bm": 16, "bn": 128, "bk": 16, "tm": 4, "tn": 8, "pad": 4, "stages": 1, "unroll": True,
                 "fragments": 1, "wide_fetch": True, "async_copy": False, "min_blocks": 1}
FEW_ROWS_WAVES, FEW_ROWS_STEPS = 3, 2
#: float32 products of at most GEMV_MAX_ROWS rows stream B once through the gemv family instead
#: (studies/step34_gemv.py), its tile by how B lies (layout[1]: "N", its rows in memory; "T",
#: its columns), K split into the most shares (a power of 2) that keep GEMV_SPLIT_K[layout[1]]
#: k's each within GEMV_WAVES blocks per SM
GEMV_MAX_ROWS = 4
GEMV_TILES = {"N": {"cols": 64, "threads": 256, "unroll": 4}, "T": {"cols": 16, "threads": 256, "unroll": 4}}
GEMV_SPLIT_K = {"N": 128, "T": 1024}
GEMV_WAVES = 8
#: families searched only for products of at most this many rows (a tune of more would time
#: kernels that read B once per few rows)
ROW_FAMILIES = {"gemv": 16}


def few_rows_guess(m: int, n: int, k: int, dtype: str, limits: DeviceLimits, sm_count: int,
                   deterministic: bool = False, layout: str = "NN") -> Config | None:
    """The rule's config for a product of M < MIN_FIT_SIDE rows in `layout`: the gemv tile for
    float32 products of at most GEMV_MAX_ROWS rows, else FEW_ROWS_TILE, with K split by the rule
    (not split where `deterministic`); None for other shapes or where it cannot run."""
    if m >= MIN_FIT_SIDE or not sm_count:
        return None
    if m <= GEMV_MAX_ROWS and dtype == "float32":
        b = layout[1]
        tile = {**GEMV_TILES[b], "rows": 1 << (m - 1).bit_length()}
        tiles = -(-n // tile["cols"])
        splits = 1
        while (not deterministic and splits < MAX_SPLITS and k >= 2 * splits * GEMV_SPLIT_K[b]
               and tiles * splits * 2 <= GEMV_WAVES * sm_count):
            splits *= 2
        config = Config.of("gemv", {**tile, "splits": splits})
    else:
        splits = 1 if deterministic else wave_splits(m, n, k, FEW_ROWS_TILE, sm_count, FEW_ROWS_WAVES, FEW_ROWS_STEPS)
        config = Config.of("splitk", {**FEW_ROWS_TILE, "splits": splits}) if splits > 1 else Config.of("vector", FEW_ROWS_TILE)
    return config if infeasibility(config.family, config.params, dtype, limits) is None else None


#: products whose K is a few k-steps (K <= SMALL_K, both sides wider than SKINNY) and whose C makes
#: at most SMALL_K_TILES_PER_SM of these tiles an SM: a 64x64 tile of 128 threads through
#: registers, so that several blocks share an SM and hide the short k-loop's latency and C's
#: stores, with BK 16 or 8, whichever pads K less (studies/step34_smallk.py); a larger C is
#: bound by its stores, which the measured table's bigger tiles make faster
SMALL_K = 64
SMALL_K_TILES_PER_SM = 24
SMALL_K_TILE = {"bm": 64, "bn": 64, "tm": 8, "tn": 4, "pad": 4, "stages": 1, "unroll": True, "fragments": 1,
                "wide_fetch": True, "async_copy": False, "min_blocks": 1}
SMALL_K_STEPS = (16, 8)


def small_k_guess(m: int, n: int, k: int, dtype: str, limits: DeviceLimits, sm_count: int) -> Config | None:
    """The rule's config for a float32 product of K <= SMALL_K whose sides are both wider than
    SKINNY and whose C fits SMALL_K_TILES_PER_SM tiles an SM: SMALL_K_TILE with the BK of
    SMALL_K_STEPS that leaves the fewest zeros in the last k-step (the first on a tie); None for
    other products, an unknown SM count, or where it cannot run."""
    tiles = -(-m // SMALL_K_TILE["bm"]) * -(-n // SMALL_K_TILE["bn"])
    if dtype != "float32" or k > SMALL_K or min(m, n) <= SKINNY or tiles > SMALL_K_TILES_PER_SM * sm_count:
        return None
    bk = min(SMALL_K_STEPS, key=lambda step: -k % step)
    config = Config.of("vector", {**SMALL_K_TILE, "bk": bk})
    return config if infeasibility(config.family, config.params, dtype, limits) is None else None


#: stream-K blocks per SM of a tuned tile's twin (stream_twin) and of the measured table's "stream"
#: candidates (kernels.streamk): two blocks of a tile share an SM where one would leave it
#: latency-bound
STREAM_WORKERS = 2


def stream_twin(config: Config) -> Config | None:
    """The stream-K config (kernels.streamk) of a vector or splitk config's tile, on
    STREAM_WORKERS blocks per SM; None for other families."""
    if config.family not in ("vector", "splitk"):
        return None
    tile = {k: v for k, v in config.params.items() if k != "splits"}
    return Config.of("streamk", {**tile, "workers_per_sm": STREAM_WORKERS})


def policy_splits(policy: str, m: int, n: int, k: int, tile: dict, sm_count: int) -> int:
    """The K-splits SPLIT_POLICIES[policy] gives a tile at (M, N, K)."""
    rule = SPLIT_POLICIES[policy]
    return 1 if rule is None else wave_splits(m, n, k, tile, sm_count, *rule)


#: the pipelines the shape rule tries, deepest first: cp.async stages, then (on GPUs without
#: cp.async) tiles double-buffered through registers
PIPELINES = ({"stages": 4}, {"stages": 3}, {"stages": 2}, {"stages": 2, "async_copy": False})


def _deepest(family: str, params: dict, dtype: str, limits: DeviceLimits) -> Config | None:
    """The config with the deepest of PIPELINES that `limits` allow."""
    for pipeline in PIPELINES:
        config = Config.of(family, {**params, **pipeline})
        if infeasibility(family, config.params, dtype, limits) is None:
            return config
    return None


def ordinal(values: list) -> bool:
    """Numbers with more than two choices are searched as an ordered scale (an index into the
    sorted values), so the sampler can learn that 128 lies between 64 and 256."""
    return len(values) > 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def suggest(trial, families: list[str], dtype: str) -> Config:
    """Ask an Optuna trial for a family and its parameters (named "family.param")."""
    family = trial.suggest_categorical("family", list(families))
    params = {}
    for name, values in kernels.family(family).space.items():
        key = f"{family}.{name}"
        if ordinal(values):
            params[name] = values[trial.suggest_int(key, 0, len(values) - 1)]
        else:
            params[name] = trial.suggest_categorical(key, values)
    return Config.of(family, params)


def distributions(families: list[str]) -> dict:
    """The Optuna distribution of every parameter `suggest` may ask for, by name: a study whose
    trials used other ones was searched over another space (other families, or older code)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    found = {"family": CategoricalDistribution(list(families))}
    for family in families:
        for name, values in kernels.family(family).space.items():
            ordered = ordinal(values)
            found[f"{family}.{name}"] = IntDistribution(0, len(values) - 1) if ordered else CategoricalDistribution(values)
    return found


def trial_params(config: Config) -> dict:
    """The Optuna parameters that `suggest` records for `config`: for enqueueing."""
    space = kernels.family(config.family).space
    params = {"family": config.family}
    for name, value in config.items:
        params[f"{config.family}.{name}"] = space[name].index(value) if ordinal(space[name]) else value
    return params


def config_of(params: dict) -> Config:
    """The config of a trial that `suggest` filled, from its Optuna parameters."""
    family = params["family"]
    space = kernels.family(family).space
    return Config.of(family, {
        name: values[params[f"{family}.{name}"]] if ordinal(values) else params[f"{family}.{name}"]
        for name, values in space.items()
    })


@dataclass(frozen=True)
class CompileCheck:
    family: str
    config: dict
    dtype: str
    resources: dict | None  # kernels.resources.Resources as a dict
    error: str | None  # compile failure, or the resource problem that keeps it from running

    @property
    def ok(self) -> bool:
        return self.error is None


def compile_check(
    family: str, configs: list[dict], dtype: str, limits: DeviceLimits, cc: tuple[int, int] = (9, 0)
) -> list[CompileCheck]:
    """Compile each config for `cc` on the CPU and read registers, spills and shared memory."""
    from kernels.resources import compile_report, require_compiler

    require_compiler()
    results = []
    for config in configs:
        kernel = kernels.build(family, config, dtype)
        try:
            resources = compile_report(kernel, cc)
        except Exception as error:  # any compiler failure is this config's verdict, not ours
            results.append(CompileCheck(family, config, dtype, None, f"{type(error).__name__}: {error}"))
            continue
        problem = resources.problem(kernel.threads, limits)
        results.append(CompileCheck(family, config, dtype, resources.as_dict(), problem))
    return results
