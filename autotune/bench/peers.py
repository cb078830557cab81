"""mmtune bench --peers: the path users call, on PyTorch tensors, next to what they would call
instead, in one process.

Peers, each called the way its users call it, shape by shape on the same tensors: mmtune's
`matmul`, `torch.matmul` (cuBLAS, TF32 off), two autotuned Triton matmuls where Triton imports
(autotune/bench/triton_peer.py: IEEE FP32, and three TF32 products, `input_precision="tf32x3"`),
and `cupy.matmul` where CuPy imports. A peer that does not import is reported absent; one that
fails or computes a wrong product at a shape is reported there and not timed. Per shape and peer:

  first_call_s   the first call at the shape, with whatever it compiles, autotunes or loads
  call_gflops    back-to-back calls on the wall clock with a final sync: the host included
  kernel_gflops  CUDA events around a CUDA graph of calls where the graph's replay computes the
                 product (torch.cuda.graph), else around calls queued behind a hold kernel
                 (measure.time_launches): the GPU alone
  error_<measure>_<draw>  autotune.bench.accuracy's two error measures against float64, for
                 operands drawn two ways, each the median of 5 draws

Peers take turns within a shape, round after round, so clocks that drift move them all alike.
"""

from __future__ import annotations

import math
import random
import statistics
import time
import zlib
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from autotune.bench.accuracy import DTYPE, ERROR_KEYS, in_layout, peer_errors
from autotune.bench.report import COMPARED, FLOOR, LABELS, PEER_NAMES, RATIOS, source_commit, write
from autotune.measure.measurement import versions
from kernels.rules import check_layout

CATEGORIES = ("mid", "skinny", "odd", "large")


#: the per-call overhead (call time minus kernel time) is reported at this shape
OVERHEAD_SHAPE = (256, 256, 256)


ROUNDS = 5  # timed samples of each kind per peer and shape


CALL_SAMPLE_SECONDS = 5e-3  # back-to-back calls per call sample: about this long


GRAPH_SAMPLE_SECONDS = 2e-3  # calls captured in one graph: about this long


MAX_CALLS = 1000


MAX_GRAPH_CALLS = 500


SEED = 19


SIZE_RANGE = (16, 8192)


def category(m: int, n: int, k: int) -> str | None:
    """Issue 19's categories, by rule, first match: skinny if min(M, N) <= 64; odd if M, N or K
    is not a multiple of 16; large if M*N*K >= 2048^3; mid if M*N*K >= 700^3; else none."""
    if min(m, n) <= 64:
        return "skinny"
    if m % 16 or n % 16 or k % 16:
        return "odd"
    if m * n * k >= 2048**3:
        return "large"
    if m * n * k >= 700**3:
        return "mid"
    return None


def seeded_shapes(seed: int = SEED, count: int = 20) -> list[tuple[int, int, int]]:
    """`count` distinct shapes, the categories taking turns, each size drawn log-uniform in
    SIZE_RANGE and the shape redrawn until the rule puts it in its category. Mid and large sizes
    are rounded to multiples of 16, since nearly every free draw would be odd. Python's
    `random.random` keeps its sequence across versions, so the committed `seeded` suite can be
    checked against this."""
    rng = random.Random(seed)
    shapes: list[tuple[int, int, int]] = []
    for index in range(count):
        target = CATEGORIES[index % len(CATEGORIES)]
        multiple = 16 if target in ("mid", "large") else 1
        while True:
            shape = tuple(_log_uniform_size(rng, multiple) for _ in range(3))
            if category(*shape) == target and shape not in shapes:
                shapes.append(shape)
                break
    return shapes


def _log_uniform_size(rng: random.Random, multiple: int) -> int:
    low, high = SIZE_RANGE
    size = round(low * (high / low) ** rng.random() / multiple) * multiple
    return min(high, max(low, size))


def summary(samples: list[float]) -> tuple[float, float]:
    """(median, spread): spread is the interquartile range over the median, as measure.Timing's."""
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    return float(median), float((q75 - q25) / median) if median else 0.0


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def geomeans(rows: list[dict]) -> dict:
    """Per category, and over all rows: the geometric means of mmtune's GFLOPS over each COMPARED
    peer's (kernel, and call), each over the shapes where both were measured."""
    out = {}
    for name in (*CATEGORIES, "all"):
        group = [r for r in rows if name == "all" or r["category"] == name]
        out[name] = {"shapes": len(group), **{key: geomean([r[key] for r in group if r.get(key)]) for key in RATIOS}}
    return out


@dataclass(frozen=True)
class Peer:
    name: str  # one of PEER_NAMES
    bind: Callable  # bind(A, B, C) -> a call computing C = A @ B as the peer's users would


