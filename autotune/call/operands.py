"""matmul's operands, read cheaply, and every check on them in one place.

A call on device arrays must not build a wrapper per operand, so each kind of array has a reader
returning a plain tuple `(pointer, shape, strides, dtype, device)`: `strides` is None when the
array is C-contiguous (so a contiguous array costs no stride arithmetic), `dtype` is whatever
token the kind uses (torch.float32, a NumPy dtype, a typestr), `device` the CUDA ordinal (-1 on
the host). Readers: PyTorch tensors (`data_ptr()`), CuPy arrays, anything with
`__cuda_array_interface__` (Numba device arrays among them) and anything with `__dlpack__`.
The checks that depend on shapes, dtypes and devices run once, when a plan is built
(`check_product`); per call only the plan's key (shapes, strides, dtypes, devices) is compared.
A and B may each be C-contiguous (layout "N") or the transpose of a C-contiguous array ("T",
e.g. `X.T`): the kernels read both in place (kernels.LAYOUTS); C must be C-contiguous.
No numba here: a fresh process reads operands and launches without it.
"""

from __future__ import annotations

import ctypes
from typing import Callable, NamedTuple

import numpy as np

from autotune.errors import OperandError
from kernels.rules import DTYPE_NAMES as DTYPES

ACCEPTED = "C-contiguous, or the transpose of a C-contiguous array (layouts N and T)"


class Operand(NamedTuple):
    """What a call reads of an array. The per-call readers build it with `_make`, NamedTuple's
    cheapest constructor: it is made twice or three times a call."""

    pointer: int
    shape: tuple
    strides: tuple | None  # bytes; None when C-contiguous
    dtype: object  # the kind's own dtype token; dtype_name() turns it into "float32" etc.
    device: int  # CUDA ordinal; -1 on the host


Reader = Callable[[object], Operand]


def kind_of(x) -> str:
    """torch, cupy, cai (anything with __cuda_array_interface__, Numba's arrays too), dlpack, or
    host (NumPy and whatever else matmul copies through the host)."""
    module = type(x).__module__.split(".")[0]
    if module == "torch" and hasattr(x, "data_ptr"):
        return "torch"
    if module == "cupy" and hasattr(x, "__cuda_array_interface__"):
        return "cupy"
    if hasattr(x, "__cuda_array_interface__"):
        return "cai"
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
        return "dlpack"
    return "host"


def read_torch(t) -> Operand:
    return Operand._make((t.data_ptr(), t.shape, None if t.is_contiguous() else _torch_strides(t), t.dtype,
                          t.get_device()))


def _torch_strides(t) -> tuple:
    size = t.element_size()
    return tuple([s * size for s in t.stride()])


def read_cupy(x) -> Operand:
    return Operand._make((x.data.ptr, x.shape, None if x.flags.c_contiguous else x.strides, x.dtype, x.device.id))


def read_cai(x) -> Operand:
    cai = x.__cuda_array_interface__
    pointer, shape, strides = cai["data"][0], tuple(cai["shape"]), cai.get("strides")
    if strides is not None and tuple(strides) == c_strides(shape, np.dtype(cai["typestr"]).itemsize):
        strides = None
    return Operand._make((pointer, shape, None if strides is None else tuple(strides), cai["typestr"],
                          _pointer_device(pointer)))


def _pointer_device(pointer: int) -> int:
    """The ordinal of the device holding `pointer`: __cuda_array_interface__ does not say. An
    empty array has no memory (pointer 0): it counts as on the current device."""
    from autotune.backends.launch import current_device, pointer_device

    return current_device() if pointer == 0 else pointer_device(pointer)


READERS: dict[str, Reader] = {"torch": read_torch, "cupy": read_cupy, "cai": read_cai}


def reader(kind: str) -> Reader:
    if kind == "dlpack":
        return read_dlpack
    return READERS[kind]


def c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def dtype_name(token) -> str:
    """"float32" for torch.float32, np.dtype('float32'), '<f4'; the name for other types too."""
    text = str(token)
    if text.startswith("torch."):
        return text[len("torch."):]
    try:
        return np.dtype(token).name
    except TypeError:
        return text


# DLPack: a capsule holding a DLManagedTensor (dlpack.h); read it, leave it to its owner.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DL_CODES = {0: "int", 1: "uint", 2: "float"}


_DL_CUDA = 2


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer


_capsule_pointer.restype = ctypes.c_void_p


_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def read_dlpack(x) -> Operand:
    """An operand known only through __dlpack__ (the slow way: one capsule per call)."""
    capsule = x.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    itemsize = tensor.dtype.bits // 8
    dtype = np.dtype(f"{_DL_CODES.get(tensor.dtype.code, 'void')}{tensor.dtype.bits}") if tensor.dtype.lanes == 1 else None
    strides = None
    if tensor.strides:
        strides = tuple(tensor.strides[i] * itemsize for i in range(tensor.ndim))
        if strides == c_strides(shape, itemsize):
            strides = None
    device = tensor.device.device_id if tensor.device.device_type == _DL_CUDA else -1
    return Operand._make(((tensor.data or 0) + tensor.byte_offset, shape, strides, dtype, device))


