"""Compiled kernels kept on disk, so that a process launches a tuned kernel without compiling it.

An entry is one file, `<key>.cubin`: MAGIC, a 4-byte header length, a JSON header, the cubin.
The header says all a launch needs (entry name, block, tile, splits or stream-K workers, shared
bytes, argument layout), so loading an entry needs cuda.bindings and neither numba nor the kernel
modules (both import numba, which costs more than the whole launch). The key hashes everything that changes
the binary: family, config, operand layout (kernels.LAYOUTS), offset width, the arguments' form,
dtype, target architecture, the kernel sources, and the numba-cuda, NVVM and nvJitLink versions
(launch bounds follow from the config and the sources). Entries are written atomically (a
temporary file renamed over); one that is truncated, corrupt or holds another key reads as
missing and is rebuilt.

The source part of the key is a hash of the files of the `kernels` package, found without
importing it and memoized by (name, mtime, size) in `sources.json`, so a load hashes nothing.

The store's `shapes/` folder, which config each shape uses, is autotune.store.shapes'.

Directory: MMTUNE_KERNELS, else `kernels/` in the platform's user cache dir (platformdirs).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import warnings
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.errors import StoreError
from autotune.store.paths import store_directory, write_atomically
from kernels import FAMILIES_VARIABLE, Config, outside_families
from kernels.rules import Arch, adds_into_c, memory_shapes, offset_bits_for, unaligned_for

if TYPE_CHECKING:
    from autotune.backends import launch

FORMAT = 2  # 2: cubins link-time optimized, as cuda.jit builds them (1: linked from PTX)


MAGIC = b"MMTUNE-CUBIN\n"


#: the arguments every family's kernel takes: A, B, C as C-contiguous 2-D arrays (9 words each)
ARGUMENTS = {"arrays": 3, "ndim": 2, "order": "C", "words_per_array": 9, "word_bytes": 8}
#: and a kernel built with a bias (kernels.Kernel.with_bias) after them: a contiguous 1-D array
BIAS_ARGUMENT = {"ndim": 1, "order": "C", "words": 7}


def arguments(bias: bool) -> dict:
    """The arguments' form, as an entry's key names it."""
    return {**ARGUMENTS, "bias": BIAS_ARGUMENT} if bias else ARGUMENTS


def argument_words(bias: bool) -> int:
    return ARGUMENTS["arrays"] * ARGUMENTS["words_per_array"] + (BIAS_ARGUMENT["words"] if bias else 0)


TOOLCHAIN_PACKAGES = {"numba_cuda": "numba-cuda", "nvvm": "nvidia-nvvm", "nvjitlink": "nvidia-nvjitlink"}


def directory() -> Path:
    return store_directory()


@dataclass(frozen=True)
class BuildKey:
    """What one stored kernel is built for: a config, a dtype and an architecture, and the operand
    layout, offset width and unaligned rows of the products it computes (kernels.build), and
    whether it adds a bias to C's rows."""

    config: Config
    dtype: str
    arch: Arch
    layout: str = "NN"
    offset_bits: int = 32
    unaligned: str = ""
    bias: bool = False

    @classmethod
    def of(cls, config: Config, dtype: str, shape: tuple[int, int, int], layout: str, arch: Arch) -> "BuildKey":
        """The build that computes a product of `shape` in `layout` (kernels.rules' offset width and
        unaligned rows) on a GPU of architecture `arch`, for the target cuda.jit compiles for
        there (Arch.native: sm_90a on sm_90, whose code no other GPU runs); with no bias."""
        return cls(config, dtype, Arch.of(arch).native, layout=layout, offset_bits=offset_bits_for(*shape),
                   unaligned=unaligned_for(*shape, layout, dtype))


@cache
def toolchain() -> dict:
    """Versions of the packages that turn a kernel into a cubin ("" where one is not installed)."""
    found = {}
    for name, package in TOOLCHAIN_PACKAGES.items():
        try:
            found[name] = version(package)
        except PackageNotFoundError:
            found[name] = ""
    return found


def kernel_sources() -> list[Path]:
    """The `kernels` package's files and those of the families MMTUNE_FAMILIES registers, found
    without importing them (importing them imports numba)."""
    spec = find_spec("kernels")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the kernels package is not installed")
    outside = []
    for name in outside_families():
        try:
            found = find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None or not found.origin:
            raise StoreError(f"{FAMILIES_VARIABLE} names {name!r}, which cannot be found on sys.path")
        outside.append(Path(found.origin))
    return sorted(Path(spec.submodule_search_locations[0]).glob("*.py")) + outside


def source_hash(root: Path | None = None) -> str:
    """A hash of every kernels/*.py (any change rebuilds every entry: safe, and cheap to check).
    Files are hashed only when their mtime or size changed since the memo in sources.json."""
    root = root or directory()
    memo_path = root / "sources.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    digests, changed = [], False
    for path in kernel_sources():
        stat = path.stat()
        stamp = [stat.st_mtime_ns, stat.st_size]
        known = memo.get(str(path))
        if not (isinstance(known, list) and len(known) == 3 and known[:2] == stamp):
            known = memo[str(path)] = [*stamp, hashlib.sha256(path.read_bytes()).hexdigest()]
            changed = True
        digests.append(f"{path.name}:{known[2]}")
    if changed:
        write_atomically(memo_path, json.dumps(memo, indent=1).encode())
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:16]


