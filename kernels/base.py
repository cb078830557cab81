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

MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y; rows of C-tiles go there


@dataclass(frozen=True)
class DeviceLimits:
    """What a block may use. Defaults are those of every GPU since Volta (sm_70..sm_90)."""

    max_threads_per_block: int = 1024
    max_shared_per_block: int = 48 * 1024  # static shared memory; more needs dynamic shared memory
    max_registers_per_thread: int = 255
    max_registers_per_block: int = 64 * 1024
    max_threads_per_sm: int = 2048  # 1536 on sm_86/sm_89


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
    build: Callable  # build(config, dtype) -> Kernel
    #: where a cold study tries this family's default: lower first. Workers starting together
    #: climb from the first queued config, so the family most likely to win goes first.
    first_guess: int
    shared_bytes: Callable | None = None  # shared_bytes(config, dtype) -> static shared memory

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

    The Python function computes C = A @ B for C-contiguous 2-D arrays of `dtype`; one block
    covers a `tile` = (rows, cols) of C with `block` threads.
    """

    family: str
    config: dict
    dtype: str
    py_func: Callable
    block: tuple[int, ...]
    tile: tuple[int, int]
    #: blocks along K per tile of C (grid z); they add into C, which is zeroed first
    splits: int = 1
    #: blocks that must fit on one SM at once: ptxas caps registers at 64K / (threads x min_blocks)
    min_blocks: int = 1
    _dispatcher: object = field(default=None, repr=False)

    @property
    def signature(self) -> str:
        t = self.dtype
        return f"void({t}[:, ::1], {t}[:, ::1], {t}[:, ::1])"

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def grid(self, m: int, n: int) -> tuple[int, int]:
        rows, cols = self.tile
        grid = (-(-n // cols), -(-m // rows))
        if grid[1] > MAX_GRID_Y:
            raise GridTooLarge(
                f"M={m} needs {grid[1]} block rows, over CUDA's {MAX_GRID_Y}; "
                f"use a config with a taller tile than {rows}"
            )
        return grid if self.splits == 1 else (*grid, self.splits)

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
        return self._dispatcher

    def launcher(self, m: int, n: int, stream=0) -> Callable:
        """f(A, B, C) launching on an M x N output; configure once, call many times."""
        if m == 0 or n == 0:
            return _nothing
        launch = self.compile()[self.grid(m, n), self.block, stream]
        if self.splits == 1:
            return launch
        zero = zero_fill(self.dtype)[(-(-n // ZERO_BLOCK[0]), -(-m // ZERO_BLOCK[1])), ZERO_BLOCK, stream]

        def zero_then_launch(A, B, C):
            zero(C)
            launch(A, B, C)

        return zero_then_launch

    def launch(self, A, B, C, stream=0) -> None:
        """Launch on operands the caller checked (autotune.operands holds every operand check)."""
        self.launcher(*C.shape, stream)(A, B, C)

    __call__ = launch


ZERO_BLOCK = (32, 8)


@functools.cache
def zero_fill(dtype: str):
    """A kernel setting a 2-D array to 0: split kernels add their partial products into C."""
    zero = numba_type(dtype)(0)

    @cuda.jit(f"void({dtype}[:, ::1])")
    def fill(C):
        col, row = cuda.grid(2)
        if row < C.shape[0] and col < C.shape[1]:
            C[row, col] = zero

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
