"""A training step of an MLP on nn.Linear next to the same model patched to mmtune
(autotune.torch.patch), in one process on one GPU: forward + backward (dX and every dW, db),
kernel time by CUDA events, rounds alternating between the two models.

    python studies/mlp.py --out OUT.json [--width 4096] [--layers 4] [--batch 64 2048]
        [--precision ieee tf32x3] [--compile MODE]

Kernels are compiled before they serve (MMTUNE_WAIT=1, unless set otherwise): a stand-in kernel
serving while the chosen one builds in the background would be timed instead of the steady state.
For the same reason the first step waits for the C++ eager path (autotune.torch.native) to load;
MMTUNE_NATIVE=0 times the Python path instead.

With --compile, both models run under torch.compile(mode=MODE) ("reduce-overhead": CUDA graphs,
so the host's time a product no longer holds a small batch back).

Torch runs with TF32 off (its float32 is IEEE), as a user comparing exact float32 would; mmtune's
precision is the one named. Each row has both models' milliseconds per step, the ratio (nn.Linear's
over mmtune's: above 1, mmtune is faster), the first step's loss of each, and the kernels mmtune served.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch import nn

os.environ.setdefault("MMTUNE_WAIT", "1")  # the steady state, not the stand-ins of a first call

import autotune.torch as mt  # noqa: E402

ROUNDS = 7  # alternating between the two models


def model(width: int, layers: int) -> nn.Sequential:
    parts = []
    for _ in range(layers):
        parts += [nn.Linear(width, width, device="cuda"), nn.ReLU()]
    return nn.Sequential(*parts[:-1])


def step(net: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    net.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(net(x), target)
    loss.backward()
    return loss


def milliseconds(net: nn.Module, x: torch.Tensor, target: torch.Tensor, steps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(net, x, target)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def kernel_table(net: nn.Module, x: torch.Tensor, target: torch.Tensor) -> list[dict]:
    """One step's GPU kernels under the profiler: name, calls and total microseconds, slowest first."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        step(net, x, target)
        torch.cuda.synchronize()
    rows = [{"name": event.key[:90], "calls": event.count, "us": round(event.device_time_total, 1)}
            for event in profile.key_averages() if event.device_time_total > 0]
    return sorted(rows, key=lambda row: -row["us"])


def compare(width: int, layers: int, batch: int, precision: str, mode: str | None = None) -> dict:
    torch.manual_seed(0)
    theirs = model(width, layers)
    ours = model(width, layers)
    ours.load_state_dict(theirs.state_dict())
    mt.patch(ours, precision=precision)
    if mode:
        theirs, ours = torch.compile(theirs, mode=mode), torch.compile(ours, mode=mode)
    x = torch.randn(batch, width, device="cuda")
    target = torch.randn(batch, width, device="cuda")
    began = time.perf_counter()
    first = (step(theirs, x, target).item(), step(ours, x, target).item())  # ours compiles its kernels here
    warm_s = time.perf_counter() - began
    steps = max(3, min(50, int(2e12 / (6 * batch * width * width * layers))))
    times = {"torch": [], "mmtune": []}
    for _ in range(ROUNDS):
        times["torch"].append(milliseconds(theirs, x, target, steps))
        times["mmtune"].append(milliseconds(ours, x, target, steps))
    torch_ms, mmtune_ms = statistics.median(times["torch"]), statistics.median(times["mmtune"])
    kernels = {name: kernel_table(net, x, target) for name, net in (("torch", theirs), ("mmtune", ours))}
    return {"kernels": kernels, "compile": mode, "width": width, "layers": layers, "batch": batch, "precision": precision, "steps": steps,
            "torch_ms": torch_ms, "mmtune_ms": mmtune_ms, "speedup": torch_ms / mmtune_ms,
            "first_loss_torch": first[0], "first_loss_mmtune": first[1], "first_step_s": warm_s,
            "gpu": torch.cuda.get_device_name()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 2048])
    parser.add_argument("--precision", nargs="+", default=["ieee", "tf32x3"])
    parser.add_argument("--compile", metavar="MODE", help="torch.compile both models in this mode")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for precision in args.precision:
        for batch in args.batch:
            row = compare(args.width, args.layers, batch, precision, args.compile)
            rows.append(row)
            print(f"{row['gpu']} batch {batch} {precision}: nn.Linear {row['torch_ms']:.3f} ms, mmtune "
                  f"{row['mmtune_ms']:.3f} ms, {row['speedup']:.3f}x; first losses {row['first_loss_torch']:.6g} "
                  f"{row['first_loss_mmtune']:.6g}; first step {row['first_step_s']:.1f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
