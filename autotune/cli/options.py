"""The options several commands share, declared once (as sqlite-utils shares its option
decorators), with the parsers that read them: option values are taken in any case and come out
in their canonical spelling, and a bad one is one line naming what is known.

Nothing here imports numba at import time: --simulate must choose the simulator first (it is
eager, so its callback runs before any other option is parsed).
"""

from __future__ import annotations

import os
from typing import Annotated, Callable, Optional

import typer

from autotune.errors import UserError
from autotune.space.precision import PRECISIONS
from autotune.store.rows import Row
from kernels import DTYPE_NAMES, LAYOUTS
from kernels.rules import Arch


def _names(what: str, known: tuple[str, ...], spelling: Callable[[str], str] = str.lower) -> Callable[[str], str]:
    """A parser of one of `known` names in any case, giving it in `spelling` (the known names' case)."""

    def parse(text: str) -> str:
        name = spelling(str(text))
        if name not in known:
            raise UserError(f"unknown {what} {text!r}; known: {', '.join(known)}")
        return name

    return parse


def dtype_name(text: str) -> str:
    """An element type in any case; the message is the one TuneRequest.check gives."""
    name = str(text).lower()
    if name not in DTYPE_NAMES:
        raise UserError(f"unsupported dtype {text!r}; supported: {', '.join(DTYPE_NAMES)}")
    return name


def dimension(option: str) -> Callable[[str], int]:
    """A parser of a product's dimension: a whole number, 0 or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise UserError(f"{option} takes a whole number, 0 or more; got {text!r}")
        return value

    return parse


def whole_number(option: str, least: int = 0) -> Callable[[str], int]:
    """A parser of a whole number of at least `least`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise UserError(f"{option} takes a whole number, {least} or more; got {text!r}")
        return value

    return parse


def int_list(option: str, what: str = "positive integers like 8,16,32", least: int = 1) -> Callable[[str], list[int]]:
    """A parser of a comma-separated list of ints of at least `least`."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(part) for part in str(text).split(",")]
        except ValueError:
            values = []
        if not values or min(values) < least:
            raise UserError(f"{option} takes {what}; got {text!r}")
        return values

    return parse


def use_simulator() -> None:
    """Numba's CUDA simulator, which must be chosen before numba is imported."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from numba import config

    if not config.ENABLE_CUDASIM:
        raise UserError("--simulate came after numba was loaded without NUMBA_ENABLE_CUDASIM=1")


def choose_device(simulate: bool) -> bool:
    """--simulate: the simulator; without it, a GPU, refused in one line where there is none."""
    if simulate:
        use_simulator()
    else:
        from autotune.backends import require_gpu

        require_gpu()
    return simulate


def simulate_if_asked(simulate: bool) -> bool:
    """--simulate where a GPU is needed only for part of the command (warm --retime)."""
    if simulate:
        use_simulator()
    return simulate


def shape(m: Optional[int], n: Optional[int], k: Optional[int]) -> Optional[tuple[int, int, int]]:
    """--m, --n and --k as a shape filter: all three, or none."""
    given = [x is not None for x in (m, n, k)]
    if any(given) and not all(given):
        raise UserError("give all of --m, --n and --k, or none")
    return (m, n, k) if all(given) else None


def _one_of(names: tuple[str, ...]) -> str:
    return "[" + "|".join(names) + "]"


DTYPE_HELP = "Element type: float32, float64 or int32."
PRECISION_HELP = ("How exactly float32 is computed: ieee (the CUDA cores, as cuBLAS's SGEMM; the default) or "
                  "tf32x3 (also three TF32 products on the tensor cores, where faster; operands held to "
                  "2**-147, or 2**-137 on Hopper's warpgroup kernels). float64 and int32 are IEEE either way.")
LAYOUT_HELP = ("How A and B are stored: NN, NT, TN or TT; T is the transpose of a C-contiguous array "
               "(A.T, B.T views).")

M = Annotated[int, typer.Option("--m", parser=dimension("--m"), metavar="M", help="Rows of A and C.")]
N = Annotated[int, typer.Option("--n", parser=dimension("--n"), metavar="N", help="Columns of B and C.")]
K = Annotated[int, typer.Option("--k", parser=dimension("--k"), metavar="K", help="Columns of A, rows of B.")]
OnlyM = Annotated[Optional[int], typer.Option("--m", parser=dimension("--m"), metavar="M",
                                              help="Only this shape (with --n and --k).")]
OnlyN = Annotated[Optional[int], typer.Option("--n", parser=dimension("--n"), metavar="N", help="See --m.")]
OnlyK = Annotated[Optional[int], typer.Option("--k", parser=dimension("--k"), metavar="K", help="See --m.")]

Dtype = Annotated[str, typer.Option("--dtype", parser=dtype_name, metavar=_one_of(DTYPE_NAMES), help=DTYPE_HELP)]
OnlyDtype = Annotated[Optional[str], typer.Option("--dtype", parser=dtype_name, metavar=_one_of(DTYPE_NAMES),
                                                  help="Only rows of this element type: float32, float64 or int32.")]
Layout = Annotated[str, typer.Option("--layout", parser=_names("layout", LAYOUTS, str.upper),
                                     metavar=_one_of(LAYOUTS), help=LAYOUT_HELP)]
OnlyLayout = Annotated[Optional[str], typer.Option("--layout", parser=_names("layout", LAYOUTS, str.upper),
                                                   metavar=_one_of(LAYOUTS),
                                                   help="Only rows tuned for this layout (NN, NT, TN or TT).")]
Precision = Annotated[Optional[str], typer.Option("--precision", parser=_names("precision", PRECISIONS),
                                                  metavar=_one_of(PRECISIONS), help=PRECISION_HELP)]
OnlyPrecision = Annotated[Optional[str], typer.Option("--precision", parser=_names("precision", PRECISIONS),
                                                      metavar=_one_of(PRECISIONS),
                                                      help="Only rows of kernels of this precision: ieee or tf32x3.")]
Simulate = Annotated[bool, typer.Option(
    "--simulate/--no-simulate", is_eager=True, callback=choose_device, metavar="",
    help="Run on the CPU under Numba's CUDA simulator instead of a GPU (tiny shapes; timings mean nothing).")]
Device = Annotated[Optional[str], typer.Option("--device", metavar="GPU",
                                               help="Only rows of this GPU model (as `mmtune best` names it).")]


def gflops(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def layout_suffix(layout: Optional[str]) -> str:
    """' TN' after a shape tuned for another layout than NN; nothing for NN."""
    return "" if layout in (None, "NN") else f" {layout}"


def row_name(row: Row) -> str:
    return f"{row.device} {row.dtype} {row.m}x{row.n}x{row.k}{layout_suffix(row.layout)} {row.family}"


def parse_arch(text: str) -> Arch:
    """A GPU architecture (a compute capability), as kernels.rules.Arch reads one."""
    try:
        return Arch.of(text)
    except ValueError:
        raise UserError(f"architecture must look like sm_90 or 9.0; got {text!r}") from None
