"""matmul through Numba's dispatcher: NumPy operands, the CUDA simulator and
MMTUNE_LAUNCH=numba (autotune.call.front sends them here). While autotune.record runs
(autotune.call.recording), each call counts on its plan's product, as on the driver path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune import backends
from autotune.call import recording
from autotune.call.operands import arrays_layout, check_bias, check_shapes
from autotune.call.options import CallOptions
from autotune.errors import OperandError
from autotune.memos import MEMOS
from autotune.select.lookup import kernel_for, lookup
from autotune.space.precision import resolve as resolve_precision
from autotune.space.problem import Problem
from autotune.store.recorded import Recorded
from kernels import Config, Kernel

_plans: dict[tuple, "_Plan"] = MEMOS.table("call.numba_plans")
_host_plans: dict[tuple, "_Plan"] = MEMOS.table("call.numba_host_plans")


@dataclass(frozen=True, eq=False)  # a key of recording.counts, by identity
class _Plan:
    """What a device-array call of a given (A.shape, B.shape, dtypes, layout) needs, validated once."""

    shape: tuple[int, int]  # of C
    dtype: np.dtype
    layout: str
    #: (first row of C, rows, kernel, its launch on the default stream) per product: C's last rows
    #: as a product of their own where lookup peels them (Choice.peel)
    parts: tuple
    recorded: Recorded | None = None  # the product, for autotune.record; None for an empty one

    @property
    def kernel(self) -> Kernel:
        """The kernel of C's first rows (of all of them unless some are peeled)."""
        return self.parts[0][2]

    def launch(self, a, b, c, stream=None, bias=None) -> None:
        """C = A @ B (+ bias) from A and B as stored; on the default stream, or on a Numba `stream`."""
        more = () if bias is None else (bias,)
        for first, rows, kernel, default in self.parts:
            if rows != self.shape[0]:  # A's rows are rows in memory (peeled_rows): views of them
                a_part, c_part = a[first:first + rows], c[first:first + rows]
            else:
                a_part, c_part = a, c
            (default if stream is None else kernel.launcher(rows, self.shape[1], stream))(a_part, b, c_part, *more)


def matmul(A, B, out=None, bias=None, options: CallOptions = CallOptions()):
    """C = A @ B (+ bias) through Numba's dispatcher (autotune.call.front.matmul sends the
    simulator, NumPy operands and MMTUNE_LAUNCH=numba here). A and B: NumPy arrays (copied to the
    GPU and back), or device arrays (Numba, or anything with __cuda_array_interface__ such as CuPy
    and PyTorch; each C-contiguous or the transpose of a C-contiguous array), used in place,
    launched on `options.stream` (a raw handle or a Numba stream; default: the default stream).
    Returns the same kind as A; `out`, if given, receives C and is returned. `bias`, of C's N
    columns, is added to its rows. With `options.deterministic`, a kernel that does not add into C
    (split-K, stream-K); with `options.precision`, one of that precision or a stricter one
    (autotune.space.precision)."""
    deterministic, precision = options.deterministic, options.precision
    if isinstance(A, np.ndarray) or isinstance(B, np.ndarray):
        if not (isinstance(A, np.ndarray) and isinstance(B, np.ndarray)):
            raise OperandError("A and B must both be NumPy arrays or both be device arrays")
        return _host_matmul(A, B, out, bias, options)
    dA, dB = _device_view(A, "A"), _device_view(B, "B")
    key = (dA.shape, dB.shape, dA.dtype, dB.dtype, dA.is_c_contiguous(), dB.is_c_contiguous(), dA.is_f_contiguous(),
           dB.is_f_contiguous(), deterministic, precision, bias is not None)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(dA, dB, replace(options, bias=bias is not None))
    _count(plan)
    if bias is not None:
        bias = _device_view(bias, "bias")
        check_bias(bias, plan.shape[1], plan.dtype.name)
    if out is None:
        out = _empty_like(A, plan.shape, plan.dtype)
    dC = _device_view(out, "out")
    if dC.shape != plan.shape or dC.dtype != plan.dtype:
        raise OperandError(f"out must be a {plan.shape[0]}x{plan.shape[1]} device array of {plan.dtype}")
    if not dC.is_c_contiguous():
        raise OperandError("C is not C-contiguous; pass a C-contiguous out")
    a, b = (dA.T if plan.layout[0] == "T" else dA), (dB.T if plan.layout[1] == "T" else dB)  # as stored
    plan.launch(a, b, dC, _numba_stream(options.stream) if options.stream else None, bias)
    return out


def _count(plan: _Plan) -> None:
    counts = recording.counts
    if counts is not None:
        counts[plan] = counts.get(plan, 0) + 1


