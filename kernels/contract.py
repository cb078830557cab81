"""The family contract: what a family module declares, and the records the tuner, the model and the
lookup read from it (device limits, configs, footprints, schedules). Numba-free, like kernels.rules.

A family is a module that defines `FAMILY = Family(...)`; adding a family is
adding its module, and nothing in autotune switches on a family's name: what a stage needs to
know of a family, it asks the Family. kernels.registry finds the families in
  - every module of this package that defines FAMILY, and
  - every module named in the environment variable MMTUNE_FAMILIES, `module[,module...]`
    (importable from sys.path, e.g. through PYTHONPATH): a family outside this package, e.g.
    `MMTUNE_FAMILIES=myfamilies.toy mmtune tune --family toy ...`. Set it for every process that
    tunes, looks up or calls the family (tuning workers inherit it). Such a module imports from
    kernels.base, not kernels.FAMILIES (the registry is importing it), and its family's name must
    be new.
Its source is hashed with the kernels modules it uses (kernels.source_hash): a change to it makes
its tuned rows stale. A Family gives
  name            what its configs and rows are keyed by; its kernels' `family` too
  space           {parameter: [values]}, its search space as plain data
  default         a config that runs wherever the family runs at all: its most portable one
  restrict        restrict(config, dtype, limits) -> why the config cannot run there, or None
  build           build(config, dtype, layout, offset_bits, unaligned) -> Kernel, for operands
                  in `layout` (LAYOUTS), `offset_bits`-bit element offsets and the operands
                  named in `unaligned` having rows that are not 16-byte aligned (both may be
                  ignored where the kernel indexes as Numba does); kernels/naive.py is the smallest.
                  Its function takes (A, B, C, bias=None): its epilogue adds bias[col] to C's
                  elements when given (a kernel adding into C adds it from the block whose part
                  of K starts at 0 only), under `if bias is not None:`, which Numba compiles
                  away where the argument is omitted (kernels.base.Kernel.with_bias). A function
                  of (A, B, C) serves products without a bias only
  first_guess     where a cold study tries its default: lower first
  shared_bytes    shared_bytes(config, dtype) -> static shared memory, where it uses some
  precision       "ieee" or "tf32x3" (autotune.space.precision)
and, where they apply (their defaults suit a family without them):
  instructions    instructions(config, dtype) -> {instruction: the oldest (major, minor) compute
                  capability whose PTX has it}, for those not every GPU has (default: none). An
                  older GPU runs no such config, and none of the family where its default needs
                  one (Family.oldest_arch)
  max_rows        searched only for products of at most this many rows (default: any)
  footprint       footprint(config, dtype) -> Footprint, what the cost model (autotune.select.model)
                  prices a block by; without one the model leaves the family's rows out
  schedules       a Schedules record naming the families that compute one tile whole, with K
                  split, or stream-K; the cost model, the shape rules and the measured tables
                  move a tile between them (a family splitting K by its own `splits` names itself)
  first_tile      first_tile(dtype, cc) -> the tile a cold tune tries first on a GPU of compute
                  capability `cc`, whole and split by its schedules, or None
  few_tile        few_tile(dtype, cc) -> a smaller tile it also tries first where the first tile's
                  blocks would not give every SM two, or None
  skinny_tile     skinny_tile(dtype, cc, m, n) -> a tile it also tries first where an M x N C is
                  skinny, or None
  small_tiles     small_tiles(dtype, cc) -> the tiles, in tiers of one area, each tier's squarest
                  first, from which a rule picks the one lookup serves a product of a small C that no
                  row serves exactly, or ()
  long_k_tile     long_k_tile(dtype, cc, m, n) -> the tile lookup serves, K split by a rule, a skinny
                  M x N C of few tiles over a long K, or None
  few_rows_config few_rows_config(product, sm_count, deterministic) -> its params for a Product
                  of fewer rows than the shape rules' smallest tile, or None; `summary` says how
                  its kernels compute, in lookup's reasons
  rule_tiles      its configs are the tiles the shape rules and the measured tables hold without
                  a family name (one family: kernels.vector)
  fallback        its default is what a lookup falls back to where nothing else serves (one family)
Split-K and stream-K kernels take the parameters SCHEDULE_PARAMS names: `splits` blocks per tile
along K, `workers_per_sm` stream-K blocks per SM; either makes a kernel add into C, zeroed first
(kernels.rules.adds_into_c).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Callable

from .rules import DEFAULT_DYNAMIC_SHARED, Arch


@dataclass(frozen=True)
class DeviceLimits:
    """What a block may use. Defaults are those of every GPU since Volta (sm_70..sm_90)."""

    max_threads_per_block: int = 1024
    max_shared_per_block: int = DEFAULT_DYNAMIC_SHARED  # static shared memory; more needs dynamic shared memory
    max_registers_per_thread: int = 255
    max_registers_per_block: int = 64 * 1024
    max_threads_per_sm: int = 2048  # 1536 on sm_86/sm_89
    #: shared memory a block may opt in to as dynamic shared memory (the 48 KB of static shared
    #: memory is what every device allows; see for_cc)
    max_dynamic_shared_per_block: int = DEFAULT_DYNAMIC_SHARED

    @classmethod
    def for_cc(cls, cc: str | tuple | None) -> "DeviceLimits":
        """The defaults, with the dynamic shared memory GPUs of compute capability `cc` allow
        (cudaDevAttrMaxSharedMemoryPerBlockOptin, by architecture)."""
        if not cc:
            return cls()
        return cls(max_dynamic_shared_per_block=OPT_IN_SHARED.get(str(Arch.of(cc)), DEFAULT_DYNAMIC_SHARED))

OPT_IN_SHARED = {
    "7.0": 96 * 1024, "7.2": 96 * 1024, "7.5": 64 * 1024, "8.0": 163 * 1024, "8.6": 99 * 1024, "8.7": 163 * 1024,
    "8.9": 99 * 1024, "9.0": 227 * 1024, "10.0": 227 * 1024, "12.0": 99 * 1024,
}

def all_configs(space: dict[str, list]) -> list[dict]:
    """The cartesian product of a family's SPACE, feasible or not."""
    names = list(space)
    return [dict(zip(names, values)) for values in itertools.product(*space.values())]

