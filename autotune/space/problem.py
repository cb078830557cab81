"""A problem: the product a user asks for, as every stage names it (a cache row's key, a tune's
target, a lookup's question, a recorded call)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """C (M x N) = A (M x K) @ B (K x N) of `dtype` on the GPU model `device`, with operands in
    `layout` (kernels.rules.LAYOUTS), computed in `precision` (autotune.space.precision)."""

    device: str
    dtype: str
    m: int
    n: int
    k: int
    layout: str = "NN"
    precision: str = "ieee"

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    def __str__(self) -> str:
        layout = "" if self.layout == "NN" else f" {self.layout}"
        return f"{self.m}x{self.n}x{self.k}{layout} {self.dtype} {self.precision} on {self.device}"
