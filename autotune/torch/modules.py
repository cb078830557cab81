"""`Linear`, a drop-in for `nn.Linear` computed by mmtune, and `patch`/`unpatch`, which swap a
model's `nn.Linear` layers in place (their parameters, hooks and optimizer state untouched)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional

from autotune.torch.ops import DTYPES, disabled, has_kernels, served


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           precision: str | None = None) -> torch.Tensor:
    """`torch.nn.functional.linear` through mmtune: x @ weight.T + bias, the weight read
    transposed in place (layout NT). Under autocast, where mmtune has no kernel for the operands,
    and for operands F.linear refuses (which it then says why), it is F.linear itself."""
    if (disabled() or x.dim() == 0 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]
            or bias is not None and bias.shape != (weight.shape[0],) or not has_kernels(x, weight, bias)
            or torch.is_autocast_enabled(x.device.type)):
        return functional.linear(x, weight, bias)
    if x.dim() == 1:
        return served(x.unsqueeze(0), weight.t(), bias, precision or "").squeeze(0)
    return served(x, weight.t(), bias, precision or "")


class Linear(nn.Linear):
    """nn.Linear with mmtune's kernels: the same parameters, initialisation and state_dict keys,
    any leading batch dimensions. `precision` ("ieee" or "tf32x3"; default from
    torch.get_float32_matmul_precision()) says how float32 is computed."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 precision: str | None = None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.precision = precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.precision)

    def extra_repr(self) -> str:
        shown = f", precision={self.precision!r}" if self.precision else ""
        return super().extra_repr() + shown


@dataclass
class Patched:
    """What `patch` did: the layers it swapped, and those it left (with why), by module name."""

    swapped: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"mmtune: {len(self.swapped)} nn.Linear layer(s) swapped, {len(self.kept)} left as they are"]
        lines += [f"  kept {name or '(the model)'}: {why}" for name, why in self.kept.items()]
        return "\n".join(lines)


def patch(model: nn.Module, precision: str | None = None) -> Patched:
    """Make every float32/float64 `nn.Linear` of `model` (the model itself included) an mmtune
    `Linear`, in place: the same module objects, parameters and hooks, so an optimizer built
    before still trains them. Subclasses of nn.Linear and other dtypes stay as they are.
    With MMTUNE_DISABLE=1 nothing is swapped. Returns what was swapped and what was not."""
    done = Patched()
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or type(module) is Linear:
            continue
        why = _unpatchable(module)
        if why:
            done.kept[name] = why
            continue
        module.__class__ = Linear
        module.precision = precision
        done.swapped.append(name)
    return done


def _unpatchable(module: nn.Linear) -> str | None:
    if disabled():
        return "MMTUNE_DISABLE is set"
    if type(module) is not nn.Linear:
        return f"a {type(module).__name__}, not an nn.Linear"
    if module.weight.dtype not in DTYPES:
        return f"its weight is {module.weight.dtype}"
    return None


def unpatch(model: nn.Module) -> list[str]:
    """Undo `patch`: every mmtune `Linear` of `model` becomes a plain nn.Linear again, in place.
    Returns the names of the layers it turned back."""
    undone = []
    for name, module in model.named_modules():
        if type(module) is Linear:
            module.__class__ = nn.Linear
            del module.precision
            undone.append(name)
    return undone