def check_product(A: Operand, B: Operand, C: Operand | None = None) -> tuple[int, int, int, str, str]:
    """(M, N, K, dtype, layout) of A @ B on one GPU, layout as in kernels.LAYOUTS ("TN": A is
    the transpose of a C-contiguous array), or a one-line OperandError naming the culprit.
    Everything a kernel would misread is refused: never a silent copy, never a wrong result."""
    m, n, k, dtype = check_shapes(A, B, C)
    itemsize = np.dtype(dtype).itemsize
    for name, x in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if x.device < 0:
            raise OperandError(f"{name} is not on a CUDA device; pass GPU arrays, or NumPy arrays for both")
        if x.device != A.device:
            raise OperandError(f"{name} is on cuda:{x.device} and A on cuda:{A.device}; put them on one GPU")
    if C is not None and operand_layout(C.shape, C.strides, itemsize) != "N":
        raise OperandError(f"C is not C-contiguous (strides {C.strides}); pass a C-contiguous out")
    return m, n, k, dtype, _layout_of("A", A, itemsize) + _layout_of("B", B, itemsize)


def check_bias(bias, n: int, dtype: str, device: int | None = None) -> None:
    """A bias (an operand, or anything with .shape, .dtype and .strides) of C's N columns: 1-D,
    contiguous, of the product's dtype (and on its device, for an operand); else a one-line
    OperandError."""
    if tuple(bias.shape) != (n,):
        raise OperandError(f"bias must have shape ({n},), one value per column of C; got {tuple(bias.shape)}")
    if dtype_name(bias.dtype) != dtype:
        raise OperandError(f"bias has dtype {dtype_name(bias.dtype)}, A and B {dtype}")
    strides = bias.strides
    if n > 1 and strides is not None and tuple(strides) != (np.dtype(dtype).itemsize,):
        raise OperandError(f"bias has strides {tuple(strides)}; pass a contiguous bias")
    if device is not None and bias.device != device:
        raise OperandError(f"bias is on {'the host' if bias.device < 0 else f'cuda:{bias.device}'} and A on "
                           f"cuda:{device}; put them on one GPU")


def _layout_of(name: str, x: Operand, itemsize: int) -> str:
    layout = operand_layout(x.shape, x.strides, itemsize)
    if layout is None:
        raise OperandError(f"{name} has strides {x.strides} for shape {tuple(x.shape)}; matmul takes {ACCEPTED}: "
                           "pass a contiguous copy")
    return layout


def operand_layout(shape: tuple, strides: tuple | None, itemsize: int) -> str | None:
    """"N" for a C-contiguous 2-D array (`strides` None, or C's strides: a stride along an extent
    of 1 or less never matters), "T" for the transpose of one (strides (itemsize, rows * itemsize)
    for shape (rows, cols): memory shape (cols, rows)), None for any other strides."""
    if strides is None:
        return "N"
    rows, cols = shape

    def fits(expected: tuple) -> bool:
        return all(extent <= 1 or got == want for extent, got, want in zip(shape, strides, expected))

    if fits((cols * itemsize, itemsize)):
        return "N"
    if fits((itemsize, rows * itemsize)):
        return "T"
    return None


def check_shapes(A, B, C=None) -> tuple[int, int, int, str]:
    """(M, N, K, dtype) from anything with .shape and .dtype (operands, NumPy or Numba arrays)."""
    for name, x in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if len(x.shape) != 2:
            raise OperandError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    dtype = dtype_name(A.dtype)
    if dtype_name(B.dtype) != dtype:
        raise OperandError(f"A and B differ in dtype: {dtype} and {dtype_name(B.dtype)}")
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise OperandError(f"inner dimensions differ: A is {m}x{k}, B is {k2}x{n}")
    if C is not None:
        if dtype_name(C.dtype) != dtype:
            raise OperandError(f"C has dtype {dtype_name(C.dtype)}, the kernel was built for {dtype}")
        if tuple(C.shape) != (m, n):
            raise OperandError(f"C must be {m}x{n}, got {C.shape[0]}x{C.shape[1]}")
    return m, n, k, dtype


def arrays_layout(A, B) -> str:
    """The layout (kernels.LAYOUTS) of arrays A and B (anything with .shape, .strides and NumPy's
    flags or Numba's is_c_contiguous/is_f_contiguous), or a one-line OperandError naming the one
    of other strides: a strided view is refused, never silently copied."""
    return _array_layout_of("A", A) + _array_layout_of("B", B)


def _array_layout_of(name: str, x) -> str:
    layout = array_layout(x)
    if layout is None:
        raise OperandError(f"{name} has strides {tuple(x.strides)} for shape {tuple(x.shape)}; matmul takes {ACCEPTED}: "
                           "pass a contiguous copy")
    return layout


def array_layout(x) -> str | None:
    """"N" (C-contiguous), "T" (F-contiguous: the transpose of a C-contiguous array) or None."""
    flags = getattr(x, "flags", None)
    if flags is not None:
        c, f = flags["C_CONTIGUOUS"], flags["F_CONTIGUOUS"]
    else:
        c, f = x.is_c_contiguous(), x.is_f_contiguous()
    return "N" if c else "T" if f else None
