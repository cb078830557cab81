"""Train an MLP on mmtune's kernels: patch the model, record the products it calls, then tune them.

    python docs/examples/train_mlp.py --record products.json          # on a GPU
    mmtune tune --recorded products.json --top 12                     # tune what it called
    python docs/examples/train_mlp.py                                 # again: served by the tuned rows

On a machine with no GPU, NUMBA_ENABLE_CUDASIM=1 runs it on the CPU through the CUDA simulator
(the tests do, with --width 16 --batch 8 --steps 3); its timings mean nothing there.
"""

import argparse
from contextlib import nullcontext

import torch
from torch import nn

import autotune
import autotune.torch as mt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--record", metavar="FILE", help="log the products the model calls to FILE")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 10)).to(device)
    print(mt.patch(model))  # every float32 nn.Linear now runs mmtune's kernels, forward and backward
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(args.batch, args.width, device=device)
    target = torch.randn(args.batch, 10, device=device)

    with autotune.record(args.record) if args.record else nullcontext():
        for step in range(args.steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), target)
            loss.backward()
            optimizer.step()
            print(f"step {step}: loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