@dataclass(frozen=True)
class Asked:
    """What the bench asks of mmtune: its kernels' precision (autotune.space.precision; None: the
    default), and how every peer's A and B are stored (kernels.LAYOUTS: "NT" is x @ W.T, as
    nn.Linear computes)."""

    precision: str | None = None
    layout: str = "NN"


@dataclass(frozen=True)
class Lineup:
    """The device the peers are timed on (its operands, timers and name), the peers, and why each
    other one is absent."""

    device: object  # TorchDevice, or a stand-in with its methods
    peers: list[Peer]
    absent: dict[str, str] = field(default_factory=dict)


def torch_peers(precision: str | None = None) -> Lineup:
    """The GPU through PyTorch and the peers that import here, and why each other one is absent;
    mmtune's asks for `precision`."""
    from autotune.bench.torch_device import TorchDevice

    device = TorchDevice()
    torch = device.torch
    from autotune.call.front import matmul  # the path users call: driver plans on torch's stream

    peers = [
        Peer("mmtune", lambda A, B, C: partial(matmul, A, B, out=C, precision=precision, wait=True)),
        Peer("cublas", lambda A, B, C: partial(torch.matmul, A, B, out=C)),
    ]
    absent = {}
    try:
        from autotune.bench import triton_peer
    except Exception as error:  # noqa: BLE001 - missing, too old or broken: absent all the same
        absent["triton"] = absent["triton_tf32x3"] = f"Triton does not import: {error}"
    else:
        peers.append(Peer("triton", lambda A, B, C: partial(triton_peer.matmul, A, B, C)))
        if triton_peer.has_input_precision():
            peers.append(Peer("triton_tf32x3", lambda A, B, C: partial(triton_peer.matmul_tf32x3, A, B, C)))
        else:
            absent["triton_tf32x3"] = f"Triton {triton_peer.triton.__version__}'s tl.dot has no input_precision"
        device.versions["triton"] = triton_peer.triton.__version__
    try:
        import cupy
    except Exception as error:  # noqa: BLE001
        absent["cupy"] = f"CuPy does not import: {error}"
    else:
        def bind_cupy(A, B, C):
            a, b, c = (cupy.asarray(x) for x in (A, B, C))  # once: a CuPy user holds CuPy arrays
            return partial(cupy.matmul, a, b, out=c)

        peers.append(Peer("cupy", bind_cupy))
        device.versions["cupy"] = cupy.__version__
    return Lineup(device, peers, absent)


def bench_peers(
    shapes: list[tuple[int, int, int]], out_dir: Path | None = None, rounds: int = ROUNDS,
    progress: Callable[[str], None] | None = None, lineup: Lineup | None = None, asked: Asked = Asked(),
) -> dict:
    """Time every peer at OVERHEAD_SHAPE (for the call overhead), then at every shape, as `asked`;
    with `out_dir`, write peers.json, peers.md and peers.png there. `lineup` defaults to the GPU
    through PyTorch and the peers that import (torch_peers)."""
    check_layout(asked.layout)
    lineup = lineup or torch_peers(asked.precision)
    device, peers, absent = lineup.device, lineup.peers, dict(lineup.absent)
    measured = {}
    # OVERHEAD_SHAPE first: its first calls, not the suite's, carry the libraries' one-time setup
    for shape in dict.fromkeys([OVERHEAD_SHAPE, *shapes]):
        measured[shape] = measure_shape(shape, device, peers, rounds, asked)
        if progress:
            progress(_progress_line(measured[shape]))
    rows = [measured[tuple(shape)] for shape in shapes]
    overhead_row = measured[OVERHEAD_SHAPE]
    overhead = {}
    for name in dict.fromkeys(("mmtune", *COMPARED, *(peer.name for peer in peers))):
        call_us, kernel_us = overhead_row.get(f"{name}_call_us"), overhead_row.get(f"{name}_kernel_us")
        overhead[name] = call_us - kernel_us if call_us is not None and kernel_us is not None else None
    ratios = [(r["vs_cublas"], f"{r['m']}x{r['n']}x{r['k']}") for r in rows if r["vs_cublas"]]
    result = {
        "device": device.name, "dtype": DTYPE, "precision": asked.precision, "layout": asked.layout,
        "date": time.strftime("%Y-%m-%d"),
        "commit": source_commit(),
        **versions(), **device.versions,
        "peers": [p.name for p in peers], "absent": absent,
        "call_overhead_us": overhead,
        "overhead_shape": "x".join(map(str, OVERHEAD_SHAPE)),
        "overhead_row": overhead_row,
        "geomeans": geomeans(rows),
        "worst_vs_cublas": {"ratio": min(ratios)[0], "shape": min(ratios)[1]} if ratios else None,
        "below_floor": [shape for ratio, shape in ratios if ratio < FLOOR],
        "rows": rows,
    }
    if out_dir is not None:
        write(result, Path(out_dir))
    return result


