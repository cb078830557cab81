"""The `mmtune::matmul` operator: C = A @ B (+ bias) through mmtune's kernels, as a registered
PyTorch op with a fake implementation and an autograd formula, so eager code, autograd,
`torch.compile(fullgraph=True)` and CUDA graphs all see one op.

CUDA tensors go through autotune.call.front.matmul on the current stream. CPU tensors go through
the kernels too under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1: how CI tests all of this);
otherwise they use torch's own matmul, with a one-time note. The backward computes
dA = dC @ B.T and dB = A.T @ dC through the same op, as transposed views that the kernels read in
place (layouts NT and TN), so it launches one kernel per gradient and copies nothing.

Eager calls skip the dispatcher's Python trampolines, which cost more than a small product: a
call that needs no gradient runs the op's body directly, one that does runs it inside an
autograd.Function with the op's backward. While torch traces (torch.compile, AOT autograd's
backward, make_fx) or a tensor subclass is involved, every call is the op.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from autotune import backends
from autotune.call import front
from autotune.call.operands import operand_layout
from autotune.call.options import CallOptions
from autotune.errors import OperandError
from autotune.torch import native

DISABLE_ENV = "MMTUNE_DISABLE"
DTYPES = (torch.float32, torch.float64)
#: torch.get_float32_matmul_precision() -> mmtune's precision: a program that lets torch use TF32
#: gets the tensor cores' three-product float32 (more exact than TF32), one that asks for the
#: highest precision gets IEEE float32
PRECISION_OF_TORCH = {"highest": "ieee", "high": "tf32x3", "medium": "tf32x3"}
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: precision -> its index in the C++ path's PRECISIONS
NATIVE_PRECISIONS = {"": 0, "ieee": 1, "tf32x3": 2}
_noted_cpu = []  # the one-time note on CPU tensors without the simulator has been given


def disabled() -> bool:
    """MMTUNE_DISABLE=1 (any value but "" and "0") sends every product to torch's own matmul."""
    return os.environ.get(DISABLE_ENV, "") not in ("", "0")


if not disabled():
    front.prepare()


def matmul(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor | None = None,
           precision: str | None = None) -> torch.Tensor:
    """A @ B (+ bias) through mmtune, differentiable and traceable. A: (..., M, K), its leading
    dimensions flattened into M; B: (K, N); bias: (N,). float32 and float64 on CUDA (and on the CPU
    under the simulator); other dtypes and devices, and MMTUNE_DISABLE=1, use torch's matmul.
    `precision` ("ieee" or "tf32x3", autotune.space.precision): default from
    torch.get_float32_matmul_precision(). Under torch.use_deterministic_algorithms(True) the
    kernel is one that does not add into C, so the same operands give the same bits."""
    if B.dim() != 2 or A.dim() < 2:
        raise ValueError(f"mmtune's matmul takes A of (..., M, K) and B of (K, N); got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    if bias is not None and tuple(bias.shape) != (B.shape[1],):
        raise ValueError(f"bias must have shape ({B.shape[1]},); got {tuple(bias.shape)}")
    if disabled() or not has_kernels(A, B, bias):
        product = A @ B
        return product if bias is None else product + bias
    return served(A, B, bias, precision or "")


def served(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor | None, precision: str) -> torch.Tensor:
    """`matmul` of operands it has checked and serves: the op where torch must see it, else the
    C++ eager path (autotune.torch.native) once it is loaded, else the op's body, inside the
    autograd Function where a gradient is needed."""
    rows = A if A.dim() == 2 else A.reshape(-1, A.shape[-1])
    native_path = native.extension
    if native_path is None and rows.is_cuda and not native.finished():
        if CallOptions().waits:
            native_path = load_native()
        else:
            native.start(_native_fallback)
    if _traced(rows, B, bias):
        product = torch.ops.mmtune.matmul(rows, B, bias, precision)
    elif native_path is not None and precision in NATIVE_PRECISIONS:
        product = native_path.matmul(rows, B, bias, NATIVE_PRECISIONS[precision])
    elif torch.is_grad_enabled() and (rows.requires_grad or B.requires_grad or bias is not None and bias.requires_grad):
        product = _apply(rows, B, bias, precision)
    else:
        product = _product(rows, B, bias, precision)
    return product if A.dim() == 2 else product.view(*A.shape[:-1], B.shape[1])


def load_native():
    """The C++ eager path (autotune.torch.native), built and loaded now if it is not yet; None
    where it cannot be built. Under MMTUNE_WAIT=1 the first CUDA product does this, as it waits
    for its kernel's build; otherwise it loads in the background."""
    return native.load(_native_fallback)


def _native_fallback(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, precision: str):
    """(C, its launches or None, their plan) for a product the C++ table lacks: computed here, its
    plan's launches (autotune.call.front.planned) kept by the table once they are final. A
    backward that torch traces, or runs under a dispatch mode, calls the op."""
    if _traced(a, b, bias):
        return torch.ops.mmtune.matmul(a, b, bias, precision), None, None
    c = _product(a, b, bias, precision)
    call = front.planned(a, b, None if bias is None else bias.contiguous(),
                         torch.are_deterministic_algorithms_enabled(), precision or _torch_precision(a.dtype))
    return c, None if call is None else call.plan.launches(), call


def _traced(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the op itself must be called, not its body: torch is tracing (some versions trace
    AOT autograd's backward with is_compiling() false, but always under a dispatch mode), a
    torch.func transform is active, or a tensor is a subclass, whose own dispatch must see the op."""
    return (torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None
            or torch._C._are_functorch_transforms_active()
            or type(a) not in _PLAIN or type(b) not in _PLAIN or bias is not None and type(bias) not in _PLAIN)


def has_kernels(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether mmtune computes this product: a float dtype it has kernels for, on CUDA or the CPU
    (operands on two devices are refused as torch.matmul refuses them)."""
    dtype = A.dtype
    return (dtype in DTYPES and B.dtype == dtype and (bias is None or bias.dtype == dtype)
            and (A.is_cuda or A.is_cpu))


def _torch_precision(dtype: torch.dtype) -> str:
    if dtype != torch.float32:
        return "ieee"
    return PRECISION_OF_TORCH[torch.get_float32_matmul_precision()]


@torch.library.custom_op("mmtune::matmul", mutates_args=())
def _matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], precision: str) -> torch.Tensor:
    """The op: 2-D a @ b (+ bias); precision "" is torch's float32 matmul precision."""
    return _product(a, b, bias, precision)


def _product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, precision: str) -> torch.Tensor:
    """The op's body. Torch's settings are read here, when it runs, so a compiled graph follows
    them as eager code does. Views the kernels cannot read in place (neither C-contiguous nor the
    transpose of a C-contiguous tensor) are copied, once the kernels refuse them."""
    precision = precision or _torch_precision(a.dtype)
    deterministic = torch.are_deterministic_algorithms_enabled()
    bias = None if bias is None else bias.contiguous()
    try:
        return _computed(a, b, bias, deterministic, precision)
    except OperandError:
        if operand_layout(tuple(a.shape), a.stride(), 1) and operand_layout(tuple(b.shape), b.stride(), 1):
            raise
        return _computed(a.contiguous(), b.contiguous(), bias, deterministic, precision)


