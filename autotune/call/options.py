"""What a matmul call asks for besides its operands, shared by the driver path (autotune.call.front)
and Numba's (autotune.call.dispatcher)."""

from __future__ import annotations

import os
from dataclasses import dataclass

WAIT_ENV = "MMTUNE_WAIT"  # "1": every first call waits for its chosen kernel to build


@dataclass(frozen=True)
class CallOptions:
    """A call's options that decide its plan, besides its operands' shapes, strides and dtypes."""

    stream: object = None
    deterministic: bool = False
    precision: str | None = None
    wait: bool = False
    #: whether a bias is added to C's rows (kernels.Kernel.with_bias)
    bias: bool = False

    @property
    def waits(self) -> bool:
        """Whether a missing kernel is built before the call (no stand-in, no switching)."""
        return self.wait or self.deterministic or os.environ.get(WAIT_ENV, "") not in ("", "0")