@dataclass(frozen=True)
class Product:
    """An (M x K) @ (K x N) product as a family's shape rule sees it: sizes, element type and the
    layout its operands come in (LAYOUTS)."""

    m: int
    n: int
    k: int
    dtype: str
    layout: str = "NN"

@dataclass(frozen=True)
class Footprint:
    """What a block of one config takes, as the cost model (autotune.select.model) prices it:
    the tile of C it computes, the k's it advances a step, its threads, the registers a thread
    is estimated to hold (ptxas caps them at DeviceLimits.max_registers_per_thread) and its
    shared memory, which decide how many blocks share an SM."""

    tile: tuple[int, int]
    bk: int
    threads: int
    registers: int
    shared: int

#: the parameters by which a config schedules its tile: K split among blocks that add into C, and
#: stream-K blocks per SM (kernels.rules.adds_into_c reads them)
SCHEDULE_PARAMS = ("splits", "workers_per_sm")

@dataclass(frozen=True)
class Schedules:
    """The families that compute one tile's work in each schedule: whole, a block per tile; with
    K split among `splits` blocks per tile that add into C; or stream-K, `workers_per_sm` blocks
    per SM sharing out all the tiles' k-steps. A family whose own `splits` parameter splits K
    names itself as `split`; None: the tile has no such schedule. The families of one tile share
    one record, so that the cost model, the shape rules and the measured tables know a tile
    whichever of them it came as."""

    whole: str
    split: str | None = None
    stream: str | None = None

    @staticmethod
    def tile_of(params: dict) -> dict:
        """A config's parameters without those of its schedule (SCHEDULE_PARAMS)."""
        return {name: value for name, value in params.items() if name not in SCHEDULE_PARAMS}

    def config(self, tile: dict, splits: int = 1, workers_per_sm: int = 0) -> tuple[str, dict]:
        """(family, params) of `tile` (tile_of a config) computed whole, with K split `splits`
        ways, or streamed on `workers_per_sm` blocks per SM; params in the tile's order, then
        the schedule's."""
        if workers_per_sm:
            if self.stream is None:
                raise ValueError(f"{self.whole} tiles have no stream-K schedule")
            return self.stream, {**tile, "workers_per_sm": workers_per_sm}
        if splits > 1 or self.split == self.whole:
            if self.split is None:
                raise ValueError(f"{self.whole} tiles have no split-K schedule")
            return self.split, {**tile, "splits": splits}
        return self.whole, dict(tile)

def no_instructions(config: dict, dtype: str) -> dict:
    """A family whose configs need only instructions every GPU has."""
    return {}

