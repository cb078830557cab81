"""Launching compiled kernels through the CUDA driver, with argument words packed once.

Numba's launcher rebuilds every argument on every call (a device-array wrapper per operand, then
ctypes words per field). A `Plan` holds, for one kernel and one (shapes, dtype, device), what the
launch needs: the kernel handle, grid, block, shared bytes and the packed argument words; a call
writes the three data pointers into the calling thread's own copy of those words and launches on
the caller's stream. Argument words are per thread because the driver reads them during
cuLaunchKernel: two threads writing one buffer would swap each other's operands.

A Numba kernel taking three C-contiguous 2-D arrays has 27 parameters of 8 bytes (see
numba.cuda.dispatcher._Kernel._prepare_args), 9 per array: meminfo (0), parent (0), nitems,
itemsize, data, shape[0], shape[1], strides[0], strides[1] in bytes.

Handles from cuLibraryGetKernel are CUkernels: context-independent, launched in the calling
thread's current context, which `GpuContext.enter` sets to the device's primary context (the one
PyTorch, CuPy and Numba use) and `GpuContext.leave` puts back. No numba here.
"""

from __future__ import annotations

import ctypes
import math
import sys
import threading
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from cuda.bindings import driver

from autotune.errors import LaunchError, OperandError
from kernels.rules import DEFAULT_DYNAMIC_SHARED, GridTooLarge, grid_of

ARRAY_WORDS = 9
DATA_WORD = 4  # index of the data pointer among an array's words
#: above this much dynamic shared memory a kernel must opt in (cuKernelSetAttribute)


def check(result, call: str):
    """The values of a cuda.bindings call, or a LaunchError naming the call and the error."""
    err, *values = result
    if err:
        _, name = driver.cuGetErrorName(err)
        raise LaunchError(f"{call} failed: {name.decode() if isinstance(name, bytes) else err}")
    return values[0] if len(values) == 1 else tuple(values)


def array_words(shape: tuple[int, ...], itemsize: int) -> list[int]:
    """The argument words of a C-contiguous array (9 for 2-D, 7 for 1-D), its data pointer left 0:
    Numba's array (meminfo, parent, items, itemsize, data, shape, strides)."""
    strides = [itemsize * math.prod(shape[i + 1:]) for i in range(len(shape))]
    return [0, 0, math.prod(shape), itemsize, 0, *shape, *strides]


def pack_arguments(shapes: list[tuple[int, ...]], itemsize: int) -> tuple[list[int], list[int]]:
    """(words, data_slots): the words of one array per shape, and where their pointers go."""
    words: list[int] = []
    slots: list[int] = []
    for shape in shapes:
        slots.append(len(words) + DATA_WORD)
        words += array_words(shape, itemsize)
    return words, slots


class ArgumentBuffer:
    """The words and the array of pointers to them that cuLaunchKernel's kernelParams takes."""

    def __init__(self, words: list[int]):
        count = len(words)
        self.words = (ctypes.c_uint64 * count)(*words)
        base = ctypes.addressof(self.words)
        self.pointers = (ctypes.c_void_p * count)(*[base + 8 * i for i in range(count)])
        self.address = ctypes.addressof(self.pointers)


def grid_for(m: int, n: int, tile: tuple[int, int], splits: int, workers: int = 0) -> tuple[int, int, int]:
    """kernels.rules.grid_of, its refusal an OperandError as every refusal of the operands is."""
    try:
        return grid_of(m, n, tile, splits, workers)
    except GridTooLarge as error:
        raise OperandError(str(error)) from None


