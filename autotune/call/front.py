"""matmul(A, B, out=None, stream=None): device arrays through driver plans, the rest through Numba.

On a real GPU, a call on device arrays reads each operand's pointer, shape, strides, dtype and
device (autotune.call.operands), finds the plan built for those on the first such call, and launches
it (autotune.backends.launch) on the caller's stream: `stream` if given, else PyTorch's current stream for
torch tensors, CuPy's for CuPy arrays, the default stream for others. It never waits for the GPU.
A plan is built once per (shapes, strides, dtypes, devices): the checks run then, the config
comes from the kernel store's memory of this shape or from `lookup`, the cubin from the store
(compiled into it if missing) for the operands' layout (a transposed view is read in place) and
offset width; where the config's tiles would spend a whole tile row on C's last few rows, those
rows get a plan of their own (kernels.rules.peeled_rows). During CUDA graph capture a missing
plan is an error, since building one would compile, load or allocate.

A first call never waits for a compile when the kernel store holds a kernel that computes the
same product (same dtype, layout, offset width and unaligned rows, another config): that kernel
serves while the chosen one builds in a child process (autotune.store.background), and a later
call, once the build is done, switches the plan to it (never while its stream is captured). A
call with `wait=True`, MMTUNE_WAIT=1 or `deterministic` (no kernel switching) builds first, as
benchmarks and reproducible runs want.

NumPy operands, the CUDA simulator, and MMTUNE_LAUNCH=numba (a debug fallback) go through
Numba's dispatcher (autotune.call.dispatcher). Nothing here imports numba on the driver path.

While autotune.record runs (autotune.call.recording), each call counts on its plan's product.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import numpy as np

from autotune import backends
from autotune.backends import launch
from autotune.call import recording
from autotune.call.operands import Operand, check_bias, check_product, dtype_name, kind_of, reader
from autotune.call.options import WAIT_ENV, CallOptions  # noqa: F401  WAIT_ENV: tests set it here
from autotune.errors import CaptureError, LaunchError, OperandError
from autotune.memos import MEMOS
from autotune.space.precision import resolve as resolve_precision
from autotune.space.problem import Problem
from autotune.store import background, cubins, shapes
from autotune.store.recorded import FROM_STORE, Recorded
from kernels.contract import Config
from kernels.rules import Arch, adds_into_c, peeled_rows

ENV = "MMTUNE_LAUNCH"  # "numba": launch through Numba's dispatcher, for debugging


@dataclass(eq=False)  # a key of recording.counts, by identity
class CallPlan:
    kind: str  # of A: decides the current stream and what a new C is
    m: int
    n: int
    dtype: str
    layout: str  # of A and B, kernels.LAYOUTS
    out_key: tuple  # (shape, strides, dtype, device) a matching `out` reads as
    plan: launch.Plan | launch.RowParts | None  # None: C is empty, nothing to launch
    family: str
    config: dict
    new_out: Callable | None = None  # makes a new C, bound on first use
    recorded: Recorded | None = None  # the product, for autotune.record; None for an empty one
    pending: Pending | None = None  # a stand-in serves while the chosen kernel builds


@dataclass(frozen=True)
class Pending:
    """The build of a plan's chosen kernel while a stand-in serves, and how to plan it again."""

    build: background.Build
    options: CallOptions


@dataclass(frozen=True)
class Served:
    """The config a problem is served by, and its kernel in the store."""

    config: Config
    entry: cubins.Entry
    source: str = ""  # lookup's source, or FROM_STORE where the store remembered the config
    building: background.Build | None = None  # entry is a stand-in while this builds the chosen one


_plans: dict[tuple, CallPlan] = MEMOS.table("call.plans")
_readers: dict[type, tuple] = MEMOS.table("call.readers")  # type -> (kind, reader)
_identities: dict[int, backends.Device] = MEMOS.table("call.identities")  # ordinal -> the GPU as lookup knows it
_build_lock = threading.Lock()


@MEMOS.function
def backend() -> str:
    """"driver" or "numba", decided on the first call."""
    return "driver" if _driver_wanted() else "numba"


def _driver_wanted() -> bool:
    if os.environ.get(ENV, "driver") == "numba" or backends.simulated():
        return False
    return launch.driver_available()