@dataclass(frozen=True)
class Family:
    """One kernel family: everything the tuner and the runtime need to know about it (the
    contract: this module's docstring)."""

    name: str
    space: dict  # {parameter: [values]}, the search space as plain data
    default: dict  # a config feasible on any CUDA device that runs the family at all
    restrict: Callable  # restrict(config, dtype, limits) -> why it cannot run, or None
    build: Callable  # build(config, dtype, layout, offset_bits, unaligned) -> Kernel
    #: where a cold study tries this family's default: lower first. Workers starting together
    #: climb from the first queued config, so the family most likely to win goes first.
    first_guess: int
    shared_bytes: Callable | None = None  # shared_bytes(config, dtype) -> static shared memory
    #: how exactly its kernels compute (autotune.space.precision): "ieee", every product and sum in the
    #: element type, or "tf32x3", float32 as three TF32 products on the tensor cores
    precision: str = "ieee"
    #: instructions(config, dtype) -> {instruction: the oldest (major, minor) compute capability
    #: whose PTX has it}: what a config needs beyond every GPU's instructions
    instructions: Callable[[dict, str], dict] = no_instructions
    #: searched only for products of at most this many rows (None: any); a tune of more would
    #: time kernels built for a few rows
    max_rows: int | None = None
    #: footprint(config, dtype) -> Footprint, for the cost model; None: not priced
    footprint: Callable[[dict, str], Footprint] | None = None
    #: how its tile is computed whole, with K split, or streamed; None: only as its config says
    schedules: Schedules | None = None
    #: first_tile(dtype, cc) -> the tile a cold tune tries first, whole and split by its
    #: schedules, on a GPU of compute capability `cc` ("9.0"; None: unknown), or None
    first_tile: Callable[[str, str | None], dict | None] | None = None
    #: few_tile(dtype, cc) -> a smaller tile a cold tune also tries first where the first tile's
    #: blocks would not give every SM two (autotune.space.guesses), or None
    few_tile: Callable[[str, str | None], dict | None] | None = None
    #: skinny_tile(dtype, cc, m, n) -> a tile a cold tune also tries first where an M x N C is
    #: skinny (autotune.space.guesses.SKINNY rows or columns), or None
    skinny_tile: Callable[[str, str | None, int, int], dict | None] | None = None
    #: small_tiles(dtype, cc) -> the tiles, in tiers of one area, each tier's squarest first, from which
    #: a rule picks the one lookup serves a product of a small C that no row serves exactly
    #: (autotune.space.guesses.small_c_guess), or ()
    small_tiles: Callable[[str, str | None], tuple[tuple[dict, ...], ...]] | None = None
    #: long_k_tile(dtype, cc, m, n) -> the tile lookup serves a skinny M x N C of few tiles over a long
    #: K that no row serves exactly, K split by the rule (autotune.space.guesses.small_c_guess), or None
    long_k_tile: Callable[[str, str | None, int, int], dict | None] | None = None
    #: few_rows_config(product, sm_count, deterministic) -> its params for a Product of fewer rows
    #: than the shape rules' smallest tile (none that add into C where `deterministic`), or None
    few_rows_config: Callable[[Product, int, bool], dict | None] | None = None
    #: fit(params, shape) -> its tile for a product of (M, N, K) that nobody tuned, with no side
    #: longer than the product needs (autotune.select.neighbours); None: bm and bn each shrink to
    #: the smallest size of the space that covers M and N
    fit: Callable[[dict, tuple[int, int, int]], dict] | None = None
    #: how its kernels compute, in a few words, for the reasons a lookup gives ("B streamed once")
    summary: str = ""
    #: its configs are the tiles that the shape rules (autotune.space.guesses) and the measured
    #: tables (autotune.select.neighbours) hold without a family name; one family sets it
    rule_tiles: bool = False
    #: its default is what a lookup falls back to where nothing else serves; one family sets it
    fallback: bool = False

    def config(self, params: dict | None = None) -> "Config":
        return Config.of(self.name, self.default if params is None else params)

    def oldest_arch(self, dtype: str) -> tuple[int, int] | None:
        """The oldest compute capability that runs some config of the family in `dtype`: the
        newest of its default config's instructions (the default is its most portable config);
        None: any."""
        return max(self.instructions(self.default, dtype).values(), default=None)

    @property
    def streams(self) -> bool:
        """Whether its blocks share out all the tiles' k-steps (stream-K) rather than run in
        waves of a block per tile."""
        return self.schedules is not None and self.schedules.stream == self.name

@dataclass(frozen=True)
class Config:
    """A family and its parameters: hashable, with one canonical text `key` used by the study, the
    cache, the runtime's memo and the kernel store alike."""

    family: str
    items: tuple  # sorted (name, value) pairs

    @classmethod
    def of(cls, family: str, params: dict) -> "Config":
        return cls(family, tuple(sorted(params.items())))

    @classmethod
    def from_key(cls, key: str) -> "Config":
        family, _, params = key.partition(":")
        return cls.of(family, json.loads(params))

    @property
    def params(self) -> dict:
        return dict(self.items)

    @property
    def params_json(self) -> str:
        """The parameters as the cache stores them."""
        return json.dumps(self.params, sort_keys=True)

    @property
    def key(self) -> str:
        return f"{self.family}:{self.params_json}"

    def __str__(self) -> str:
        return f"{self.family} {self.params_json}"
