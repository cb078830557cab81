"""What every kernel family shares: element types, device limits, and the launchable Kernel.

A family module (naive, shared, register) exports:
  SPACE     -- {parameter: [values]}, its search space as plain data
  DEFAULT   -- a config that is feasible on any CUDA device
  restrict  -- restrict(config, dtype, limits) -> reason it cannot run, or None
  build     -- build(config, dtype) -> Kernel
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np
from numba import cuda

# One error type for operands everywhere; autotune.operands is a leaf module without numba, so
# that the driver call path can raise it without importing numba.
from autotune.operands import OperandError, check_elements

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
            raise OperandError(
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
        """Launch on operands already checked by the caller (see check_operands)."""
        self.launcher(*C.shape, stream)(A, B, C)

    def __call__(self, A, B, C, stream=0) -> None:
        check_operands(A, B, C, self.dtype)
        self.launch(A, B, C, stream)


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


def check_operands(A, B, C, dtype: str) -> None:
    """Refuse, with a clear error, operands a kernel would misread. Kernels take C-contiguous
    2-D arrays only: a strided view is refused, never silently copied."""
    want = DTYPES[dtype][0]
    for name, x in (("A", A), ("B", B), ("C", C)):
        if len(x.shape) != 2:
            raise OperandError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
        if np.dtype(x.dtype) != want:
            raise OperandError(f"{name} has dtype {x.dtype}, the kernel was built for {dtype}")
        if not _c_contiguous(x):
            raise OperandError(f"{name} is not C-contiguous; pass a contiguous copy")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise OperandError(f"inner dimensions differ: A is {m}x{k}, B is {k2}x{n}")
    check_elements(m, n, k)
    if tuple(C.shape) != (m, n):
        raise OperandError(f"C must be {m}x{n}, got {tuple(C.shape)[0]}x{tuple(C.shape)[1]}")


def _c_contiguous(x) -> bool:
    flags = getattr(x, "flags", None)
    if flags is not None:
        return bool(flags["C_CONTIGUOUS"])
    return bool(x.is_c_contiguous())


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
