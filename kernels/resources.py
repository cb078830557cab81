"""Compile a kernel for a GPU architecture without a GPU, and read what it uses.

numba-cuda turns the kernel into LTO-IR with NVVM (from the nvidia-nvvm wheel); nvJitLink (from
the nvidia-nvjitlink wheel) optimizes it at link time, assembles it for the target and reports
registers, spills, stack and shared memory: the route `cuda.jit` takes by default, so what is
reported is what runs. `ptx` gives the kernel's PTX before link-time optimization, for reading.
Works on a machine with no GPU and no driver, but not under the CUDA simulator.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from types import SimpleNamespace

from .base import DeviceLimits, Kernel
from .rules import Arch

HOPPER = (9, 0)


@dataclass(frozen=True)
class Resources:
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack_bytes: int
    shared_bytes: int  # the kernel's own static shared memory
    local_bytes: int  # ptxas reports it only for relocatable code; else 0
    cc: tuple[int, int]

    def problem(self, threads: int, limits: DeviceLimits) -> str | None:
        """Why a block of `threads` with these resources cannot launch, or None. (Spills run, slowly.)"""
        if self.registers * threads > limits.max_registers_per_block:
            return f"{self.registers} registers x {threads} threads > {limits.max_registers_per_block}"
        if self.shared_bytes > limits.max_shared_per_block:
            return f"{self.shared_bytes} bytes of shared memory > {limits.max_shared_per_block}"
        return None

    def as_dict(self) -> dict:
        return asdict(self)


def require_compiler() -> None:
    from numba import config

    if config.ENABLE_CUDASIM:
        raise RuntimeError("compiling to PTX needs numba-cuda without NUMBA_ENABLE_CUDASIM")


def ptx(kernel: Kernel, cc: tuple[int, int] = HOPPER) -> str:
    from numba import cuda

    require_compiler()
    with _device_functions_target(cc):
        text, _ = cuda.compile_ptx(
            kernel.py_func, kernel.signature, cc=cc, launch_bounds=kernel.launch_bounds
        )
    return text


@contextmanager
def _device_functions_target(cc: tuple[int, int]):
    """numba-cuda compiles the device functions a kernel calls for the *current* device's compute
    capability, which needs a driver. compile_ptx already names the target; give it to them too."""
    from numba.cuda import dispatcher

    current = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = current


def ltoir(kernel: Kernel, cc: tuple[int, int] = HOPPER) -> bytes:
    """NVVM's LTO-IR of `kernel`: what `cuda.jit` links by default wherever nvJitLink is installed
    (lto=True), so the binary `Kernel.compile` runs and the one `link` makes are the same."""
    from numba import cuda

    require_compiler()
    with _device_functions_target(cc):
        code, _ = cuda.compile(kernel.py_func, kernel.signature, device=False, abi="numba", cc=cc,
                               launch_bounds=kernel.launch_bounds, output="ltoir")
    return bytes(code)


def compile_report(kernel: Kernel, cc: tuple[int, int] = HOPPER) -> Resources:
    """Compile `kernel` for compute capability `cc` as it runs (link-time optimized) and return the
    assembler's resource report."""
    _, log = link(ltoir(kernel, cc), cc, kernel.family)
    return parse_report(log, cc)


def link(code: bytes, cc: tuple, name: str, output: str = "cubin") -> tuple[bytes, str]:
    """Link-time optimize LTO-IR with nvJitLink and assemble it for `cc`: (the cubin, or with
    output="ptx" the optimized PTX; the assembler's -v log). Without LTO, ptxas would compile the
    kernel as relocatable code that calls its 64-bit division helpers instead of inlining them:
    more registers, fewer blocks per SM, and a slower kernel than the one trials timed
    (docs/performance.md, step 21). nvJitLink's own cache is off: on a machine with a driver it
    serves code it has linked before without running the assembler, whose report (registers,
    spills) would then be missing."""
    from cuda.bindings import nvjitlink

    options = [f"-arch={Arch.of(cc).sm}", "-lto", "-verbose", "-no-cache"] + (["-ptx"] if output == "ptx" else [])
    handle = nvjitlink.create(len(options), options)
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, code, len(code), name)
        try:
            nvjitlink.complete(handle)
        finally:
            log = _info_log(handle)
        if output == "ptx":
            size, fetch = nvjitlink.get_linked_ptx_size(handle), nvjitlink.get_linked_ptx
        else:
            size, fetch = nvjitlink.get_linked_cubin_size(handle), nvjitlink.get_linked_cubin
        if size == 0:  # pragma: no cover
            raise RuntimeError(f"nvJitLink produced no code:\n{log}")
        result = bytearray(size)
        fetch(handle, result)
    except nvjitlink.nvJitLinkError as error:
        raise RuntimeError(f"nvJitLink failed ({error}):\n{_error_log(handle)}") from None
    finally:
        nvjitlink.destroy(handle)
    return bytes(result), log


def _info_log(handle) -> str:
    from cuda.bindings import nvjitlink

    buf = bytearray(nvjitlink.get_info_log_size(handle))
    nvjitlink.get_info_log(handle, buf)
    return buf.decode(errors="replace")


def _error_log(handle) -> str:
    from cuda.bindings import nvjitlink

    buf = bytearray(nvjitlink.get_error_log_size(handle))
    nvjitlink.get_error_log(handle, buf)
    return buf.decode(errors="replace")


_NUMBER = r"(\d+)"


def parse_report(log: str, cc: tuple[int, int] = HOPPER) -> Resources:
    """Read ptxas's `-v` lines, as nvJitLink's info log relays them."""

    def find(pattern: str) -> int:
        match = re.search(pattern, log)
        if match is None:
            raise ValueError(f"no {pattern!r} in the assembler's report:\n{log}")
        return int(match.group(1))

    # a whole-program (link-time optimized) build reports the kernel's own static shared memory,
    # without the system's reserve, and omits the line when there is none
    smem = find(rf"{_NUMBER} bytes smem") if "bytes smem" in log else 0
    return Resources(
        registers=find(rf"Used {_NUMBER} registers"),
        spill_stores=find(rf"{_NUMBER} bytes spill stores"),
        spill_loads=find(rf"{_NUMBER} bytes spill loads"),
        stack_bytes=find(rf"{_NUMBER} bytes stack frame"),
        shared_bytes=smem,
        local_bytes=find(rf"{_NUMBER} bytes lmem") if "bytes lmem" in log else 0,
        cc=tuple(cc),
    )