def measure_shape(shape: tuple[int, int, int], device, peers: list[Peer], rounds: int = ROUNDS,
                  asked: Asked = Asked()) -> dict:
    """One shape, as `asked`: every peer's first call (verified), then `rounds` rounds in which
    each peer in turn takes one call sample and one kernel sample."""
    from autotune.select.lookup import lookup

    m, n, k = shape
    operands = device.operands(m, n, k, zlib.crc32(f"{m}x{n}x{k}".encode()))
    A, B = in_layout(operands.A, operands.B, asked.layout, device.transposed)
    operands = replace(operands, A=A, B=B)
    choice = lookup(m, n, k, DTYPE, precision=asked.precision, layout=asked.layout)
    row = {"m": m, "n": n, "k": k, "category": category(m, n, k), "source": choice.source, "family": choice.family,
           "precision": choice.precision}
    for name in PEER_NAMES:
        for key in ("call_gflops", "kernel_gflops", "first_call_s", "call_us", "kernel_us", "error", "kernel_timing",
                    *ERROR_KEYS):
            row[f"{name}_{key}"] = None
    failures, ready = {}, {}
    for peer in peers:
        try:
            call = peer.bind(operands.A, operands.B, operands.C)
            device.poison(operands.C)
            device.sync()
            started = time.perf_counter()
            call()
            device.sync()
            row[f"{peer.name}_first_call_s"] = time.perf_counter() - started
            error = operands.error(device.to_host(operands.C))
        except Exception as error:  # noqa: BLE001 - a peer failing at a shape is a result to report
            failures[peer.name] = f"{type(error).__name__}: {error}".splitlines()[0]
            continue
        row[f"{peer.name}_error"] = error if math.isfinite(error) else None
        if error <= operands.bound:
            ready[peer.name] = call
        else:
            failures[peer.name] = f"wrong product: relative error {error:.3g} > bound {operands.bound:.3g}"
    once = {name: _wall_per_call(call, 2, device.sync) for name, call in ready.items()}
    timers = {
        name: device.kernel_timer(call, operands, _calls(GRAPH_SAMPLE_SECONDS, once[name], MAX_GRAPH_CALLS))
        for name, call in ready.items()
    }
    call_samples = {name: [] for name in ready}
    kernel_samples = {name: [] for name in ready}
    for _ in range(rounds):
        for name, call in ready.items():
            call_samples[name].append(_wall_per_call(call, _calls(CALL_SAMPLE_SECONDS, once[name], MAX_CALLS), device.sync))
            kernel_samples[name].append(timers[name].sample())
    flops = 2.0 * m * n * k
    for name in ready:
        (call_s, call_spread), (kernel_s, kernel_spread) = summary(call_samples[name]), summary(kernel_samples[name])
        row.update({
            f"{name}_call_gflops": flops / call_s / 1e9, f"{name}_kernel_gflops": flops / kernel_s / 1e9,
            f"{name}_call_us": call_s * 1e6, f"{name}_kernel_us": kernel_s * 1e6,
            f"{name}_call_spread": call_spread, f"{name}_kernel_spread": kernel_spread,
            f"{name}_kernel_timing": timers[name].method,
        })
    for peer in COMPARED:
        row[f"vs_{peer}"] = _ratio(row["mmtune_kernel_gflops"], row[f"{peer}_kernel_gflops"])
        row[f"call_vs_{peer}"] = _ratio(row["mmtune_call_gflops"], row[f"{peer}_call_gflops"])
    ran = [peer for peer in peers if row[f"{peer.name}_first_call_s"] is not None]  # wrong products too
    row.update(peer_errors(shape, device, {peer.name: peer.bind for peer in ran}, asked.layout))
    row["failures"] = failures
    return row


def _wall_per_call(call: Callable[[], None], calls: int, sync: Callable[[], None]) -> float:
    """Seconds per call of `calls` back-to-back calls, from an idle GPU to a final sync."""
    sync()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - started) / calls


def _calls(seconds: float, per_call: float, most: int) -> int:
    return max(1, min(most, math.ceil(seconds / max(per_call, 1e-9))))


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours and theirs else None


def _progress_line(row: dict) -> str:
    cells = [f"{LABELS[name]} {row[f'{name}_kernel_gflops']:,.0f}" for name in PEER_NAMES if row[f"{name}_kernel_gflops"]]
    failed = [f"{LABELS[name]} failed ({reason})" for name, reason in row["failures"].items()]
    return f"{row['m']}x{row['n']}x{row['k']}: kernel GFLOPS " + ", ".join(cells + failed)