def _numba_stream(stream):
    """A Numba stream for `stream`: a Numba stream as it is, else a raw handle or a PyTorch or CuPy
    stream wrapped."""
    from numba import cuda

    if isinstance(stream, cuda.cudadrv.driver.Stream):
        return stream
    from autotune.backends import launch

    return cuda.external_stream(launch.stream_handle(stream))


def _plan(dA, dB, options: CallOptions) -> _Plan:
    """The kernel for these operands' shapes, dtype and layout: a transposed C-contiguous view
    ("T", F-contiguous in Numba's terms) is passed as the array it transposes."""
    backends.require_gpu()
    m, n, k, dtype = check_shapes(dA, dB)
    return _new_plan((m, n, k), dtype, arrays_layout(dA, dB), options)


def _new_plan(shape: tuple[int, int, int], dtype: str, layout: str, options: CallOptions) -> _Plan:
    """The plan of a product: lookup's kernel for it, or for its first rows and, for the rows it
    peels, the kernel lookup picks for a product of those rows; and the product, as recorded."""
    m, n, k = shape
    deterministic, precision = options.deterministic, options.precision
    choice = lookup(m, n, k, dtype, layout=layout, deterministic=deterministic, precision=precision)
    main = m - choice.peel

    def kernel(chosen, rows: int) -> Kernel:
        built = kernel_for(chosen, dtype, (rows, n, k), layout)
        return built.with_bias() if options.bias else built

    parts = [(0, main, kernel(choice, m))]
    if choice.peel:
        parts.append((main, choice.peel, kernel(choice.rest, choice.peel)))
    product = None
    if min(shape) > 0:
        gpu = backends.current().device()
        problem = Problem(device=gpu.name, dtype=dtype, m=m, n=n, k=k, layout=layout,
                          precision=resolve_precision(precision, dtype, gpu.cc))
        product = replace(Recorded.served(problem, gpu, Config.of(choice.family, choice.config), choice.source,
                                          deterministic), bias=options.bias)
    launches = tuple((first, rows, kernel, kernel.launcher(rows, n)) for first, rows, kernel in parts)
    return _Plan(shape=(m, n), dtype=np.dtype(dtype), layout=layout, parts=launches, recorded=product)


def _host_matmul(A: np.ndarray, B: np.ndarray, out, bias, options: CallOptions):
    """NumPy operands of any layout are copied C-contiguous to the GPU: the NN kernel."""
    m, n, k, dtype = check_shapes(A, B)
    if bias is not None:
        if not isinstance(bias, np.ndarray):
            raise OperandError("bias must be a NumPy array when A and B are")
        bias = np.ascontiguousarray(bias)
        check_bias(bias, n, dtype)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype != A.dtype):
        raise OperandError(f"out must be a {m}x{n} NumPy array of {dtype}")
    backends.require_gpu()
    require_device_memory((m * k + k * n + m * n) * A.dtype.itemsize)
    backend = backends.current()
    dC = backend.empty((m, n), A.dtype)
    options = replace(options, bias=bias is not None)
    key = (m, n, k, dtype, options.deterministic, options.precision, options.bias)
    plan = _host_plans.get(key)
    if plan is None:
        plan = _host_plans[key] = _new_plan((m, n, k), dtype, "NN", options)
    _count(plan)
    plan.launch(backend.to_device(np.ascontiguousarray(A)), backend.to_device(np.ascontiguousarray(B)), dC, None,
                None if bias is None else backend.to_device(bias))
    if out is None:
        return dC.copy_to_host()
    if out.flags.c_contiguous:
        return dC.copy_to_host(out)
    out[...] = dC.copy_to_host()
    return out


def _device_view(x, name: str):
    view = backends.current().device_view(x)
    if view is None:
        raise OperandError(f"{name} is a {type(x).__name__}: expected a NumPy array or a CUDA device array")
    return view


def require_device_memory(nbytes: int) -> None:
    """Refuse, with a clear error, a product that cannot fit in the GPU's free memory."""
    free = backends.current().free_memory()
    if nbytes > free:
        raise OperandError(f"the product needs {nbytes / 2**30:.2f} GiB on the GPU; {free / 2**30:.2f} GiB is free")


def _empty_like(A, shape, dtype):
    """A new device array of the same kind as A (CuPy, PyTorch, else Numba)."""
    require_device_memory(shape[0] * shape[1] * np.dtype(dtype).itemsize)
    module = type(A).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    if module == "torch":
        import torch

        return torch.empty(shape, dtype=A.dtype, device=A.device)
    return backends.current().empty(shape, dtype)