class GpuContext:
    """One GPU: its primary context, made current in whichever thread launches, and the caller's
    context put back afterwards: PyTorch and CuPy follow the thread's current context, so leaving
    GPU 1's current after a call on cuda:1 tensors would send their next work on cuda:0 to GPU 1."""

    def __init__(self, ordinal: int):
        check(driver.cuInit(0), "cuInit")
        self.ordinal = ordinal
        self.handle = check(driver.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        self.context = check(driver.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.context_id = int(self.context)

    def enter(self):
        """Make this device's primary context current; returns the context to put back with
        `leave`, or None when it was current already (the usual case: one GPU)."""
        err, current = driver.cuCtxGetCurrent()
        if not err and int(current) == self.context_id:
            return None
        check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        return current

    @staticmethod
    def leave(previous) -> None:
        if previous is not None:
            driver.cuCtxSetCurrent(previous)

    def attribute(self, name: str) -> int:
        return check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, name), self.handle), name)

    @property
    def cc(self) -> tuple[int, int]:
        return (self.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                self.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))

    @property
    def name(self) -> str:
        raw = check(driver.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode()


#: ordinal -> its primary context, retained once per process: a resource, not a memo
_devices: dict[int, GpuContext] = {}
_devices_lock = threading.Lock()


def device(ordinal: int) -> GpuContext:
    found = _devices.get(ordinal)
    if found is None:
        with _devices_lock:
            found = _devices.get(ordinal) or GpuContext(ordinal)
            _devices[ordinal] = found
    return found


def pointer_device(pointer: int) -> int:
    """The ordinal of the device that owns a device pointer."""
    check(driver.cuInit(0), "cuInit")
    attribute = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(driver.cuPointerGetAttribute(attribute, pointer), "cuPointerGetAttribute"))


def current_device() -> int:
    """The ordinal of the calling thread's current context's device; 0 if none is current."""
    check(driver.cuInit(0), "cuInit")
    err, ordinal = driver.cuCtxGetDevice()
    return 0 if err else int(ordinal)


@dataclass
class LoadedKernel:
    """A cubin's kernel, loaded once per process (a CUlibrary is valid in every context)."""

    library: object
    kernel: object
    dynamic_shared: int = 0
    image: bytes = b""  # the cubin, kept alive while the library may still read it
    _opted_in: set = field(default_factory=set)
    #: the kernel as the CUfunction it casts to, which cuLaunchKernel takes without converting it
    function: object = None

    def opt_in(self, dev: GpuContext) -> None:
        """Allow dynamic shared memory above the default 48 KB on this device (once per device)."""
        if self.dynamic_shared <= DEFAULT_DYNAMIC_SHARED or dev.ordinal in self._opted_in:
            return
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuKernelSetAttribute(attribute, self.dynamic_shared, self.kernel, dev.handle), "cuKernelSetAttribute")
        self._opted_in.add(dev.ordinal)


def load(cubin: bytes, entry: str, dynamic_shared: int = 0) -> LoadedKernel:
    check(driver.cuInit(0), "cuInit")
    library = check(driver.cuLibraryLoadData(cubin, None, None, 0, None, None, 0), "cuLibraryLoadData")
    kernel = check(driver.cuLibraryGetKernel(library, entry.encode()), f"cuLibraryGetKernel({entry[:40]}...)")
    return LoadedKernel(library, kernel, dynamic_shared, cubin, function=driver.CUfunction(int(kernel)))


@dataclass(frozen=True)
class Blocks:
    """How a launch covers the product: its grid and block, and the 32-bit words of C to zero
    first (split-K and stream-K add into C)."""

    grid: tuple
    block: tuple
    zero_words: int = 0


class Launch(NamedTuple):
    """One launch of a plan, as a caller that launches it itself reads it (a tuple, for C++):
    the kernel's handle, grid, block, dynamic shared bytes, 32-bit words of C to zero first, the
    argument words, the words that take the data pointers of A, B, C (and the bias), and byte
    offsets into A and C."""

    function: int
    grid: tuple
    block: tuple
    shared: int
    zero_words: int
    words: list
    slots: list
    a_offset: int = 0
    c_offset: int = 0


