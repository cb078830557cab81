"""matmul(A, B, out=None) with the tuned kernel for the shape, and lookup(): which one and why.

Where a config comes from: the rows of the local cache and the records shipped in the package,
for this dtype, ranked in this order (the first that fits wins):
  1. exact    a row for this (M, N, K)
     few-rows a product of fewer rows than the smallest tile: B streamed once (the gemv family)
              for a few rows of float32, else the rule's 16-row tile, K split by the rule
              (autotune.space.few_rows_guess)
     small-k  a float32 product of a short K (a few k-steps), no skinny side and a C of a few
              tiles an SM: the rule's 64x64 tile (autotune.space.small_k_guess)
  2. measured the candidate that the nearest shapes of a shipped measured table rate best
              (autotune.neighbours), where a table of this dtype and architecture ships
  3. nearest  a row for the tuned shape closest by autotune.cache.shape_distance (log2 scale;
              doubling one dimension = 1) within NEAREST_MAX_DISTANCE, if its config loads the GPU
              alike at this shape (autotune.model.similar_load: about as many blocks, waves as full)
  4. model    the cheapest config by the cost model fitted on the usable rows (autotune.model):
              their tiles, vector tiles with every K-split too
  5. measured as 2, from the table of the nearest other architecture, where nothing of this
              architecture serves the shape; only configs whose instructions this GPU has
              (autotune.space.arch_infeasibility)
  6. default  the register family's DEFAULT config, where no table of the dtype ships either
Within steps 1 and 3 rows are ranked by the layout they were tuned for (`layout_rank`: a row of
the layout asked, then an NN row, whose config serves every layout, built for the one asked; rows
of other layouts are not used), then by the GPU they were measured on: this GPU model, then one
of the same compute capability and SM count, then one of the same compute capability (rows of
other architectures are never used); then the faster (exact) or the closer (nearest) row. A row
measured on other kernel code than today's (its source hash differs) is stale: it is used only
when no fresh row fits at steps 1 and 3, with a one-time warning to re-tune. A deterministic
lookup skips every config that adds into C (split-K, stream-K: their atomic additions land in any
order), at every step; a lookup of a precision (autotune.precision: "ieee" unless asked) takes
only configs whose family computes in that precision or a stricter one, at every step.
A pick whose tiles would spend a whole tile row on C's last few rows leaves those rows to a
product of their own (`Choice.peel`, autotune.operands.peeled_rows), looked up as any other.
Lookups and built kernels are memoized per process; call `clear()` after tuning in-process.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

import kernels
from autotune import backends, neighbours, records
from autotune.backends import Device
from autotune.cache import Cache, CacheError, shape_distance, stale
from autotune.model import predict, similar_load
from autotune.precision import allows, of_row, resolve as resolve_precision
from autotune.operands import OperandError, arrays_layout, check_shapes, peeled_rows
from autotune.records import ANOTHER_ARCHITECTURE, GPU_MATCHES, closest_table, gpu_rank
from autotune.space import DEFAULT_FAMILY, GpuLimits, default_config, few_rows_guess, infeasibility, small_k_guess
from autotune.store import adds_into_c
from kernels import DTYPES, LAYOUTS, Config, Kernel

NEAREST_MAX_DISTANCE = 3.0  # e.g. 8x along one dimension, or 2x along all three


@dataclass(frozen=True)
class Choice:
    family: str
    config: dict
    source: str  # exact | few-rows | small-k | measured | nearest | model | default
    device: str  # this GPU
    tuned_shape: tuple[int, int, int] | None = None  # the shape the config was tuned for
    distance: float | None = None  # shape_distance to tuned_shape
    gflops: float | None = None  # as measured when tuned
    origin: str | None = None  # cache | shipped
    measured_on: str | None = None  # the GPU model the row was measured on
    gpu_match: str | None = None  # one of GPU_MATCHES
    stale: bool = False  # measured on other kernel code than today's
    tuned_layout: str | None = None  # the layout the row was tuned for (kernels.LAYOUTS)
    #: for sources "measured" and "model": what the pick rests on (the measured shapes and how the
    #: config fared there; the row its tile comes from and the predicted time)
    basis: str | None = None
    #: C's last rows that a product of their own computes (autotune.operands.peeled_rows); 0: none
    peel: int = 0
    #: the config of that product, as lookup picks it for a (peel x N x K) product
    rest: "Choice | None" = None
    #: how the config's kernel computes (its family's precision, autotune.precision)
    precision: str = "ieee"


@dataclass(frozen=True)
class _Plan:
    """What a device-array call of a given (A.shape, B.shape, dtypes, layout) needs, validated once."""

    shape: tuple[int, int]  # of C
    dtype: np.dtype
    layout: str
    #: (first row of C, rows, kernel, its launch on the default stream) per product: C's last rows
    #: as a product of their own where lookup peels them (Choice.peel)
    parts: tuple

    @property
    def kernel(self) -> Kernel:
        """The kernel of C's first rows (of all of them unless some are peeled)."""
        return self.parts[0][2]

    def launch(self, a, b, c, stream=None) -> None:
        """C = A @ B from A and B as stored; on the default stream, or on a Numba `stream`."""
        for first, rows, kernel, default in self.parts:
            if rows != self.shape[0]:  # A's rows are rows in memory (peeled_rows): views of them
                a_part, c_part = a[first:first + rows], c[first:first + rows]
            else:
                a_part, c_part = a, c
            (default if stream is None else kernel.launcher(rows, self.shape[1], stream))(a_part, b, c_part)


