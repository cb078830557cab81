"""Kernels that ship with mmtune, so that a fresh install's first call of a product need not wait
for a compile.

For every kind of product a call can make in float32 or float64 (operand layout and unaligned
rows, 32-bit offsets; with a bias in the layouts a bias comes with, BIASED_LAYOUTS) one kernel
ships, built for sm_90a (H100, H200): a stand-in
(autotune.store.background) that serves while the kernel lookup chose builds. They live in
autotune/data/kernels/<arch>.tar.xz, one stored entry (autotune.store.cubins) a member, made by
`python -m autotune.store.prebuilt` (NVVM and nvJitLink, no GPU). Each carries the hash of the
kernel sources it was built from; after any change to kernels/ they no longer match and serve
nothing until made again, which tests/test_prebuilt.py reports.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
from concurrent.futures import ProcessPoolExecutor
from importlib import resources
from itertools import product
from pathlib import Path

from autotune.memos import MEMOS
from autotune.store import cubins
from autotune.store.cubins import BuildKey, Entry
from kernels import LAYOUTS, Config
from kernels.rules import ITEMSIZES, VECTOR_BYTES, Arch, unaligned_for

#: the config that stands in for every product of a dtype: whole-K tiles the shipped records use often
#: (float64's: dmma's few tile on sm_90, spelled out, since the call path that reads it loads no family)
STAND_INS = {
    "float32": Config.of("vector", {"bm": 64, "bn": 128, "bk": 8, "tm": 8, "tn": 8, "pad": 4, "stages": 1,
                                    "unroll": True, "fragments": 1, "wide_fetch": True, "async_copy": False,
                                    "min_blocks": 1}),
    "float64": Config.of("dmma", {"mma": "m16n8k8", "bm": 64, "bn": 64, "bk": 16, "warps_m": 2, "warps_n": 2,
                                  "stages": 3, "splits": 1, "min_blocks": 1, "stored": "memory",
                                  "stores": "pairs"}),
}
ARCHES = (Arch(9, 0, "a"),)
#: the layouts of the products that ship with a bias too: nn.Linear's x @ W.T (NT) and A @ B (NN)
BIASED_LAYOUTS = ("NN", "NT")
FOLDER = "kernels"


def kinds(dtype: str) -> list[tuple[str, str]]:
    """(layout, unaligned rows) of every product of `dtype` a call can make: each of M, N and K
    a multiple of 16 bytes or not."""
    step = VECTOR_BYTES // ITEMSIZES[dtype]
    sizes = (4 * step, 4 * step + 1)
    return sorted({(layout, unaligned_for(m, n, k, layout, dtype)) for layout in LAYOUTS
                   for m, n, k in product(sizes, repeat=3)})


def keys(arch: Arch) -> list[BuildKey]:
    return [BuildKey(config, dtype, arch, layout=layout, offset_bits=32, unaligned=unaligned, bias=bias)
            for dtype, config in STAND_INS.items() for layout, unaligned in kinds(dtype)
            for bias in (False, True) if layout in BIASED_LAYOUTS or not bias]


def archive(arch: Arch):
    """Where the kernels shipped for `arch` are (a Traversable: it may not exist)."""
    return resources.files("autotune") / "data" / FOLDER / f"{arch.sm}.tar.xz"


@MEMOS.function
def entries(arch: Arch) -> tuple[Entry, ...]:
    """The kernels shipped for `arch`, whatever sources they were built from; none if none ship."""
    source = archive(arch)
    if not source.is_file():
        return ()
    found = []
    with tarfile.open(fileobj=io.BytesIO(source.read_bytes()), mode="r:xz") as bundle:
        for member in bundle.getmembers():
            data = bundle.extractfile(member)
            entry = cubins.decode(data.read()) if data is not None else None
            if entry is not None:
                found.append(entry)
    return tuple(found)


def write(arch: Arch, out: Path, jobs: int = 1) -> list[Entry]:
    """Build every stand-in for `arch`, in `jobs` processes, and write them to `out` (a .tar.xz),
    byte for byte the same for the same cubins."""
    with ProcessPoolExecutor(jobs) as pool:
        built = list(pool.map(cubins.build, keys(arch)))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as bundle:
        for entry in sorted(built, key=lambda entry: entry.key):
            data = cubins.encode(entry)
            member = tarfile.TarInfo(f"{entry.key}.cubin")
            member.size, member.mode = len(data), 0o644
            bundle.addfile(member, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buffer.getvalue())
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the kernels that ship as stand-ins (no GPU needed).")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "data" / FOLDER,
                        help="the folder to write <arch>.tar.xz into")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes that build at once")
    args = parser.parse_args()
    for arch in ARCHES:
        built = write(arch, args.out / f"{arch.sm}.tar.xz", args.jobs)
        print(f"{arch.sm}: {len(built)} kernels")


if __name__ == "__main__":
    main()