def key_parts(key: BuildKey, root: Path | None = None) -> dict:
    return {
        "format": FORMAT, "family": key.config.family, "config": key.config.params_json, "dtype": key.dtype,
        "layout": key.layout, "offset_bits": key.offset_bits, "unaligned": key.unaligned,
        "arguments": arguments(key.bias),
        "arch": key.arch.sm, "source": source_hash(root), **toolchain(),
    }


def entry_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Entry:
    key: str
    header: dict
    cubin: bytes

    @property
    def name(self) -> str:
        return self.header["entry"]

    @property
    def block(self) -> tuple[int, ...]:
        return tuple(self.header["block"])

    @property
    def tile(self) -> tuple[int, int]:
        return tuple(self.header["tile"])

    @property
    def splits(self) -> int:
        return self.header["splits"]

    @property
    def workers_per_sm(self) -> int:
        """Stream-K blocks per SM (kernels.streamk); 0 for a block per tile."""
        return self.header.get("workers_per_sm", 0)

    @property
    def adds(self) -> bool:
        """Whether the kernel adds into C, which must be zeroed first (kernels.base.Kernel.adds)."""
        return adds_into_c(self.header)

    @property
    def dynamic_shared(self) -> int:
        return self.header["dynamic_shared"]

    @property
    def bias(self) -> bool:
        """Whether the kernel takes a bias after A, B and C (BuildKey.bias)."""
        return "bias" in self.header["parts"]["arguments"]


def encode(entry: Entry) -> bytes:
    header = json.dumps({**entry.header, "key": entry.key}, sort_keys=True).encode()
    return MAGIC + struct.pack(">I", len(header)) + header + entry.cubin


HEADER_START = len(MAGIC) + 4


def header_of(data: bytes) -> tuple[dict, int] | None:
    """(the JSON header, where the cubin starts) of an entry's bytes, or of their first part
    (the header is a few hundred bytes); None for anything else."""
    if not data.startswith(MAGIC) or len(data) < HEADER_START:
        return None
    (size,) = struct.unpack(">I", data[len(MAGIC):HEADER_START])
    try:
        header = json.loads(data[HEADER_START:HEADER_START + size])
    except ValueError:
        return None
    return (header, HEADER_START + size) if isinstance(header, dict) else None


def decode(data: bytes) -> Entry | None:
    """The entry in `data`, or None if it is not a whole, well-formed entry."""
    found = header_of(data)
    if found is None:
        return None
    header, start = found
    cubin = data[start:]
    if not cubin or header.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest():
        return None
    key = header.pop("key", None)
    if not isinstance(key, str) or entry_key(header.get("parts", {})) != key:
        return None
    return Entry(key, header, cubin)


def path_of(key: str, root: Path | None = None) -> Path:
    return (root or directory()) / f"{key}.cubin"


def read(parts: dict, root: Path | None = None) -> Entry | None:
    """The stored entry for `parts`, or None: missing, corrupt, or another key's (foreign)."""
    key = entry_key(parts)
    try:
        data = path_of(key, root).read_bytes()
    except OSError:
        return None
    entry = decode(data)
    if entry is None or entry.key != key or entry.header.get("parts") != parts:
        return None
    return entry


def write(entry: Entry, root: Path | None = None) -> Path:
    path = path_of(entry.key, root)
    write_atomically(path, encode(entry))
    return path


def build(key: BuildKey, root: Path | None = None) -> Entry:
    """Compile (no GPU needed: NVVM, then nvJitLink) and describe one kernel; imports numba."""
    import kernels
    from kernels.resources import link, ltoir, parse_report

    parts = key_parts(key, root)
    family, cc = key.config.family, key.arch.target
    kernel = kernels.build(family, key.config.params, key.dtype, key.layout, key.offset_bits, key.unaligned)
    try:
        kernel = kernel.with_bias() if key.bias else kernel
        code = ltoir(kernel, cc)
        cubin, log = link(code, cc, family)
    except Exception as error:  # NVVM, nvJitLink and Numba's typing raise many kinds
        raise StoreError(f"{key.config} does not compile for {key.arch.sm}: {error}") from None
    name, params = entry_parameters(cubin, log)
    words = argument_words(key.bias)
    if params != [8] * words:
        raise StoreError(f"{family} kernel takes parameters {params}, not the {words} 8-byte words of "
                         f"{arguments(key.bias)}")
    resources = parse_report(log, cc)
    header = {
        "parts": parts, "entry": name, "block": list(kernel.block), "tile": list(kernel.tile),
        "splits": kernel.splits, "workers_per_sm": kernel.workers_per_sm, "launch_bounds": list(kernel.launch_bounds),
        "dynamic_shared": kernel.dynamic_shared,
        "static_shared": resources.shared_bytes, "registers": resources.registers,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
    }
    return Entry(entry_key(parts), header, cubin)