_choices: dict[tuple, Choice] = {}
_kernels: dict[tuple, Kernel] = {}
_plans: dict[tuple, _Plan] = {}
_shipped: dict[str, list[dict]] = {}  # shipped rows per dtype, read once


def clear() -> None:
    """Forget memoized lookups (e.g. after tuning in this process), built kernels and the call
    path's plans."""
    from autotune import calls

    calls.clear()
    _choices.clear()
    _kernels.clear()
    _plans.clear()
    _shipped.clear()
    _this_gpu.cache_clear()


def lookup(m: int, n: int, k: int, dtype: str = "float32", device: Device | None = None, layout: str = "NN",
           deterministic: bool = False, precision: str | None = None) -> Choice:
    """The config `matmul` uses for an (M x K) @ (K x N) product of `dtype` on `device` (default:
    the current GPU) with operands in `layout` (kernels.LAYOUTS), and where it came from; with
    `deterministic`, one that does not add into C (split-K, stream-K); of `precision` or a
    stricter one (autotune.precision; default: its default for the dtype and GPU)."""
    device = device or _this_gpu()
    wanted = resolve_precision(precision, dtype, device.cc)
    key = (m, n, k, dtype, device, layout, deterministic, wanted)
    choice = _choices.get(key)
    if choice is None:
        found = _find(m, n, k, dtype, device, layout, deterministic, wanted)
        peel = peeled_rows(m, found.config, layout)
        rest = lookup(peel, n, k, dtype, device, layout, deterministic, wanted) if peel else None
        choice = _choices[key] = replace(found, peel=peel, rest=rest, precision=kernels.family(found.family).precision)
    return choice


def _find(m: int, n: int, k: int, dtype: str, device: Device, layout: str, deterministic: bool,
          wanted: str) -> Choice:
    if dtype not in DTYPES:
        raise OperandError(f"unsupported dtype {dtype}; supported: {', '.join(DTYPES)}")
    if layout not in LAYOUTS:
        raise OperandError(f"unknown layout {layout}; known: {', '.join(LAYOUTS)}")
    if dtype not in _shipped:
        _shipped[dtype] = records.shipped_rows(dtype=dtype)
    candidates = [("cache", row) for row in _cached_rows(dtype)] + [("shipped", row) for row in _shipped[dtype]]
    hashes = kernels.source_hashes()
    ranked, usable = [], []
    for origin, row in candidates:
        match, served = gpu_match(row, device), layout_rank(row, layout)
        if (match is None or served is None or (deterministic and adds_into_c(row["params"]))
                or not allows(wanted, of_row(row))):
            continue
        if not _usable(row, dtype):
            continue
        is_stale = stale(row, hashes)
        usable.append((is_stale, row))
        distance = shape_distance((m, n, k), (row["m"], row["n"], row["k"]))
        if distance <= NEAREST_MAX_DISTANCE:
            order = (is_stale, distance > 0, served, match, distance, -row["gflops"], origin != "cache")
            ranked.append((order, origin, row, match, distance, is_stale))
    best = min(ranked, key=lambda entry: entry[0]) if ranked else None
    if best is None or best[4] > 0:
        limits = GpuLimits.for_cc(device.cc)
        few = few_rows_guess(m, n, k, dtype, limits, device.sm_count, deterministic, layout)
        if few is not None:
            tile = "B streamed once (gemv)" if few.family == "gemv" else "the 16-row tile"
            return Choice(few.family, few.params, "few-rows", device.name,
                          basis=f"{m} rows: {tile}, K split {few.params.get('splits', 1)} ways")
        short = small_k_guess(m, n, k, dtype, limits, device.sm_count)
        if short is not None:
            return Choice(short.family, short.params, "small-k", device.name,
                          basis=f"K = {k}: the 64x64 tile, BK {short.params['bk']}")
        measured = _measured(m, n, k, dtype, device, deterministic, wanted)
        if measured is not None:
            return measured
    if best is None or (best[4] > 0 and not similar_load(best[2], m, n, k, device)):
        fresh = [row for is_stale, row in usable if not is_stale] or [row for _, row in usable]
        prediction = predict(m, n, k, dtype, device, fresh, deterministic)
        if prediction is not None:
            return Choice(prediction.family, prediction.config, "model", device.name, basis=prediction.basis)
    if best is None:
        return (_measured(m, n, k, dtype, device, deterministic, wanted, other_architectures=True)
                or Choice(DEFAULT_FAMILY, default_config(DEFAULT_FAMILY), "default", device.name))
    _, origin, row, match, distance, is_stale = best
    if is_stale:
        warnings.warn(
            f"mmtune: using a {row['family']} config for {row['m']}x{row['n']}x{row['k']} measured on older kernel "
            f"code ({origin}); `mmtune tune --m {m} --n {n} --k {k}` re-times it", stacklevel=3,
        )
    return Choice(
        row["family"], row["params"], "exact" if distance == 0 else "nearest", device.name,
        (row["m"], row["n"], row["k"]), distance, row["gflops"], origin, row["device"], GPU_MATCHES[match], is_stale,
        row.get("layout") or "NN",
    )


