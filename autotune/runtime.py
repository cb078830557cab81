"""matmul(A, B, out=None) with the tuned kernel for the shape, and lookup(): which one and why.

Where a config comes from, in order:
  exact    the cache holds this (device, dtype, M, N, K)
  nearest  the cache's tuned shape on this device and dtype closest by autotune.cache.shape_distance
           (log2 scale; doubling one dimension = 1), if within NEAREST_MAX_DISTANCE
  shipped  the same two steps over the records committed in studies/*/records.json for this GPU
  default  the register family's DEFAULT config
Lookups and built kernels are memoized per process; call `clear()` after tuning in-process.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

import kernels
from autotune.cache import Cache, CacheError, nearest_rows
from autotune.measure import device_info
from autotune.space import DeviceLimits, default_config, infeasibility
from kernels import DTYPES, Kernel, OperandError

NEAREST_MAX_DISTANCE = 3.0  # e.g. 8x along one dimension, or 2x along all three
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "studies"
DEFAULT_FAMILY = "register"


@dataclass(frozen=True)
class Choice:
    family: str
    config: dict
    source: str  # exact | nearest | shipped | default
    device: str
    tuned_shape: tuple[int, int, int] | None = None  # the shape the config was tuned for
    distance: float | None = None  # shape_distance to tuned_shape
    gflops: float | None = None  # as measured when tuned


_choices: dict[tuple, Choice] = {}
_kernels: dict[tuple, Kernel] = {}


def clear() -> None:
    """Forget memoized lookups (e.g. after tuning in this process) and built kernels."""
    _choices.clear()
    _kernels.clear()
    _device.cache_clear()


def lookup(m: int, n: int, k: int, dtype: str = "float32") -> Choice:
    """The config `matmul` uses for an (M x K) @ (K x N) product of `dtype`, and where it came from."""
    key = (m, n, k, dtype)
    choice = _choices.get(key)
    if choice is None:
        choice = _choices[key] = _find(m, n, k, dtype)
    return choice


def _find(m: int, n: int, k: int, dtype: str) -> Choice:
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    device = _device()
    for source, rows in (("cache", _cached_rows(device, dtype)), ("shipped", shipped_rows(device, dtype))):
        usable = [r for r in rows if _usable(r, dtype)]
        for distance, row in nearest_rows(usable, (m, n, k), 1):
            if distance <= NEAREST_MAX_DISTANCE:
                name = source if source == "shipped" else ("exact" if distance == 0 else "nearest")
                return Choice(
                    row["family"], row["params"], name, device,
                    (row["m"], row["n"], row["k"]), distance, row["gflops"],
                )
    return Choice(DEFAULT_FAMILY, default_config(DEFAULT_FAMILY), "default", device)


@cache
def _device() -> str:
    return device_info()["device"]


def _cached_rows(device: str, dtype: str) -> list[dict]:
    try:
        return Cache().rows(device, dtype)
    except CacheError as error:
        warnings.warn(f"mmtune: ignoring the cache: {error}", stacklevel=3)
        return []


def shipped_rows(device: str, dtype: str) -> list[dict]:
    """Records committed in studies/*/records.json (the export format) for this device and dtype."""
    rows = []
    for path in sorted(SHIPPED_DIR.glob("*/records.json")):
        rows += [r for r in json.loads(path.read_text()) if r["device"] == device and r["dtype"] == dtype]
    return rows


def _usable(row: dict, dtype: str) -> bool:
    """A row whose family or params no longer fit the code (after an upgrade) is skipped."""
    try:
        reason = infeasibility(row["family"], row["params"], dtype, DeviceLimits())
    except ValueError as error:  # unknown family
        reason = str(error)
    if reason:
        warnings.warn(f"mmtune: skipping cached {row['family']} config for {row['m']}x{row['n']}x{row['k']}: {reason}")
    return reason is None


def kernel_for(choice: Choice, dtype: str) -> Kernel:
    key = (choice.family, json.dumps(choice.config, sort_keys=True), dtype)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = kernels.build(choice.family, choice.config, dtype)
    return kernel


def matmul(A, B, out=None):
    """C = A @ B with the tuned kernel. A and B: NumPy arrays (copied to the GPU and back), or
    device arrays (Numba, or anything with __cuda_array_interface__ such as CuPy and PyTorch),
    used in place. Returns the same kind as A; `out`, if given, receives C and is returned."""
    from numba import cuda

    if isinstance(A, np.ndarray) or isinstance(B, np.ndarray):
        if not (isinstance(A, np.ndarray) and isinstance(B, np.ndarray)):
            raise OperandError("A and B must both be NumPy arrays or both be device arrays")
        return _host_matmul(A, B, out, cuda)
    dA, dB = _device_view(A, "A", cuda), _device_view(B, "B", cuda)
    m, n, k, dtype = _product_shape(dA, dB)
    if out is None:
        out = _empty_like(A, (m, n), dA.dtype, cuda)
    dC = _device_view(out, "out", cuda)
    kernel_for(lookup(m, n, k, dtype), dtype)(dA, dB, dC)
    return out


def _host_matmul(A: np.ndarray, B: np.ndarray, out, cuda):
    m, n, k, dtype = _product_shape(A, B)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype != A.dtype):
        raise OperandError(f"out must be a {m}x{n} NumPy array of {dtype}")
    dC = cuda.device_array((m, n), A.dtype)
    kernel_for(lookup(m, n, k, dtype), dtype)(
        cuda.to_device(np.ascontiguousarray(A)), cuda.to_device(np.ascontiguousarray(B)), dC
    )
    if out is None:
        return dC.copy_to_host()
    if out.flags.c_contiguous:
        return dC.copy_to_host(out)
    out[...] = dC.copy_to_host()
    return out


def _product_shape(A, B) -> tuple[int, int, int, str]:
    for name, x in (("A", A), ("B", B)):
        if len(x.shape) != 2:
            raise OperandError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if A.dtype != B.dtype:
        raise OperandError(f"A and B differ in dtype: {A.dtype} and {B.dtype}")
    dtype = np.dtype(A.dtype).name
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise OperandError(f"inner dimensions differ: A is {m}x{k}, B is {k2}x{n}")
    return m, n, k, dtype


def _device_view(x, name: str, cuda):
    if cuda.devicearray.is_cuda_ndarray(x):
        return x
    if hasattr(x, "__cuda_array_interface__") and hasattr(cuda, "as_cuda_array"):  # not in the simulator
        return cuda.as_cuda_array(x)
    raise OperandError(f"{name} is a {type(x).__name__}: expected a NumPy array or a CUDA device array")


def _empty_like(A, shape, dtype, cuda):
    """A new device array of the same kind as A (CuPy, PyTorch, else Numba)."""
    module = type(A).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    if module == "torch":
        import torch

        return torch.empty(shape, dtype=A.dtype, device=A.device)
    return cuda.device_array(shape, dtype)