def entry_parameters(cubin: bytes, log: str) -> tuple[str, list[int]]:
    """(entry name, parameter sizes in bytes) of the one kernel in a cubin: the name from the
    assembler's report (`link`'s log), the sizes from the cubin's `.nv.info.<entry>` section, whose
    parameter records (EIATTR_KPARAM_INFO) say each parameter's ordinal and size."""
    match = re.search(r"Compiling entry function '([^']+)'", log)
    if match is None:
        raise StoreError("the assembler's report names no entry function")
    name = match.group(1)
    try:
        info = elf_sections(cubin).get(f".nv.info.{name}")
        if info is None:
            raise StoreError(f"the cubin has no parameter records for {name[:40]}...")
        sizes = {}
        for attribute, value in nv_info_records(info):
            if attribute == KPARAM_INFO:
                (ordinal,), (flags,) = struct.unpack_from("<H", value, 4), struct.unpack_from("<I", value, 8)
                sizes[ordinal] = (flags >> 18) & 0x3FFF
    except (struct.error, IndexError, ValueError) as error:
        raise StoreError(f"the cubin's parameter records do not read: {error}") from None
    if sorted(sizes) != list(range(len(sizes))):
        raise StoreError(f"the cubin's parameter records skip ordinals: {sorted(sizes)}")
    return name, [sizes[i] for i in range(len(sizes))]


KPARAM_INFO = 0x17  # an nv.info attribute: (index u32, ordinal u16, offset u16, flags u32: size in bits 18-31)
SIZED = 0x04  # an nv.info record format: a u16 length, then that many bytes


def nv_info_records(info: bytes):
    """(attribute, value bytes) of an nv.info section's records (format u8, attribute u8, then a
    u16): in the sized format the u16 is the length of the value that follows, in the others
    (none, byte, half-word) it is the value itself."""
    at = 0
    while at + 4 <= len(info):
        form, attribute, (half,) = info[at], info[at + 1], struct.unpack_from("<H", info, at + 2)
        if form == SIZED:
            if at + 4 + half > len(info):
                raise ValueError(f"a record of {half} bytes at {at} runs past the section's {len(info)}")
            yield attribute, info[at + 4:at + 4 + half]
            at += 4 + half
        else:
            yield attribute, info[at + 2:at + 4]
            at += 4


def elf_sections(image: bytes) -> dict[str, bytes]:
    """The sections of a 64-bit little-endian ELF file (a cubin), by name."""
    if image[:4] != b"\x7fELF":
        raise StoreError("the linker's output is not an ELF cubin")
    (table,) = struct.unpack_from("<Q", image, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", image, table + i * entry_size) for i in range(count)]
    names = headers[names_index][4]

    def name(offset: int) -> str:
        start = names + offset
        return image[start:image.index(b"\0", start)].decode()

    return {name(h[0]): image[h[4]:h[4] + h[5]] for h in headers}


def stored(key: BuildKey, root: Path | None = None) -> Entry | None:
    """The stored entry, or None where it is missing, corrupt or foreign (nothing is built)."""
    return read(key_parts(key, root), root)


def get(key: BuildKey, root: Path | None = None) -> Entry:
    """The stored entry, built and stored first if missing, corrupt or foreign."""
    entry = stored(key, root)
    if entry is None:
        entry = build(key, root)
        try:
            write(entry, root)
        except OSError as error:
            warnings.warn(f"mmtune: cannot write to the kernel store: {error}", stacklevel=2)
    return entry


#: entry key -> its kernel, loaded once per process: a resource, not a memo (autotune.clear keeps it)
_loaded: dict[str, launch.LoadedKernel] = {}


def load(entry: Entry) -> launch.LoadedKernel:
    """The entry's kernel, loaded through the CUDA driver once per process (a CUlibrary serves every context)."""
    found = _loaded.get(entry.key)
    if found is None:
        from autotune.backends import launch

        found = _loaded[entry.key] = launch.load(entry.cubin, entry.name, entry.dynamic_shared)
    return found


def plan(entry: Entry, loaded: launch.LoadedKernel, device: launch.GpuContext, shape: tuple[int, int, int],
         dtype: str, layout: str = "NN") -> launch.Plan:
    """The launch of the entry's `loaded` kernel on `device` for a product of `shape` (M, N, K) in
    `layout`: its grid, its argument words, and the words of C to zero first where it adds into C."""
    from autotune.backends import launch

    m, n, k = shape
    itemsize = np.dtype(dtype).itemsize
    words, slots = launch.pack_arguments(memory_shapes(m, n, k, layout) + [(n,)] * entry.bias, itemsize)
    zero = m * n * itemsize // 4 if entry.adds else 0
    sms = device.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT") if entry.workers_per_sm else 0
    grid = launch.grid_for(m, n, entry.tile, entry.splits, entry.workers_per_sm * sms)
    return launch.Plan(loaded=loaded, dev=device, blocks=launch.Blocks(grid, entry.block, zero), words=words,
                       slots=slots)