def _measured(m: int, n: int, k: int, dtype: str, device: Device, deterministic: bool, wanted: str,
              other_architectures: bool = False) -> Choice | None:
    """The measured table's pick (autotune.neighbours) from the table of the GPU closest to this
    one (records.closest_table), or None where no table of this dtype and architecture ships.
    With `other_architectures` (when nothing of this architecture can serve the shape), also the
    table of the nearest other architecture, its picks limited to the instructions this GPU has
    (space.arch_infeasibility): the register default is the slowest config there is. Only
    candidates whose family computes as `wanted` allows (autotune.precision.allows)."""
    if "measured" not in _shipped:
        _shipped["measured"] = records.measured_tables()
    found = closest_table(_shipped["measured"], dtype, device.name, device.cc, device.sm_count)
    if found is None or not device.sm_count or (found[0] == ANOTHER_ARCHITECTURE and not other_architectures):
        return None
    match, table = found
    limits = GpuLimits.for_cc(device.cc)

    def feasible(family: str, params: dict) -> bool:
        return (allows(wanted, kernels.family(family).precision)
                and infeasibility(family, params, dtype, limits) is None)

    pick = neighbours.choose(table, m, n, k, device.sm_count, deterministic, feasible=feasible)
    if pick is None:
        return None
    return Choice(pick.family, pick.config, "measured", device.name, measured_on=table["device"],
                  gpu_match=GPU_MATCHES[match], basis=pick.basis)


def layout_rank(row: dict, layout: str) -> int | None:
    """0 for a row tuned for `layout`, 1 for an NN row serving another layout (the transfer rule:
    a config tuned for NN is built for the layout asked), None for a row of another layout."""
    tuned = row.get("layout") or "NN"
    if tuned == layout:
        return 0
    return 1 if tuned == "NN" else None


def gpu_match(row: dict, device: Device) -> int | None:
    """How closely the GPU `row` was measured on matches `device` (records.gpu_rank)."""
    return gpu_rank(row, device.name, device.cc, device.sm_count)


@cache
def _this_gpu() -> Device:
    return backends.current().device()


def _device() -> str:
    return _this_gpu().name


def _cached_rows(dtype: str) -> list[dict]:
    try:
        cache = Cache()
    except CacheError as error:
        warnings.warn(f"mmtune: ignoring the cache: {error}", stacklevel=3)
        return []
    try:
        return cache.rows(dtype=dtype)
    finally:
        cache.close()


def _usable(row: dict, dtype: str) -> bool:
    """A row whose family or params no longer fit the code (after an upgrade) is skipped."""
    try:
        reason = infeasibility(row["family"], row["params"], dtype, GpuLimits.for_cc(row.get("cc")))
    except ValueError as error:  # unknown family
        reason = str(error)
    if reason:
        warnings.warn(f"mmtune: skipping cached {row['family']} config for {row['m']}x{row['n']}x{row['k']}: {reason}")
    return reason is None


def kernel_for(choice: Choice, dtype: str, shape: tuple[int, int, int], layout: str = "NN") -> Kernel:
    """`choice`'s kernel built as a product of `shape` in `layout` needs it (kernels.build_for),
    once per process for each build."""
    build = (kernels.offset_bits_for(*shape), kernels.unaligned_for(*shape, layout, dtype))
    key = (Config.of(choice.family, choice.config), dtype, layout, *build)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = kernels.build(choice.family, choice.config, dtype, layout, *build)
    return kernel


