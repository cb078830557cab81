"""mmtune inside PyTorch programs (needs torch: `pip install mmtune[torch]`).

    import autotune.torch as mt
    mt.patch(model)              # every float32/float64 nn.Linear computed by mmtune
    y = mt.matmul(A, B, bias)    # the registered op mmtune::matmul, differentiable
    layer = mt.Linear(4096, 4096)

MMTUNE_DISABLE=1 turns all of it back into torch's own matmul; `unpatch(model)` undoes `patch`.
"""

from autotune.torch.modules import Linear, Patched, linear, patch, unpatch
from autotune.torch.ops import disabled, matmul

__all__ = ["Linear", "Patched", "disabled", "linear", "matmul", "patch", "unpatch"]
