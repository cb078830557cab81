"""The shape rules: the configs a cold tune tries first and the ones lookup guesses for
shapes no row serves (few rows, short K, the tensor cores' tiles), with K split by waves.
"""

from __future__ import annotations

import kernels
from autotune.space.configs import GpuLimits, infeasibility
from kernels.contract import Config, DeviceLimits, Family, Product
from kernels.rules import unaligned_for

#: how the rule's tiles (and the measured tables', autotune.select.neighbours) are computed whole,
#: with K split or streamed: the schedules of the family whose configs they are (Family.rule_tiles)
TILE_SCHEDULES = next(entry.schedules for entry in kernels.FAMILIES.values() if entry.rule_tiles)


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


def shape_guesses(shape: tuple[int, int, int], dtype: str, gpu: GpuLimits) -> list[Config]:
    """Configs a rule picks for a shape that big square tiles would leave the GPU idle on:
    - skinny (M or N <= SKINNY): SKINNY_TILE fitted to the shape (fit_tile), so the short side is
      one tile of the next power of 2 and the long operand streams through once, with K split
      for two waves;
    - few tiles (fewer 128x128 tiles than SMs): FEW_TILE, whole and with K split for two waves.
    Each is a split-K config only where K leaves every split at least MIN_SPLIT_STEPS steps.
    The families' own first tiles for the dtype on a GPU of `gpu`'s compute capability come first,
    whole and split for two waves (first_tile_guesses): float64 and float32 on GPUs with fast
    tensor cores get their tensor-core tile."""
    m, n, k = shape
    limits, sm_count = gpu, gpu.sm_count
    guesses = first_tile_guesses(shape, dtype, gpu)
    tiles = []
    if min(m, n) <= SKINNY:
        tiles.append(fit_tile(SKINNY_TILE, m, n, k))
    elif -(-m // 128) * -(-n // 128) < sm_count:
        tiles.append(FEW_TILE)
    for tile in tiles:
        splits = wave_splits(shape, tile, sm_count)
        guesses += [_deepest(TILE_SCHEDULES.config({**PIPELINE, **tile}, splits), dtype, limits),
                    _deepest(TILE_SCHEDULES.config({**PIPELINE, **tile}), dtype, limits)]
    return list(dict.fromkeys(c for c in guesses if c is not None))


def first_tile_guesses(shape: tuple[int, int, int], dtype: str, gpu: GpuLimits) -> list[Config]:
    """Each family's first tile for `dtype` on `gpu` (Family.first_tile: the tensor-core families'
    on GPUs whose tensor cores are fast), and its few tile where the first tile's blocks would
    give fewer than FEW_BLOCKS_PER_SM an SM (Family.few_tile), after its skinny tile where C is
    skinny, at most SKINNY on one side and longer on the other (Family.skinny_tile); each whole
    and with K split for two waves where its schedules split K; those that can run."""
    limits, sm_count, cc = gpu, gpu.sm_count, gpu.cc or None
    m, n, _ = shape
    configs = []
    for entry in kernels.FAMILIES.values():
        tile = entry.first_tile(dtype, cc) if entry.first_tile else None
        if tile is None:
            continue
        tiles = [tile]
        few = entry.few_tile(dtype, cc) if entry.few_tile else None
        if few and -(-m // tile["bm"]) * -(-n // tile["bn"]) < FEW_BLOCKS_PER_SM * sm_count:
            tiles.append(few)
        skinny = entry.skinny_tile(dtype, cc, m, n) if entry.skinny_tile and min(m, n) <= SKINNY < max(m, n) else None
        if skinny:
            tiles.insert(0, skinny)  # the likeliest to win goes first
        schedules = entry.schedules
        for tile in tiles:
            step = {"bk": entry.footprint(tile, dtype).bk} if entry.footprint else {}  # a K-step of its own
            splits = wave_splits(shape, {**tile, **step}, sm_count) if schedules and schedules.split else 1
            configs += [Config.of(*schedules.config(tile, s)) if schedules else Config.of(entry.name, tile)
                        for s in dict.fromkeys((splits, 1))]
    return [c for c in configs if infeasibility(c.family, c.params, dtype, limits) is None]


#: a family's few tile joins its first where the first tile's blocks give an SM fewer than this
FEW_BLOCKS_PER_SM = 2


#: K-splits by wave arithmetic: double them while the blocks fill fewer than this many waves...
SPLIT_WAVES = 2


#: ...and every split keeps at least this many k-steps of BK
MIN_SPLIT_STEPS = 4


MAX_SPLITS = 128


#: how a candidate splits K (autotune.select.neighbours): not at all, for SPLIT_WAVES waves with
#: MIN_SPLIT_STEPS steps each, or "deep", for 8 waves with as few as 2 steps each, which a tiny
#: C over a long K needs to keep the SMs busy
SPLIT_POLICIES = {"whole": None, "split": (SPLIT_WAVES, MIN_SPLIT_STEPS), "deep": (8, 2)}


def wave_splits(shape: tuple[int, int, int], tile: dict, sm_count: int, waves: int = SPLIT_WAVES,
                min_steps: int = MIN_SPLIT_STEPS) -> int:
    """How many ways to split K for a BM x BN tile at `shape` (M, N, K): the fewest (a power of 2)
    giving `waves` waves of blocks over `sm_count` SMs, as long as each split keeps `min_steps` k-steps."""
    m, n, k = shape
    blocks = -(-m // tile["bm"]) * -(-n // tile["bn"])
    splits = 1
    while blocks * splits < waves * sm_count and k >= 2 * splits * min_steps * tile["bk"] and splits < MAX_SPLITS:
        splits *= 2
    return splits


#: products of fewer rows than the smallest tile (M < MIN_FIT_SIDE: a batch of a few, or the rows
#: left over by kernels.rules.peeled_rows): a 16-row tile of which only the first rows hold C,
#: B fetched through registers 16 bytes at a time, and K split for FEW_ROWS_WAVES waves of blocks
#: of at least FEW_ROWS_STEPS k-steps each (step 33; studies/step33_rows.py at 9c578e9)
FEW_ROWS_TILE = {"bm": 16, "bn": 128, "bk": 16, "tm": 4, "tn": 8, "pad": 4, "stages": 1, "unroll": True,
                 "fragments": 1, "wide_fetch": True, "async_copy": False, "min_blocks": 1}


FEW_ROWS_WAVES, FEW_ROWS_STEPS = 3, 2


def few_rows_guess(shape: tuple[int, int, int], dtype: str, gpu: GpuLimits, deterministic: bool = False,
                   layout: str = "NN") -> Config | None:
    """The rule's config for a product of M < MIN_FIT_SIDE rows in `layout`: the first family's
    own (Family.few_rows_config: kernels.gemv's for float32 and float64 products of a few rows),
    else FEW_ROWS_TILE, with K split by the rule (not split where `deterministic`); None for
    other shapes or where it cannot run."""
    m, n, k = shape
    limits, sm_count = gpu, gpu.sm_count
    if m >= MIN_FIT_SIDE or not sm_count:
        return None
    config = _family_few_rows(Product(m=m, n=n, k=k, dtype=dtype, layout=layout), sm_count, deterministic)
    if config is None:
        splits = 1 if deterministic else wave_splits(shape, FEW_ROWS_TILE, sm_count, FEW_ROWS_WAVES, FEW_ROWS_STEPS)
        config = Config.of(*TILE_SCHEDULES.config(FEW_ROWS_TILE, splits))
    return config if infeasibility(config.family, config.params, dtype, limits) is None else None


def _family_few_rows(product: Product, sm_count: int, deterministic: bool) -> Config | None:
    """The first family's own config for a product of a few rows (Family.few_rows_config), or None."""
    for entry in kernels.FAMILIES.values():
        params = entry.few_rows_config(product, sm_count, deterministic) if entry.few_rows_config else None
        if params is not None:
            return Config.of(entry.name, params)
    return None


#: products whose K is a few k-steps are bound by latency (the short k-loop, C's stores, the
#: launch), which more blocks an SM hide (steps 34, 56 and 57; studies/h200/step56/, step57/):
#: - K <= SHORT_K; past SMALL_K only where C makes at least SHORT_K_MIN_TILES_PER_SM 32x64 tiles
#:   an SM (neither tile below serves a smaller C), since fewer blocks gain more from the measured
#:   table's K-splits;
#: - where C makes at most SHORT_K_TILES_PER_SM 32x64 tiles an SM: SHORT_K_TILE, each block
#:   copying its tiles 2 k-steps ahead, with the BK of SMALL_K_STEPS that leaves the fewest zeros
#:   in the last k-step (16 on a tie);
#: - else, where both sides are wider than SKINNY, and K <= SMALL_K (any C) or C makes at most
#:   SMALL_K_TILES_PER_SM 64x64 tiles an SM: the 64x64 tile, 8 terms a k-step. It
#:   fetches its tiles through registers (SMALL_K_TILE), 16 bytes a load, where B's rows are
#:   16-byte aligned and C makes at least REGISTER_MIN_TILES_PER_SM of its tiles an SM; else, B
#:   fetched element by element or too few blocks to hide one tile's fetch behind another's
#:   products, it copies them asynchronously 2 k-steps ahead (SMALL_K_COPIED_TILE), where the GPU
#:   can.
SHORT_K = 160


SHORT_K_TILES_PER_SM, SHORT_K_MIN_TILES_PER_SM = 3, 0.2


SMALL_K = 64


SMALL_K_TILES_PER_SM, REGISTER_MIN_TILES_PER_SM = 15, 4


SHORT_K_TILE = {"bm": 32, "bn": 64, "tm": 4, "tn": 4, "pad": 4, "stages": 3, "unroll": True, "fragments": 1,
                "wide_fetch": True, "async_copy": True, "min_blocks": 1}


SMALL_K_TILE = {"bm": 64, "bn": 64, "bk": 8, "tm": 8, "tn": 4, "pad": 4, "stages": 1, "unroll": True, "fragments": 1,
                "wide_fetch": True, "async_copy": False, "min_blocks": 1}


SMALL_K_COPIED_TILE = {**SMALL_K_TILE, "stages": 3, "async_copy": True}


SMALL_K_STEPS = (16, 8)


def small_k_guess(shape: tuple[int, int, int], dtype: str, gpu: GpuLimits, layout: str = "NN") -> Config | None:
    """The rule's config for a float32 product of a short K in `layout` (see SHORT_K):
    SHORT_K_TILE, SMALL_K_TILE or SMALL_K_COPIED_TILE (else SMALL_K_TILE where the GPU has no
    asynchronous copies); None for other products, an unknown SM count, or where none can run."""
    m, n, k = shape
    sm_count = gpu.sm_count
    if dtype != "float32" or not sm_count or min(m, n) < MIN_FIT_SIDE:
        return None
    per_sm, square_tiles_per_sm = _tiles(m, n, SHORT_K_TILE) / sm_count, _tiles(m, n, SMALL_K_TILE) / sm_count
    if k > SHORT_K or (k > SMALL_K and per_sm < SHORT_K_MIN_TILES_PER_SM):
        return None
    if per_sm <= SHORT_K_TILES_PER_SM:
        tiles = [{**SHORT_K_TILE, "bk": min(SMALL_K_STEPS, key=lambda step: -k % step)}]
    elif min(m, n) > SKINNY and (k <= SMALL_K or square_tiles_per_sm <= SMALL_K_TILES_PER_SM):
        aligned_b = "B" not in unaligned_for(m, n, k, layout, dtype)
        registers = aligned_b and square_tiles_per_sm >= REGISTER_MIN_TILES_PER_SM
        tiles = [SMALL_K_TILE] if registers else [SMALL_K_COPIED_TILE, SMALL_K_TILE]  # no cp.async before sm_80
    else:
        return None
    configs = [Config.of(*TILE_SCHEDULES.config(tile)) for tile in tiles]
    return next((config for config in configs if infeasibility(config.family, config.params, dtype, gpu) is None), None)


#: a product of a small C and little work, which a family's small tiles serve (Family.small_tiles;
#: steps 61 to 63, studies/h200/step62/ and step63/): at most SMALL_C_WORK multiply-adds (past it a
#: long K wants K split on larger tiles: LONG_K_WORK) and both sides at least MIN_FIT_SIDE (fewer rows
#: are the few-rows rule's). Where C makes more than SMALL_C_TIER_BOUNDS[i] of the first tier's tile an SM,
#: tier i + 1's tile serves; a third tier's only where it pads C by at most SMALL_C_PAD_SLACK more than
#: the second's. Only the first tier's splits K
SMALL_C_TIER_BOUNDS, SMALL_C_PAD_SLACK, SMALL_C_WORK = (2, 8), 1.05, 1 << 26

#: past SMALL_C_WORK, a C of more than SMALL_C_TIER_BOUNDS[0] of the first tier's tile an SM over a K of at
#: most TIERS_MAX_K (TIERS_MAX_K_B_T where B is passed transposed, as in NT and TT: past it the records'
#: 128-wide tiles won in NT) takes its tier's squarest tile whole, however much it pads C, where C's short
#: side spans the tile (no shorter one was measured): over such a K a block's k-loop, not C's padding, is
#: most of its time (step 65, studies/h200/step65/)
TIERS_MAX_K, TIERS_MAX_K_B_T = 512, 256

#: a skinny C over a long K (step 64, studies/h200/step64/): more than SMALL_C_WORK and at most
#: LONG_K_WORK multiply-adds (the most measured), C's short side at most LONG_K_SHORT_SIDE, its long
#: side at least the tile's (no smaller C was measured) and at most SMALL_C_TIER_BOUNDS[0] of the first
#: small tier's tile an SM (so a family with a long-K tile has small tiles too): the family's long-K
#: tile (Family.long_k_tile) with K split for two waves; never where deterministic (whole, each block
#: would run all of K)
LONG_K_SHORT_SIDE, LONG_K_WORK = 96, 1 << 30


def small_c_guess(shape: tuple[int, int, int], dtype: str, gpu: GpuLimits, deterministic: bool = False,
                  layout: str = "NN") -> Config | None:
    """The first family's tile for a small C (_small_c_tile), K split for SPLIT_WAVES waves where its
    rule splits, as far as its space's splits go (not split where `deterministic`, and no long-K tile
    then). None for other products, an unknown SM count, or where it cannot run."""
    m, n, k = shape
    if not gpu.sm_count or min(m, n) < MIN_FIT_SIDE:
        return None
    for entry in kernels.FAMILIES.values():
        chosen = _small_c_tile(entry, shape, dtype, gpu, deterministic, layout)
        if chosen is None:
            continue
        tile, split = chosen
        most = max(entry.space.get("splits", [1]))
        splits = min(wave_splits(shape, tile, gpu.sm_count), most) if split and not deterministic else 1
        config = Config.of(*entry.schedules.config(tile, splits)) if entry.schedules else Config.of(entry.name, tile)
        if infeasibility(config.family, config.params, dtype, gpu) is None:
            return config
    return None


def _small_c_tile(entry: Family, shape: tuple[int, int, int], dtype: str, gpu: GpuLimits,
                  deterministic: bool, layout: str) -> tuple[dict, bool] | None:
    """A family's tile for a small C and whether its rule splits K: of its small tiles in tiers for
    little work (SMALL_C_WORK) or a C of more tiles over a short K (TIERS_MAX_K in `layout`), its long-K
    tile for a skinny C of few tiles over a long K (LONG_K_WORK)."""
    m, n, k = shape
    tiers = entry.small_tiles(dtype, gpu.cc or None) if entry.small_tiles else ()
    if not tiers:
        return None
    if m * n * k <= SMALL_C_WORK:
        tile = _small_tile(m, n, tiers, gpu.sm_count)
        return tile, tile in tiers[0]
    few = _tiles(m, n, tiers[0][0]) <= SMALL_C_TIER_BOUNDS[0] * gpu.sm_count
    if not few and k <= (TIERS_MAX_K_B_T if layout[1] == "T" else TIERS_MAX_K):
        tile = tiers[_tier(m, n, tiers, gpu.sm_count)][0]  # the squarest (Family.small_tiles)
        return (tile, False) if min(m, n) >= max(tile["bm"], tile["bn"]) else None
    if deterministic or not (entry.long_k_tile and few and min(m, n) <= LONG_K_SHORT_SIDE and m * n * k <= LONG_K_WORK):
        return None
    tile = entry.long_k_tile(dtype, gpu.cc or None, m, n)
    return (tile, True) if tile and max(m, n) >= max(tile["bm"], tile["bn"]) else None


def _tier(m: int, n: int, tiers: tuple[tuple[dict, ...], ...], sm_count: int) -> int:
    """The tier of an M x N C: the first, then the next past each of SMALL_C_TIER_BOUNDS of the first
    tier's tile an SM."""
    per_sm = _tiles(m, n, tiers[0][0]) / sm_count
    return sum(per_sm > bound for bound in SMALL_C_TIER_BOUNDS[:len(tiers) - 1])


def _small_tile(m: int, n: int, tiers: tuple[tuple[dict, ...], ...], sm_count: int) -> dict:
    """The tile of `tiers` small_c_guess takes for an M x N C of little work."""
    per_sm = _tiles(m, n, tiers[0][0]) / sm_count
    chosen = tiers[0][0]
    for bound, tier in zip(SMALL_C_TIER_BOUNDS, tiers[1:]):
        if per_sm <= bound:
            break
        tile = min(tier, key=lambda t: _padded_area(m, n, t))
        if chosen in tiers[0] or _padded_area(m, n, tile) <= SMALL_C_PAD_SLACK * _padded_area(m, n, chosen):
            chosen = tile
    return chosen


def _padded_area(m: int, n: int, tile: dict) -> int:
    return _tiles(m, n, tile) * tile["bm"] * tile["bn"]


def _tiles(m: int, n: int, tile: dict) -> int:
    return -(-m // tile["bm"]) * -(-n // tile["bn"])


#: stream-K blocks per SM of a tuned tile's twin (stream_twin) and of the measured table's "stream"
#: candidates (kernels.streamk): two blocks of a tile share an SM where one would leave it
#: latency-bound
STREAM_WORKERS = 2


def stream_twin(config: Config) -> Config | None:
    """The stream-K config of the tile of a config computed whole or with K split, on
    STREAM_WORKERS blocks per SM (Family.schedules: kernels.streamk for vector and splitk tiles);
    None for a family whose tiles do not stream, or streamed already."""
    entry = kernels.FAMILIES.get(config.family)
    schedules = entry and entry.schedules
    if not schedules or schedules.stream in (None, config.family):
        return None
    return Config.of(*schedules.config(schedules.tile_of(config.params), workers_per_sm=STREAM_WORKERS))


def policy_splits(policy: str, shape: tuple[int, int, int], tile: dict, sm_count: int) -> int:
    """The K-splits SPLIT_POLICIES[policy] gives a tile at `shape` (M, N, K)."""
    rule = SPLIT_POLICIES[policy]
    return 1 if rule is None else wave_splits(shape, tile, sm_count, *rule)


#: the pipelines the shape rule tries, deepest first: cp.async stages, then (on GPUs without
#: cp.async) tiles double-buffered through registers
PIPELINES = ({"stages": 4}, {"stages": 3}, {"stages": 2}, {"stages": 2, "async_copy": False})


def _deepest(scheduled: tuple[str, dict], dtype: str, limits: DeviceLimits) -> Config | None:
    """The (family, params) with the deepest of PIPELINES that `limits` allow."""
    family, params = scheduled
    for pipeline in PIPELINES:
        config = Config.of(family, {**params, **pipeline})
        if infeasibility(family, config.params, dtype, limits) is None:
            return config
    return None
