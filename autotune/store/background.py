"""Kernels built in a process of their own, and the stored kernels that can stand in meanwhile.

A call whose chosen kernel is not in the store need not wait for it: any stored kernel built for
the same dtype, architecture, operand layout, offset width and unaligned rows (another config)
computes the same product, and so does one that ships with mmtune (autotune.store.prebuilt).
`stand_ins` finds those, best first; `start` builds the chosen one in a child process
(`python -m autotune.store.background KEY`), so the caller's GIL stays free, and writes it into
the store, where the caller reads it once `Build.done()` says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from autotune.store import cubins, prebuilt
from autotune.store.cubins import BuildKey, Entry
from kernels import Config
from kernels.rules import Arch

HEADER_BYTES = 1 << 16  # an entry's header is a few hundred bytes; its cubin follows
#: the parts of an entry's key that a stand-in shares with the kernel it stands in for
SHARED_PARTS = ("format", "dtype", "layout", "offset_bits", "unaligned", "arguments", "arch", "source",
                *cubins.TOOLCHAIN_PACKAGES)
#: those a shipped kernel shares with it: a cubin runs whatever toolchain built it
SHIPPED_PARTS = tuple(part for part in SHARED_PARTS if part not in cubins.TOOLCHAIN_PACKAGES)


@dataclass
class Build:
    """A kernel being built by a child process."""

    key: BuildKey
    process: subprocess.Popen
    root: Path | None = None

    def done(self) -> bool:
        return self.process.poll() is not None

    def wait(self) -> None:
        self.process.wait()

    def entry(self) -> Entry | None:
        """The built kernel, once done; None while building or if the build failed."""
        if not self.done():
            return None
        return cubins.read(cubins.key_parts(self.key, self.root), self.root)

    @property
    def failed(self) -> bool:
        return self.done() and self.entry() is None


#: (key, store directory) -> its build, under way or done in this process: processes, not memos
_builds: dict[tuple[BuildKey, str], Build] = {}
_lock = threading.Lock()


def start(key: BuildKey, root: Path | None = None) -> Build:
    """The build of `key` in a child process: started now, or the one this process started before
    (under way, done, or failed: a failed build is not retried, since it would fail again)."""
    where = (key, str(root or cubins.directory()))  # a build writes into one store
    with _lock:
        build = _builds.get(where)
        if build is None:
            argument = json.dumps(encode_key(key))
            environment = {**os.environ, **({"MMTUNE_KERNELS": str(root)} if root else {})}
            process = subprocess.Popen([sys.executable, "-m", "autotune.store.background", argument],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=environment)
            build = _builds[where] = Build(key, process, root)
        return build


def encode_key(key: BuildKey) -> dict:
    return {"family": key.config.family, "params": key.config.params, "dtype": key.dtype, "arch": str(key.arch),
            "layout": key.layout, "offset_bits": key.offset_bits, "unaligned": key.unaligned, "bias": key.bias}


def decode_key(data: dict) -> BuildKey:
    return BuildKey(Config.of(data["family"], data["params"]), data["dtype"], Arch.of(data["arch"]),
                    layout=data["layout"], offset_bits=data["offset_bits"], unaligned=data["unaligned"],
                    bias=data["bias"])


def stand_ins(key: BuildKey, shape: tuple[int, int], root: Path | None = None) -> list[Entry]:
    """Stored kernels that compute what `key`'s kernel computes (another config), best first for a
    C of `shape`: the chosen family's, then by the work their tiles pad C with. Where the store
    holds none, the kernels that ship (autotune.store.prebuilt), whatever toolchain built them."""
    wanted = cubins.key_parts(key, root)
    found = []
    for path in sorted((root or cubins.directory()).glob("*.cubin")):
        header = _header(path)
        if header is None or not _shares(header["parts"], wanted, SHARED_PARTS):
            continue
        entry = cubins.read(header["parts"], root)
        if entry is not None:
            found.append(entry)
    if not found:
        shipped = prebuilt.entries(key.arch)
        found = [entry for entry in shipped if _shares(entry.header["parts"], wanted, SHIPPED_PARTS)]
    return sorted(found, key=rank(key.config, shape))


def _shares(parts: dict, wanted: dict, names: tuple[str, ...]) -> bool:
    return all(parts.get(name) == wanted.get(name) for name in names)


def rank(chosen: Config, shape: tuple[int, int]):
    """The sort key of stand-ins for `chosen` at a C of `shape`: the chosen family's first, then by
    the work their tiles pad C with."""
    return lambda entry: (entry.header["parts"]["family"] != chosen.family, _padding(entry, shape))


def config_of(entry: Entry) -> Config:
    """The config a stored kernel was built from."""
    parts = entry.header["parts"]
    return Config.of(parts["family"], json.loads(parts["config"]))


def _header(path: Path) -> dict | None:
    """An entry file's header, read without its cubin; None for anything else."""
    try:
        with path.open("rb") as file:
            found = cubins.header_of(file.read(HEADER_BYTES))
    except OSError:
        return None
    return found[0] if found and isinstance(found[0].get("parts"), dict) else None


def _padding(entry: Entry, shape: tuple[int, int]) -> float:
    """How many times C's area the entry's tiles cover (1 for a C its tiles divide)."""
    (rows, cols), (bm, bn) = shape, entry.tile
    return (-(-rows // bm) * bm) * (-(-cols // bn) * bn) / max(1, rows * cols)


def main() -> None:
    """Build the kernel whose key (encode_key's JSON) is the one argument, into the store."""
    cubins.get(decode_key(json.loads(sys.argv[1])))


if __name__ == "__main__":
    main()
