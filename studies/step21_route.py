"""Why the tuner's build of a kernel and the kernel store's differed: the link route, on this GPU host.

    python3 studies/step21_route.py [MxNxK]

For one shipped float32 record (default 1792^3), the registers per function of three cubins of one kernel:
`cuda.jit`'s (what trials time; link-time optimized by default where nvJitLink is installed), the kernel's
PTX linked as store format 1 did (relocatable: ptxas calls its 64-bit division helpers), and the LTO-IR
linked as store format 2 does.
"""

from __future__ import annotations

import hashlib
import struct
import sys

import torch
from numba.cuda.cudadrv import driver as numba_driver

import kernels
from autotune.records import shipped_rows
from kernels.resources import link, ltoir, parse_report, ptx


def cubin_registers(cubin: bytes) -> list[int]:
    """EIATTR_REGCOUNT values of a cubin's .nv.info section (one per function)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    strings = sections[names][4]
    found = []
    for section in sections:
        start = strings + section[0]
        if cubin[start:cubin.index(b"\0", start)] != b".nv.info":
            continue
        data, i = cubin[section[4]:section[4] + section[5]], 0
        while i + 4 <= len(data):
            kind, attribute, size = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
            if kind == 4:
                if attribute == 0x2F:
                    found.append(struct.unpack_from("<I", data, i + 8)[0])
                i += 4 + size
            else:
                i += 4
    return found


def main() -> None:
    shape = tuple(map(int, (sys.argv[1] if len(sys.argv) > 1 else "1792x1792x1792").split("x")))
    row = next(r for r in shipped_rows(torch.cuda.get_device_name(0), "float32") if (r["m"], r["n"], r["k"]) == shape)
    cc = torch.cuda.get_device_capability(0)
    kernel = kernels.build(row["family"], row["params"], "float32")
    library = next(iter(kernel.compile().overloads.values()))._codelibrary
    theirs = bytes(library.get_cubin(cc=cc).code)
    print(f"cuda.jit (lto={library._lto}): registers {cubin_registers(theirs)} sha {sha(theirs)}")
    relocatable = numba_driver._Linker(cc=cc)  # the PTX route of store format 1
    relocatable.add_ptx(ptx(kernel, cc).encode())
    old = bytes(relocatable.complete().code)
    print(f"PTX linked: registers {cubin_registers(old)} (kernel last; 64-bit division helpers called: "
          f"{b'.text.__cuda_sm20_div_s64' in old}) sha {sha(old)}")
    cubin, log = link(ltoir(kernel, cc), cc, row["family"])
    print(f"LTO-IR linked (store format 2): registers {cubin_registers(cubin)} ptxas {parse_report(log, cc).registers}"
          f" sha {sha(cubin)}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


if __name__ == "__main__":
    main()