def matmul(A, B, out=None, stream=None, deterministic=False, precision=None, wait=False, bias=None):
    """C = A @ B (+ bias) with the tuned kernel. A and B: NumPy arrays (copied to the GPU and back), or
    device arrays (PyTorch, CuPy, Numba, or anything with __cuda_array_interface__ or
    __dlpack__), used in place and launched on the caller's current stream or on `stream`.
    Returns the same kind as A; `out`, if given, receives C and is returned. With
    `deterministic`, a kernel that does not add into C (split-K, stream-K): the same operands give
    the same bits. `precision` ("ieee" or "tf32x3", autotune.space.precision; default "ieee") names how
    exactly float32 is computed: "tf32x3" lets the tensor cores compute it, where they are faster.
    With `wait`, a first call waits for its chosen kernel to build rather than take a stand-in
    (the module's docstring says when one stands in). `bias`, a contiguous array of C's N columns
    of the same kind, is added to every row of C by the kernel's epilogue."""
    found_a, found_b = _readers.get(type(A)), _readers.get(type(B))
    if found_a is None or found_b is None or bias is not None and type(bias) not in _readers:
        return _first_sight(A, B, out, bias, _options(stream, deterministic, precision, wait, bias))
    kind, read = found_a
    a, b = read(A), found_b[1](B)
    if bias is not None:
        bias = _readers[type(bias)][1](bias)
    key = _key(a, b, bias, deterministic, precision)
    call = _plans.get(key)
    if call is None:
        call = _build(key, kind, (a, b, bias), _options(stream, deterministic, precision, wait, bias))
    elif call.pending is not None and (wait or call.pending.build.done()):
        call = _switch(key, call, (a, b, bias), wait)
    counts = recording.counts
    if counts is not None:
        counts[call] = counts.get(call, 0) + 1
    if out is None:
        out, c = _empty(kind, A, call)
    else:
        c = _read(out)
        if (c.shape, c.strides, c.dtype, c.device) != call.out_key:
            _check_out(a, b, c, call)
    if call.plan is not None:
        raw = current_stream(kind, a.device) if stream is None else launch.stream_handle(stream)
        call.plan.launch(a.pointer, b.pointer, c.pointer, raw, 0 if bias is None else bias.pointer)
    return out


def _key(a: Operand, b: Operand, bias: Operand | None, deterministic: bool, precision: str | None) -> tuple:
    """What a plan is kept under: everything about the operands but their addresses."""
    key = (a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype, a.device, b.device, deterministic, precision)
    return key if bias is None else key + (bias.shape, bias.strides, bias.dtype, bias.device)


def planned(A, B, bias=None, deterministic=False, precision=None) -> CallPlan | None:
    """The plan a call of `matmul` with these operands launches, for a caller that launches its
    kernels itself (autotune.torch's native path: `plan.launches()`), and counts its calls under
    it for autotune.record: None where no call has planned it yet, while a stand-in serves (the
    plan will change), and where C is empty."""
    found_a, found_b = _readers.get(type(A)), _readers.get(type(B))
    if found_a is None or found_b is None or bias is not None and type(bias) not in _readers:
        return None
    operand_of_bias = None if bias is None else _readers[type(bias)][1](bias)
    call = _plans.get(_key(found_a[1](A), found_b[1](B), operand_of_bias, deterministic, precision))
    return None if call is None or call.pending is not None or call.plan is None else call


def _options(stream, deterministic: bool, precision: str | None, wait: bool, bias) -> CallOptions:
    return CallOptions(stream=stream, deterministic=deterministic, precision=precision, wait=wait,
                       bias=bias is not None)


def current_stream(kind: str, device: int) -> int:
    return launch.current_stream(kind, device)


def _check_out(a: Operand, b: Operand, c: Operand, call: CallPlan) -> None:
    """Refuse an `out` that does not fit; let through one of another kind (a CuPy C for torch A)."""
    if tuple(c.shape) != (call.m, call.n) or dtype_name(c.dtype) != call.dtype:
        raise OperandError(f"out must be a {call.m}x{call.n} device array of {call.dtype}")
    check_product(a, b, c)


def _read(x) -> Operand:
    found = _readers.get(type(x)) or _register(x, "out")
    return found[1](x)


def _register(x, name: str):
    kind = kind_of(x)
    if kind == "host":
        raise OperandError(f"{name} is a {type(x).__name__}: expected a NumPy array or a CUDA device array")
    found = _readers[type(x)] = (kind, reader(kind))
    return found


def _first_sight(A, B, out, bias, options: CallOptions):
    """A call with an operand type not seen before: NumPy, the simulator and the Numba fallback
    go to autotune.call.dispatcher (which compiles as it goes); on the driver path the types'
    readers are registered."""
    if isinstance(A, np.ndarray) or isinstance(B, np.ndarray) or backend() == "numba":
        from autotune.call import dispatcher

        if options.stream is None and not isinstance(A, np.ndarray) and not backends.simulated():
            options = replace(options, stream=_caller_stream(A))
        return dispatcher.matmul(A, B, out, bias, options)
    _register(A, "A")
    _register(B, "B")
    if bias is not None:
        _register(bias, "bias")
    return matmul(A, B, out, options.stream, options.deterministic, options.precision, options.wait, bias)


