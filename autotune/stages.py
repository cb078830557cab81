"""The pipeline's stages, in order. A module imports modules of its own stage and of earlier ones,
never of a later one, and no imports go round in a circle (tests/test_imports.py reads every
import, inside functions too, to hold both).

Each stage is a subpackage of autotune (kernels is the top-level package of the families; core
is the few modules every stage shares; api is the package's own face, `from autotune import
matmul, lookup, clear`).
"""

from __future__ import annotations

STAGES = (
    ("kernels", "the kernel families: parameterized Numba CUDA kernels and their rules"),
    ("core", "what every stage shares: errors, memos, this list"),
    ("backends", "the device seam: Numba's CUDA target or its simulator, and cubins launched through the driver"),
    ("space", "which configs exist and fit a device, the shape rules, the Optuna encoding, precisions"),
    ("store", "what is kept on disk: the cache of tuned rows, the shipped records, the kernel store"),
    ("measure", "verify a kernel against float64, then time it, in a process of its own"),
    ("select", "lookup: which config serves a product, from rows, measured tables and the cost model"),
    ("tune", "the Optuna search: studies, workers, samplers, finalists, storage, fleets"),
    ("call", "matmul: operands, plans launched on the caller's stream, and the Numba path"),
    ("torch", "PyTorch programs: the mmtune::matmul op, its autograd, Linear, patch"),
    ("bench", "timings next to cuBLAS, Triton and CuPy: bench, peers, sweep, plots"),
    ("cli", "the mmtune command"),
    ("api", "the package itself: matmul, lookup, clear"),
)
CORE = ("autotune.errors", "autotune.memos", "autotune.stages")
API = ("autotune", "autotune.__main__")


def stage_of(module: str) -> str:
    """The stage of a module of kernels or autotune, by its dotted name."""
    if module == "kernels" or module.startswith("kernels."):
        return "kernels"
    if module in CORE:
        return "core"
    if module in API:
        return "api"
    parts = module.split(".")
    if parts[0] == "autotune" and parts[1] in dict(STAGES):
        return parts[1]
    raise ValueError(f"{module} belongs to no stage of autotune.stages.STAGES")
