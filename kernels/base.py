"""What every kernel's code shares: element types as Numba sees them, tile origins, the
launchable Kernel, zeroing C, unrolling. The family contract (Family, Config, DeviceLimits and the
records a family gives the tuner) is kernels.contract; both are imported from here by the families.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numba
import numpy as np
from numba import cuda

from .contract import (  # noqa: F401  what families import from here
    OPT_IN_SHARED,
    SCHEDULE_PARAMS,
    Config,
    DeviceLimits,
    Family,
    Footprint,
    Product,
    Schedules,
    all_configs,
    no_instructions,
)
from .rules import (  # noqa: F401  the shared rules, as every family has imported them from here
    DEFAULT_DYNAMIC_SHARED,
    DTYPE_NAMES,
    LAYOUTS,
    GridTooLarge,
    adds_into_c,
    check_layout,
    grid_of,
    offset_bits_for,
    unaligned_for,
)

#: element type name -> (NumPy dtype, Numba type). Kernels accumulate in the element type.
DTYPES = {name: (np.dtype(name), getattr(numba, name)) for name in DTYPE_NAMES}
#: rows of tiles a block-index group walks before moving right, so that neighbouring blocks share
#: tiles of A and B in L2 (the order Triton's matmul tutorial calls "grouped")
GROUP_ROWS = 8






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


















@dataclass
class Kernel:
    """A compiled-on-demand kernel for one (family, config, dtype) that knows its launch geometry.

    The Python function computes C = A @ B for C-contiguous 2-D arrays of `dtype`, A and B passed
    as `layout` says (see LAYOUTS); one block covers a `tile` = (rows, cols) of C with `block`
    threads, the tiles along grid x (tile_origin). It takes a fourth argument, `bias=None`: a
    build `with_bias` passes a vector of C's N columns that its epilogue adds to every row; in a
    build without, the argument is omitted and the code is as if it were not there.
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
    #: whether the kernel takes a bias (see above)
    bias: bool = False
    _dispatcher: object = field(default=None, repr=False)

    @property
    def takes_bias(self) -> bool:
        """Whether the kernel function has the fourth argument (a family outside mmtune may not)."""
        return len(inspect.signature(self.py_func).parameters) > 3

    def with_bias(self) -> "Kernel":
        """The same kernel taking a bias, which its epilogue adds to every row of C."""
        if not self.takes_bias:
            raise ValueError(f"the {self.family} family's kernels take no bias")
        return replace(self, bias=True, _dispatcher=None)

    @property
    def signature(self):
        """A, B and C C-contiguous; the bias contiguous, or omitted (its branches compile away)."""
        element = numba_type(self.dtype)
        matrix = numba.types.Array(element, 2, "C")
        if not self.takes_bias:
            return numba.types.void(matrix, matrix, matrix)
        last = numba.types.Array(element, 1, "C") if self.bias else numba.types.Omitted(None)
        return numba.types.void(matrix, matrix, matrix, last)

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    @property
    def adds(self) -> bool:
        """Whether blocks add their products into C (zeroed by a launch of its own first), so
        that results vary in the last bits from run to run."""
        return adds_into_c({"splits": self.splits, "workers_per_sm": self.workers_per_sm})

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
        """f(A, B, C) (a build `with_bias`: f(A, B, C, bias)) launching on an M x N output;
        configure once, call many times."""
        if m == 0 or n == 0:
            return _nothing
        launch = self.compile()[self.grid(m, n), self.block, stream, self.dynamic_shared]
        if not self.adds:
            return launch
        zero = zero_fill(self.dtype)[-(-m * n // ZERO_BLOCK), ZERO_BLOCK, stream]
        def zero_then_launch(A, B, C, *bias):
            zero(C)
            launch(A, B, C, *bias)

        return zero_then_launch

    def launch(self, A, B, C, stream=0, bias=None) -> None:
        """Launch on operands the caller checked (autotune.call.operands holds every operand check)."""
        self.launcher(*C.shape, stream)(A, B, C, *(() if bias is None else (bias,)))

    __call__ = launch


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