def _caller_stream(A) -> int:
    """The current stream for A's kind, for Numba's launcher (MMTUNE_LAUNCH=numba)."""
    kind = kind_of(A)
    if kind in ("torch", "cupy"):
        return current_stream(kind, reader(kind)(A).device)
    return 0


def _build(key: tuple, kind: str, operands: tuple[Operand, Operand, Operand | None], options: CallOptions) -> CallPlan:
    """The plan of a call's key, from its operands (A, B and the bias, or None)."""
    a, b, bias = operands
    m, n, k, dtype, layout = check_product(a, b)
    if bias is not None:
        check_bias(bias, n, dtype, a.device)
    with _build_lock:
        call = _plans.get(key)
        if call is not None:
            return call
        device = launch.device(a.device)
        previous = device.enter()
        try:
            raw = current_stream(kind, a.device) if options.stream is None else launch.stream_handle(options.stream)
            _refuse_during_capture(raw, (m, n, k), dtype, a.device)
            plan, config, product, pending = None, Config.of("", {}), None, None
            if m and n:  # an empty C needs no kernel (and CUDA refuses an empty grid)
                gpu = _identity(device)
                problem = Problem(device=gpu.name, dtype=dtype, m=m, n=n, k=k, layout=layout,
                                  precision=resolve_precision(options.precision, dtype, gpu.cc))
                plan, served = _plan(device, gpu, problem, options)
                config = served.config
                if served.building is not None:
                    pending = Pending(served.building, options)
                if k:
                    product = replace(Recorded.served(problem, gpu, config, served.source, options.deterministic),
                                      bias=options.bias)
        finally:
            device.leave(previous)
        call = _plans[key] = CallPlan(kind=kind, m=m, n=n, dtype=dtype, layout=layout,
                                      out_key=((m, n), None, a.dtype, a.device), plan=plan, family=config.family,
                                      config=config.params, recorded=product, pending=pending)
        return call


def _switch(key: tuple, call: CallPlan, operands: tuple[Operand, Operand, Operand | None], wait: bool) -> CallPlan:
    """The plan once its chosen kernel's build is done (waited for, with `wait`): planned again
    with that kernel; kept on its stand-in if the build failed, or while the stream is captured."""
    pending = call.pending
    if wait:
        pending.build.wait()
    if pending.build.failed:
        call.pending = None
        warnings.warn(f"mmtune: could not build {pending.build.key.config} for {call.m}x{call.n} {call.dtype}; "
                      f"{call.family} {json.dumps(call.config)} serves it instead", stacklevel=3)
        return call
    options = pending.options
    device = operands[0].device
    raw = current_stream(call.kind, device) if options.stream is None else launch.stream_handle(options.stream)
    if not wait and launch.capturing(raw):
        return call
    with _build_lock:
        if _plans.get(key) is call:
            del _plans[key]
    return _build(key, call.kind, operands, replace(options, wait=True))


def _plan(device: launch.GpuContext, gpu: backends.Device, problem: Problem, options: CallOptions):
    """(launch plan, what serves it) for `problem` on `device`, whose context is current. A
    stand-in computes all of C's rows (peeling them is the chosen kernel's refinement)."""
    deterministic = options.deterministic
    served = find_entry(gpu, problem, deterministic, wait=options.waits, bias=options.bias)
    if served.building:
        try:
            return entry_plan(device, served.entry, problem.shape, problem.dtype, problem.layout), served
        except LaunchError as error:  # a shipped kernel this driver cannot load: the call waits instead
            warnings.warn(f"mmtune: a stand-in kernel does not load ({error}); waiting for the chosen one",
                          stacklevel=4)
            served.building.wait()  # its build writes the store, which find_entry then reads
            served = find_entry(gpu, problem, deterministic, wait=True, bias=options.bias)
    rest = peeled_rows(problem.m, served.config.params, problem.layout)
    if not rest:
        return entry_plan(device, served.entry, problem.shape, problem.dtype, problem.layout), served
    # the peeled rows' own kernel may stand in too: a switch never waits for a compile
    rest_entry = find_entry(gpu, replace(problem, m=rest), deterministic, wait=options.waits, bias=options.bias).entry
    (m, n, k), itemsize = problem.shape, np.dtype(problem.dtype).itemsize
    main = m - rest
    parts = [(entry_plan(device, served.entry, (main, n, k), problem.dtype, problem.layout), 0, 0),
             (entry_plan(device, rest_entry, (rest, n, k), problem.dtype, problem.layout), main * k * itemsize,
              main * n * itemsize)]
    return launch.RowParts(parts), served