def matmul(A, B, out=None, stream=None, deterministic=False, precision=None):
    """C = A @ B through Numba's dispatcher (autotune.calls.matmul sends the simulator, NumPy
    operands and MMTUNE_LAUNCH=numba here). A and B: NumPy arrays (copied to the GPU and back),
    or device arrays (Numba, or anything with __cuda_array_interface__ such as CuPy and PyTorch;
    each C-contiguous or the transpose of a C-contiguous array), used in place, launched on
    `stream` (a raw handle or a Numba stream; default: the default stream). Returns the same kind
    as A; `out`, if given, receives C and is returned. With `deterministic`, a kernel that does not
    add into C (split-K, stream-K); with `precision`, one of that precision or a stricter one
    (autotune.precision)."""
    if isinstance(A, np.ndarray) or isinstance(B, np.ndarray):
        if not (isinstance(A, np.ndarray) and isinstance(B, np.ndarray)):
            raise OperandError("A and B must both be NumPy arrays or both be device arrays")
        return _host_matmul(A, B, out, deterministic, precision)
    dA, dB = _device_view(A, "A"), _device_view(B, "B")
    key = (dA.shape, dB.shape, dA.dtype, dB.dtype, dA.is_c_contiguous(), dB.is_c_contiguous(), dA.is_f_contiguous(),
           dB.is_f_contiguous(), deterministic, precision)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(dA, dB, deterministic, precision)
    if out is None:
        out = _empty_like(A, plan.shape, plan.dtype)
    dC = _device_view(out, "out")
    if dC.shape != plan.shape or dC.dtype != plan.dtype:
        raise OperandError(f"out must be a {plan.shape[0]}x{plan.shape[1]} device array of {plan.dtype}")
    if not dC.is_c_contiguous():
        raise OperandError("C is not C-contiguous; pass a C-contiguous out")
    a, b = (dA.T if plan.layout[0] == "T" else dA), (dB.T if plan.layout[1] == "T" else dB)  # as stored
    plan.launch(a, b, dC, _numba_stream(stream) if stream else None)
    return out


def _numba_stream(stream):
    """A Numba stream for `stream`: a Numba stream as it is, else a raw handle or a PyTorch or CuPy
    stream wrapped."""
    from numba import cuda

    if isinstance(stream, cuda.cudadrv.driver.Stream):
        return stream
    from autotune import launch

    return cuda.external_stream(launch.stream_handle(stream))


def _plan(dA, dB, deterministic: bool = False, precision: str | None = None) -> _Plan:
    """The kernel for these operands' shapes, dtype and layout: a transposed C-contiguous view
    ("T", F-contiguous in Numba's terms) is passed as the array it transposes."""
    m, n, k, dtype = check_shapes(dA, dB)
    layout = arrays_layout(dA, dB)
    return _Plan((m, n), np.dtype(dtype), layout, _parts(m, n, k, dtype, layout, deterministic, precision))


def _parts(m: int, n: int, k: int, dtype: str, layout: str, deterministic: bool, precision: str | None) -> tuple:
    """_Plan.parts: lookup's kernel for the product, or for its first rows and, for the rows it
    peels, the kernel lookup picks for a product of those rows."""
    choice = lookup(m, n, k, dtype, layout=layout, deterministic=deterministic, precision=precision)
    main = m - choice.peel
    parts = [(0, main, kernel_for(choice, dtype, (m, n, k), layout))]
    if choice.peel:
        parts.append((main, choice.peel, kernel_for(choice.rest, dtype, (choice.peel, n, k), layout)))
    return tuple((first, rows, kernel, kernel.launcher(rows, n)) for first, rows, kernel in parts)


def _host_matmul(A: np.ndarray, B: np.ndarray, out, deterministic: bool = False, precision: str | None = None):
    """NumPy operands of any layout are copied C-contiguous to the GPU: the NN kernel."""
    m, n, k, dtype = check_shapes(A, B)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype != A.dtype):
        raise OperandError(f"out must be a {m}x{n} NumPy array of {dtype}")
    require_device_memory((m * k + k * n + m * n) * A.dtype.itemsize)
    backend = backends.current()
    dC = backend.empty((m, n), A.dtype)
    plan = _Plan((m, n), A.dtype, "NN", _parts(m, n, k, dtype, "NN", deterministic, precision))
    plan.launch(backend.to_device(np.ascontiguousarray(A)), backend.to_device(np.ascontiguousarray(B)), dC)
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
