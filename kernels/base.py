"""What every kernel family shares: element types, device limits, configs and the launchable Kernel.

A family is one module of this package that defines `FAMILY = Family(...)`: its search space as
plain data, a default config, a restriction, a factory and its place in the tuner's first guesses.
`kernels/__init__.py` finds the modules that define one, so adding a family is adding its module.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np
from numba import cuda

#: element type name -> (NumPy dtype, Numba type). Kernels accumulate in the element type.
DTYPES = {
    "float32": (np.dtype(np.float32), numba.float32),
    "float64": (np.dtype(np.float64), numba.float64),
    "int32": (np.dtype(np.int32), numba.int32),
}

MAX_GRID_X = 2**31 - 1  # CUDA's limit on gridDim.x, where the tiles of C go
#: which operands are passed transposed: "T" for A means the kernel receives A's C-contiguous
#: transpose, K x M (a view A = X.T of a K x M array X); likewise N x K for B
LAYOUTS = ("NN", "NT", "TN", "TT")
#: element offsets are computed in 32 bits (cheaper) unless an operand has this many elements
WIDE_OFFSET_ELEMENTS = 2**32
#: rows of tiles a block-index group walks before moving right, so that neighbouring blocks share
#: tiles of A and B in L2 (the order Triton's matmul tutorial calls "grouped")
GROUP_ROWS = 8


@dataclass(frozen=True)
class DeviceLimits:
    """What a block may use. Defaults are those of every GPU since Volta (sm_70..sm_90)."""

    max_threads_per_block: int = 1024
    max_shared_per_block: int = 48 * 1024  # static shared memory; more needs dynamic shared memory
    max_registers_per_thread: int = 255
    max_registers_per_block: int = 64 * 1024
    max_threads_per_sm: int = 2048  # 1536 on sm_86/sm_89
    #: shared memory a block may opt in to as dynamic shared memory (the 48 KB of static shared
    #: memory is what every device allows; see for_cc)
    max_dynamic_shared_per_block: int = 48 * 1024

    @classmethod
    def for_cc(cls, cc: str | tuple | None) -> "DeviceLimits":
        """The defaults, with the dynamic shared memory GPUs of compute capability `cc` allow
        (cudaDevAttrMaxSharedMemoryPerBlockOptin, by architecture)."""
        if cc is None:
            return cls()
        key = cc if isinstance(cc, str) else "{}.{}".format(*cc)
        return cls(max_dynamic_shared_per_block=OPT_IN_SHARED.get(key, 48 * 1024))


OPT_IN_SHARED = {
    "7.0": 96 * 1024, "7.2": 96 * 1024, "7.5": 64 * 1024, "8.0": 163 * 1024, "8.6": 99 * 1024, "8.7": 163 * 1024,
    "8.9": 99 * 1024, "9.0": 227 * 1024, "10.0": 227 * 1024, "12.0": 99 * 1024,
}


def offset_bits_for(m: int, n: int, k: int) -> int:
    """32, or 64 when an operand of an (M x K) @ (K x N) product is too large for 32-bit offsets."""
    return 64 if max(m * k, k * n, m * n) >= WIDE_OFFSET_ELEMENTS else 32


def unaligned_for(m: int, n: int, k: int, layout: str, dtype: str) -> str:
    """The operands ("A", "B", "C") of an (M x K) @ (K x N) product in `layout` whose rows in
    memory are not a multiple of 16 bytes: what to build for (kernels.build's `unaligned`)."""
    a_length = m if layout[0] == "T" else k
    b_length = k if layout[1] == "T" else n
    lengths = (("A", a_length), ("B", b_length), ("C", n))
    return "".join(name for name, length in lengths if length * itemsize(dtype) % 16)


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


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return layout


def tile_origin(rows: int, cols: int):
    """A device function origin(M, N) -> (row0, col0) of the tile of C this block computes: block
    x counts tiles (tile_origin_at)."""
    origin_at = tile_origin_at(rows, cols)

    @cuda.jit(device=True)
    def origin(M, N):
        return origin_at(M, N, cuda.blockIdx.x)

    return origin


def tile_origin_at(rows: int, cols: int):
    """A device function origin_at(M, N, tile) -> (row0, col0) of tile number `tile` of C: tiles
    count in groups of GROUP_ROWS tile rows, column by column within a group."""
    ROWS, COLS, GROUP = rows, cols, GROUP_ROWS

    @cuda.jit(device=True)
    def origin_at(M, N, tile):
        tile_rows = (M + ROWS - 1) // ROWS
        tile_cols = (N + COLS - 1) // COLS
        per_group = GROUP * tile_cols
        first_row = (tile // per_group) * GROUP
        height = min(tile_rows - first_row, GROUP)
        within = tile % per_group
        return (first_row + within % height) * ROWS, (within // height) * COLS

    return origin_at


def product_shape(layout: str):
    """A device function dims(A, B) -> (M, N, K) of the arrays a kernel of `layout` receives."""
    A_T, B_T = check_layout(layout)[0] == "T", layout[1] == "T"

    @cuda.jit(device=True)
    def dims(A, B):
        M = A.shape[1] if A_T else A.shape[0]
        K = A.shape[0] if A_T else A.shape[1]
        N = B.shape[0] if B_T else B.shape[1]
        return M, N, K

    return dims


def numba_type(dtype: str):
    return DTYPES[dtype][1]


def itemsize(dtype: str) -> int:
    return DTYPES[dtype][0].itemsize


def registers_per_value(dtype: str) -> int:
    """32-bit registers one element occupies."""
    return max(1, itemsize(dtype) // 4)


def all_configs(space: dict[str, list]) -> list[dict]:
    """The cartesian product of a family's SPACE, feasible or not."""
    names = list(space)
    return [dict(zip(names, values)) for values in itertools.product(*space.values())]


@dataclass(frozen=True)
class Family:
    """One kernel family: everything the tuner and the runtime need to know about it."""

    name: str
    space: dict  # {parameter: [values]}, the search space as plain data
    default: dict  # a config feasible on any CUDA device
    restrict: Callable  # restrict(config, dtype, limits) -> why it cannot run, or None
    build: Callable  # build(config, dtype, layout, offset_bits, unaligned) -> Kernel
    #: where a cold study tries this family's default: lower first. Workers starting together
    #: climb from the first queued config, so the family most likely to win goes first.
    first_guess: int
    shared_bytes: Callable | None = None  # shared_bytes(config, dtype) -> static shared memory
    #: how exactly its kernels compute (autotune.precision): "ieee", every product and sum in the
    #: element type, or "tf32x3", float32 as three TF32 products on the tensor cores
    precision: str = "ieee"

    def config(self, params: dict | None = None) -> "Config":
        return Config.of(self.name, self.default if params is None else params)


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


class GridTooLarge(ValueError):
    """The product needs more blocks along a grid dimension than CUDA allows."""


@dataclass
class Kernel:
    """A compiled-on-demand kernel for one (family, config, dtype) that knows its launch geometry.

    The Python function computes C = A @ B for C-contiguous 2-D arrays of `dtype`, A and B passed
    as `layout` says (see LAYOUTS); one block covers a `tile` = (rows, cols) of C with `block`
    threads, the tiles along grid x (tile_origin).
    """

    family: str
    config: dict
    dtype: str
    py_func: Callable
    block: tuple[int, ...]
    tile: tuple[int, int]
    #: blocks along K per tile of C (grid y); they add into C, which is zeroed first
    splits: int = 1
    #: stream-K: this many blocks per SM, each multiplying an even share of all the tiles'
    #: k-steps and adding it into C, which is zeroed first; 0: a block per tile (and split)
    workers_per_sm: int = 0
    #: blocks that must fit on one SM at once: ptxas caps registers at 64K / (threads x min_blocks)
    min_blocks: int = 1
    layout: str = "NN"
    offset_bits: int = 32
    #: the operands ("A", "B", "C") this build moves or adds into as having rows that are not
    #: 16-byte aligned (kernels.vector's `unaligned`); "" where the build is the same either way
    unaligned: str = ""
    #: bytes of dynamic shared memory each launch passes (above 48 KB the kernel must opt in)
    dynamic_shared: int = 0
    _dispatcher: object = field(default=None, repr=False)

    @property
    def signature(self) -> str:
        t = self.dtype
        return f"void({t}[:, ::1], {t}[:, ::1], {t}[:, ::1])"

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    @property
    def adds(self) -> bool:
        """Whether blocks add their products into C (zeroed by a launch of its own first), so
        that results vary in the last bits from run to run."""
        return self.splits > 1 or self.workers_per_sm > 0

    def grid(self, m: int, n: int, sm_count: int = 0) -> tuple[int, int, int]:
        """The grid for an M x N product, on a GPU of `sm_count` SMs (the current one's if 0)."""
        workers = self.workers_per_sm * (sm_count or multiprocessors()) if self.workers_per_sm else 0
        return grid_of(m, n, self.tile, self.splits, workers)

    @property
    def launch_bounds(self) -> tuple[int, ...]:
        """Tells ptxas the block size, so it keeps registers within what the block can launch with
        (spilling if it must) instead of producing a kernel that fails to launch; with min_blocks,
        within what that many blocks per SM leave each thread."""
        return (self.threads,) if self.min_blocks == 1 else (self.threads, self.min_blocks)

    def compile(self):
        """Compile (once) for the current device; returns the Numba dispatcher."""
        if self._dispatcher is None:
            from numba import config

            options = {} if config.ENABLE_CUDASIM else {"launch_bounds": self.launch_bounds}
            self._dispatcher = cuda.jit(self.signature, **options)(self.py_func)
            if self.dynamic_shared > DEFAULT_DYNAMIC_SHARED and not config.ENABLE_CUDASIM:
                _allow_dynamic_shared(self._dispatcher, self.dynamic_shared)
        return self._dispatcher

    def launcher(self, m: int, n: int, stream=0) -> Callable:
        """f(A, B, C) launching on an M x N output; configure once, call many times."""
        if m == 0 or n == 0:
            return _nothing
        launch = self.compile()[self.grid(m, n), self.block, stream, self.dynamic_shared]
        if not self.adds:
            return launch
        zero = zero_fill(self.dtype)[-(-m * n // ZERO_BLOCK), ZERO_BLOCK, stream]
        def zero_then_launch(A, B, C):
            zero(C)
            launch(A, B, C)

        return zero_then_launch

    def launch(self, A, B, C, stream=0) -> None:
        """Launch on operands the caller checked (autotune.operands holds every operand check)."""
        self.launcher(*C.shape, stream)(A, B, C)

    __call__ = launch


DEFAULT_DYNAMIC_SHARED = 48 * 1024
#: the SMs the simulator pretends to have: enough stream-K workers that their shares cross tiles
SIMULATED_SMS = 2


def multiprocessors() -> int:
    """The current GPU's SM count."""
    from numba import config

    return SIMULATED_SMS if config.ENABLE_CUDASIM else cuda.get_current_device().MULTIPROCESSOR_COUNT


def _allow_dynamic_shared(dispatcher, size: int) -> None:
    """Let the compiled kernel take `size` bytes of dynamic shared memory on the current device
    (numba-cuda's launcher does not opt in by itself)."""
    from numba.cuda.cudadrv.driver import binding, driver

    function = next(iter(dispatcher.overloads.values()))._codelibrary.get_cufunc()
    attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attribute, size, function.handle, function.device.id)


ZERO_BLOCK = 256


@functools.cache
def zero_fill(dtype: str):
    """A kernel setting a 2-D array to 0, one element per thread along grid x: split and stream-K
    kernels add their partial products into C."""
    zero = numba_type(dtype)(0)

    @cuda.jit(f"void({dtype}[:, ::1])")
    def fill(C):
        index = cuda.grid(1)
        if index < C.shape[0] * C.shape[1]:
            C[index // C.shape[1], index % C.shape[1]] = zero

    return fill


def _nothing(*args) -> None:
    """An empty C needs no launch (and CUDA refuses a zero-sized grid)."""


def unrolled(step: Callable, count: int) -> Callable:
    """A device function f(*args) that runs step(0, *args), ..., step(count - 1, *args) as
    straight-line code, each index a compile-time constant. NVVM leaves a loop with a large body
    rolled, which keeps ptxas from overlapping one step's loads with the previous step's math."""
    if count == 0:
        return _do_nothing
    before = unrolled(step, count - 1)
    LAST = count - 1

    @cuda.jit(device=True)
    def chain(*args):
        before(*args)
        step(LAST, *args)

    return chain


@cuda.jit(device=True)
def _do_nothing(*args):
    pass
