"""Compile a kernel for a GPU architecture without a GPU, and read what it uses.

numba-cuda turns the kernel into PTX with NVVM (from the nvidia-nvvm wheel); nvJitLink (from
the nvidia-nvjitlink wheel) assembles it for the target and reports registers, spills, stack and
shared memory. Works on a machine with no GPU and no driver, but not under the CUDA simulator.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from types import SimpleNamespace

from .base import DeviceLimits, Kernel

HOPPER = (9, 0)
#: shared memory the system reserves in every block that uses shared memory, from sm_80 on
#: (cudaDevAttrReservedSharedMemoryPerBlock); ptxas counts it in "smem", the 48 KB limit does not.
RESERVED_SHARED_BYTES = 1024


@dataclass(frozen=True)
class Resources:
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack_bytes: int
    shared_bytes: int  # the kernel's own static shared memory, without the system's reserve
    local_bytes: int
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


def compile_report(kernel: Kernel, cc: tuple[int, int] = HOPPER) -> Resources:
    """Compile `kernel` for compute capability `cc` and return the assembler's resource report."""
    _, log = link(ptx(kernel, cc), cc, kernel.family)
    return parse_report(log, cc)


def link(text: str, cc: tuple[int, int], name: str) -> tuple[bytes, str]:
    """Assemble PTX into a cubin for `cc` with nvJitLink: (cubin, the assembler's -v log)."""
    from cuda.bindings import nvjitlink

    code = text.encode()
    options = [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"]
    handle = nvjitlink.create(len(options), options)
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, code, len(code), name)
        try:
            nvjitlink.complete(handle)
        finally:
            log = _info_log(handle)
        size = nvjitlink.get_linked_cubin_size(handle)
        if size == 0:  # pragma: no cover
            raise RuntimeError(f"nvJitLink produced no code:\n{log}")
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
    except nvjitlink.nvJitLinkError as error:
        raise RuntimeError(f"nvJitLink failed ({error}):\n{_error_log(handle)}") from None
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin), log


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

    smem = find(rf"{_NUMBER} bytes smem")
    if smem and tuple(cc) >= (8, 0):
        smem -= RESERVED_SHARED_BYTES
    return Resources(
        registers=find(rf"Used {_NUMBER} registers"),
        spill_stores=find(rf"{_NUMBER} bytes spill stores"),
        spill_loads=find(rf"{_NUMBER} bytes spill loads"),
        stack_bytes=find(rf"{_NUMBER} bytes stack frame"),
        shared_bytes=smem,
        local_bytes=find(rf"{_NUMBER} bytes lmem"),
        cc=tuple(cc),
    )
