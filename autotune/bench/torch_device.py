"""The GPU as `mmtune bench --peers` sees it, through PyTorch: operands as CUDA tensors, TF32 off,
kernels timed over CUDA graphs, and the error measures' float64 truth computed on the GPU."""

from __future__ import annotations

from typing import Callable

import numpy as np

from autotune import backends
from autotune.bench.accuracy import DTYPE, Exact, Operands, checked_rows, draw_seed, drawn, exact_of
from autotune.errors import PeersError
from autotune.measure.measurement import device_info, error_bound, reference, time_launches


class TorchDevice:
    """The GPU through PyTorch: CUDA tensors, TF32 off, kernels timed over CUDA graphs."""

    def __init__(self):
        try:
            import torch
        except ImportError as error:
            raise PeersError(f"--peers needs PyTorch with CUDA: {error}") from None
        if backends.name() == "simulator" or not torch.cuda.is_available():
            raise PeersError("--peers needs PyTorch and a CUDA GPU (not the simulator)")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.torch = torch
        self.name = device_info()["device"]
        self.versions = {"torch": torch.__version__}

    def operands(self, m: int, n: int, k: int, seed: int) -> Operands:
        torch = self.torch
        generator = torch.Generator(device="cuda").manual_seed(seed)
        A = torch.randn((m, k), generator=generator, device="cuda")
        B = torch.randn((k, n), generator=generator, device="cuda")
        rows = checked_rows(m, n, k, np.random.default_rng(seed))
        A_rows = A[torch.as_tensor(rows, device=A.device)] if isinstance(rows, np.ndarray) else A
        expected = reference(A_rows.cpu().numpy(), B.cpu().numpy())
        return Operands(A=A, B=B, C=torch.empty((m, n), device="cuda"), rows=rows, expected=expected,
                        bound=error_bound(DTYPE, k))

    def poison(self, C) -> None:
        C.fill_(float("nan"))

    def exact(self, m: int, n: int, k: int, draw: str, seed: int) -> Exact:
        """Operands drawn as `draw` (autotune.bench.accuracy) and their float64 truth, on the GPU."""
        torch = self.torch
        generator = torch.Generator(device="cuda").manual_seed(draw_seed(draw, seed))

        def uniform(shape, low, high):
            return torch.rand(shape, generator=generator, device="cuda") * (high - low) + low

        A, B = (drawn(uniform, torch.exp2, shape, draw).float() for shape in ((m, k), (k, n)))
        rows = checked_rows(m, n, k, np.random.default_rng(seed))
        rows = torch.as_tensor(rows, device="cuda") if isinstance(rows, np.ndarray) else rows
        return exact_of(A, B, torch.empty((m, n), device="cuda"), rows, lambda x: x.double())

    def transposed(self, X):
        """X's values as the transposed view of a C-contiguous tensor (a "T" operand)."""
        return X.T.contiguous().T

    def rows64(self, C, rows):
        """C's `rows` in float64, where C is, after the calls queued before."""
        return C[rows].double()

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def to_host(self, C) -> np.ndarray:
        return C.cpu().numpy()

    def kernel_timer(self, call: Callable[[], None], operands: Operands, calls: int):
        """A graph of `calls` calls if its replay computes the product (a peer launching outside
        torch's current stream leaves the graph empty), else the held-queue loop."""
        torch = self.torch
        try:
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm up off the default stream, as capture asks
                for _ in range(2):
                    call()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    call()
            self.poison(operands.C)
            graph.replay()
            self.sync()
            if operands.error(self.to_host(operands.C)) <= operands.bound:
                return _GraphTimer(torch, graph, calls)
        except Exception:  # noqa: BLE001 - a peer that cannot be captured is timed the other way
            pass
        self.sync()
        return _LoopTimer(call)


class _GraphTimer:
    method = "graph"

    def __init__(self, torch, graph, calls: int):
        self.torch, self.graph, self.calls = torch, graph, calls

    def sample(self) -> float:
        """Seconds per call: CUDA events around one replay of the graph."""
        start, stop = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        self.graph.replay()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3 / self.calls


class _LoopTimer:
    method = "loop"

    def __init__(self, call: Callable[[], None]):
        self.call = call

    def sample(self) -> float:
        """Seconds per call: the median of event pairs around calls queued behind a hold kernel."""
        return time_launches(self.call, warmup=1, repeat=5).median_ms * 1e-3