def entry_plan(device: launch.GpuContext, entry: cubins.Entry, shape: tuple[int, int, int], dtype: str,
               layout: str = "NN") -> launch.Plan:
    """The launch plan of a stored kernel for a product of `shape` (M, N, K) in `layout` on
    `device`, the cubin loaded once per process."""
    return cubins.plan(entry, cubins.load(entry), device, shape, dtype, layout)


def _refuse_during_capture(raw: int, shape: tuple[int, int, int], dtype: str, device: int) -> None:
    try:
        capturing = launch.capturing(raw)
    except LaunchError as error:  # querying another stream during a global-mode capture
        capturing = "CAPTURE" in str(error)
    if capturing:
        m, n, k = shape
        raise CaptureError(
            f"matmul has no plan for {m}x{k} @ {k}x{n} {dtype} on cuda:{device} and the stream is being "
            "captured into a CUDA graph; call matmul once with these operands before capturing"
        )


def _identity(device: launch.GpuContext) -> backends.Device:
    """The GPU as lookup and the records know it: model name, compute capability, SM count."""
    found = _identities.get(device.ordinal)
    if found is None:
        sms = device.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        found = _identities[device.ordinal] = backends.Device(device.name, str(Arch.of(device.cc)), sms)
    return found


def prepare() -> None:
    """Do now what the first call of a shape the store does not remember would: import lookup (and
    through it numba, the kernel families and the cache) and read the data it reads. For programs
    that import mmtune at their start (autotune.torch), whose first products should not pay for it."""
    from autotune.select import lookup

    lookup.prepare()


def find_entry(gpu: backends.Device, problem: Problem, deterministic: bool = False, wait: bool = True,
               bias: bool = False) -> Served:
    """The config and store entry of `problem` (its precision resolved) on a GPU: from the store
    when it remembers them (numba stays unloaded), else from `lookup` for that GPU and, if
    missing, compiled into the store for the problem's layout and the offset width its shape
    needs. The store remembers what a plain lookup chose; a deterministic call takes it only if
    it does not add into C. Unless `wait`, a missing kernel builds in a child process and the
    best stored kernel for the same product stands in, where the store holds one. With `bias`, the
    kernels are builds that add a bias (the config is the one chosen without)."""
    config, source = shapes.recall(problem), FROM_STORE
    if config is None or (deterministic and adds_into_c(config.params)):
        from autotune.select.lookup import choose

        stamp = shapes.cache_stamp()  # before looking up: a write meanwhile must make this stale
        choice = choose(problem, gpu, deterministic)
        config, source = Config.of(choice.family, choice.config), choice.source
        try:
            if not deterministic:
                shapes.remember(problem, config, stamp=stamp)
        except OSError as error:
            warnings.warn(f"mmtune: cannot write to the kernel store: {error}", stacklevel=3)
    key = replace(cubins.BuildKey.of(config, problem.dtype, problem.shape, problem.layout, Arch.of(gpu.cc)), bias=bias)
    stored = None if wait else cubins.stored(key)
    if not wait and stored is None:
        stand_ins = background.stand_ins(key, (problem.m, problem.n))
        if stand_ins:
            return Served(background.config_of(stand_ins[0]), stand_ins[0], source, building=background.start(key))
    return Served(config, stored or cubins.get(key), source)


def _empty(kind: str, A, call: CallPlan) -> tuple[object, Operand]:
    """A new C of the same kind as A, on A's device (PyTorch, CuPy, else a Numba device array),
    and its operand: known contiguous, so only its pointer is read."""
    if call.new_out is None:
        call.new_out = _allocator(kind, A, call)
    out = call.new_out()
    return out, Operand._make((_pointer(kind, out), (call.m, call.n), None, call.out_key[2], call.out_key[3]))


def _allocator(kind: str, A, call: CallPlan):
    """A function returning a new C for this plan, its arguments bound once."""
    shape, dtype, device = (call.m, call.n), call.out_key[2], call.out_key[3]
    if kind == "torch":
        return partial(sys.modules["torch"].empty, shape, dtype=dtype, device=A.device)
    if kind == "cupy":
        cupy = sys.modules["cupy"]

        def new_cupy():
            with cupy.cuda.Device(device):
                return cupy.empty(shape, dtype=dtype)

        return new_cupy
    from numba import cuda

    from autotune.call.dispatcher import require_device_memory

    def new_numba():
        require_device_memory(call.m * call.n * np.dtype(dtype).itemsize)  # PyTorch and CuPy refuse by themselves
        with cuda.gpus[device]:
            return cuda.device_array(shape, np.dtype(dtype))

    return new_numba


def _pointer(kind: str, out) -> int:
    if kind == "torch":
        return out.data_ptr()
    if kind == "cupy":
        return out.data.ptr
    return out.__cuda_array_interface__["data"][0]