class Plan:
    """One kernel launch for fixed shapes, dtype and device; per call only pointers and stream."""

    def __init__(self, loaded: LoadedKernel, dev: GpuContext, blocks: Blocks, words: list[int], slots: list[int]):
        self.loaded, self.device = loaded, dev
        self.kernel = loaded.kernel if loaded.function is None else loaded.function
        self.grid = tuple(blocks.grid)
        self.block = tuple(blocks.block) + (1,) * (3 - len(blocks.block))
        self.shared = loaded.dynamic_shared
        self.words, self.slots = words, slots
        self.zero_words = blocks.zero_words
        self._local = threading.local()
        previous = dev.enter()
        try:
            loaded.opt_in(dev)
        finally:
            dev.leave(previous)

    def buffer(self) -> ArgumentBuffer:
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = ArgumentBuffer(self.words)
        return buffer

    def launches(self) -> list[Launch]:
        return [Launch(function=int(self.kernel), grid=self.grid, block=self.block, shared=self.shared,
                       zero_words=self.zero_words, words=list(self.words), slots=list(self.slots))]

    def launch(self, a: int, b: int, c: int, stream: int, bias: int = 0) -> None:
        """Launch on the arrays at these device addresses; `bias` for a kernel that takes one."""
        buffer = self.buffer()
        words, slots = buffer.words, self.slots
        words[slots[0]], words[slots[1]], words[slots[2]] = a, b, c
        if bias:
            words[slots[3]] = bias
        previous = self.device.enter()
        try:
            if self.zero_words:
                err, = driver.cuMemsetD32Async(c, 0, self.zero_words, stream)
                if err:
                    check((err,), "cuMemsetD32Async")
            gx, gy, gz = self.grid
            bx, by, bz = self.block
            err, = driver.cuLaunchKernel(self.kernel, gx, gy, gz, bx, by, bz, self.shared, stream, buffer.address, 0)
            if err:
                check((err,), "cuLaunchKernel")
        finally:
            self.device.leave(previous)


class RowParts:
    """Plans launched one after the other on the caller's stream, each on its own rows of A and C
    (byte offsets into them): a product whose last rows a plan of their own computes
    (kernels.rules.peeled_rows)."""

    def __init__(self, parts: list[tuple[Plan, int, int]]):
        self.parts = parts  # (plan, A's offset, C's offset)

    def launches(self) -> list[Launch]:
        return [part._replace(a_offset=a_offset, c_offset=c_offset)
                for plan, a_offset, c_offset in self.parts for part in plan.launches()]

    def launch(self, a: int, b: int, c: int, stream: int, bias: int = 0) -> None:
        for plan, a_offset, c_offset in self.parts:
            plan.launch(a + a_offset, b, c + c_offset, stream, bias)


# Streams ------------------------------------------------------------------------------------

def current_stream(kind: str, ordinal: int) -> int:
    """The raw handle of the caller's current stream for operands of `kind` on device `ordinal`:
    PyTorch's or CuPy's (both per device and per thread); 0, the legacy default stream, else."""
    if kind == "torch":
        return sys.modules["torch"]._C._cuda_getCurrentRawStream(ordinal)
    if kind == "cupy":
        return _cupy_stream(ordinal)
    return 0


def _cupy_stream(ordinal: int) -> int:
    cupy = sys.modules["cupy"]
    try:
        return cupy.cuda.get_current_stream(ordinal).ptr
    except TypeError:  # CuPy before 13 has one current stream per thread
        return cupy.cuda.get_current_stream().ptr


def stream_handle(stream) -> int:
    """A raw CUstream handle from an explicit stream: an int, a Numba stream (`.handle`), a
    PyTorch stream (`.cuda_stream`), a CuPy stream (`.ptr`) or a cuda.bindings CUstream."""
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    handle = getattr(stream, "handle", None)
    if handle is not None:
        value = getattr(handle, "value", handle)  # ctypes c_void_p (value None for stream 0) or CUstream
        return int(value or 0)
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"stream must be a stream of Numba, PyTorch or CuPy, or a raw handle; got {type(stream).__name__}") from None


def capturing(stream: int) -> bool:
    """Whether `stream` is being captured into a CUDA graph (then nothing may compile, load or allocate)."""
    status = check(driver.cuStreamIsCapturing(stream), "cuStreamIsCapturing")
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


@cache
def driver_available() -> bool:
    """Whether the CUDA driver loads and sees a device (False on a machine without a GPU)."""
    try:
        err, = driver.cuInit(0)
        if err:
            return False
        err, count = driver.cuDeviceGetCount()
        return not err and count > 0
    except Exception:  # no libcuda: cuda.pathfinder raises its own error types
        return False