def _computed(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, deterministic: bool,
              precision: str) -> torch.Tensor:
    """a @ b + bias, the bias added by the kernel's epilogue."""
    if a.device.type == "cuda":
        return front.matmul(a, b, deterministic=deterministic, precision=precision, bias=bias)
    if backends.simulated():
        return _simulated(a, b, bias, deterministic, precision)
    _note_cpu()
    return a @ b if bias is None else torch.addmm(bias, a, b)


@_matmul.register_fake
def _(a, b, bias, precision):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "mmtune::matmul takes 2-D operands")
    torch._check(a.shape[1] == b.shape[0], lambda: f"inner dimensions differ: {a.shape} @ {b.shape}")
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output):
    a, b, _, precision = inputs
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
    ctx.precision = precision
    ctx.transposed = (_transposed(a), _transposed(b))


def _transposed(x: torch.Tensor) -> bool:
    """Whether x is the transpose of a C-contiguous tensor (layout T), as nn.Linear's W.T is."""
    return x.dim() == 2 and x.shape[0] > 1 and x.stride(0) == 1 and not x.is_contiguous()


def _backward(ctx, grad):
    """dA = dC @ B.T, dB = A.T @ dC, dbias = the column sums of dC: each only where needed. A
    gradient has its operand's layout: for a transposed operand (nn.Linear's W.T) the kernel
    computes the transpose, dW = dC.T @ X, so that no copy makes it W's layout afterwards. Each
    goes through `served`, so a backward that builds a graph (double backward) is differentiable
    too, and one that torch traces calls the op."""
    a, b = ctx.saved_tensors
    needs_a, needs_b, needs_bias = ctx.needs_input_grad[:3]
    a_transposed, b_transposed = ctx.transposed
    grad_a = grad_b = None
    if needs_a:
        grad_a = served(b, grad.t(), None, ctx.precision).t() if a_transposed else served(grad, b.t(), None,
                                                                                          ctx.precision)
    if needs_b:
        grad_b = served(grad.t(), a, None, ctx.precision).t() if b_transposed else served(a.t(), grad, None,
                                                                                          ctx.precision)
    grad_bias = grad.sum(0) if needs_bias else None
    return grad_a, grad_b, grad_bias, None


_matmul.register_autograd(_backward, setup_context=_setup_context)


class _Product(torch.autograd.Function):
    """The op's body and backward in eager code (the module's docstring says why); forward takes
    ctx itself, the quicker form of autograd.Function."""

    @staticmethod
    def forward(ctx, a, b, bias, precision):
        _setup_context(ctx, (a, b, bias, precision), None)
        return _product(a, b, bias, precision)

    backward = staticmethod(_backward)


#: autograd.Function.apply without its Python wrapper, whose work (torch.func transforms, which
#: `_traced` sends to the op instead, and their dead wrappers) costs more than a small product
_apply = super(torch.autograd.Function, _Product).apply


def _simulated(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, deterministic: bool,
               precision: str) -> torch.Tensor:
    """a @ b + bias on the simulator's device arrays, each in its own layout (a transposed view
    stays one)."""
    from numba import cuda

    def device_array(x: torch.Tensor):
        layout = operand_layout(tuple(x.shape), x.stride(), 1)
        if layout is None:
            raise OperandError(f"strides {x.stride()}: neither layout N nor T")
        if layout == "T":
            return cuda.to_device(x.detach().t().numpy()).T
        return cuda.to_device(x.detach().numpy())

    c = front.matmul(device_array(a), device_array(b), deterministic=deterministic, precision=precision,
                     bias=None if bias is None else cuda.to_device(bias.detach().numpy()))
    return torch.from_numpy(c.copy_to_host())


def _note_cpu() -> None:
    if not _noted_cpu:
        _noted_cpu.append(True)
        warnings.warn("mmtune: CPU tensors use torch's own matmul (mmtune's kernels run on CUDA tensors, or on the "
                      "CPU under the CUDA simulator, NUMBA_ENABLE_CUDASIM=1)", stacklevel=3)
