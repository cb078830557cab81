"""The kernel store: keys, atomic writes, damaged entries, and loading without numba."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernels
from autotune.store import records
from autotune.store import cubins
from autotune.store import shapes
from autotune.store import warm
from autotune.cli import app
from autotune.space.problem import Problem
from autotune.store.rows import Row
from kernels import Config
from kernels.rules import Arch


def build_key(family, config, dtype, cc):
    return cubins.BuildKey(Config.of(family, config), dtype, Arch.of(cc))


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_KERNELS", str(tmp_path / "kernels"))
    return tmp_path / "kernels"


def fake_entry(parts, cubin=b"\x7fELF fake"):
    import hashlib

    header = {"parts": parts, "entry": "_Z4name", "block": [16, 16], "tile": [16, 16], "splits": 1,
              "launch_bounds": [256], "dynamic_shared": 0, "static_shared": 0, "registers": 32,
              "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
    return cubins.Entry(cubins.entry_key(parts), header, cubin)


def test_the_key_changes_with_everything_that_changes_the_binary(root, tmp_path, monkeypatch):
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "base.py").write_text("x = 1\n")
    monkeypatch.setattr(cubins, "kernel_sources", lambda: sorted(sources.glob("*.py")))
    base = ("vector", {"bm": 64, "bn": 64}, "float32", (9, 0))
    key = cubins.entry_key(cubins.key_parts(build_key(*base)))
    assert cubins.entry_key(cubins.key_parts(build_key("vector", {"bn": 64, "bm": 64}, "float32", (9, 0)))) == key
    changed = [
        ("splitk", {"bm": 64, "bn": 64}, "float32", (9, 0)),
        ("vector", {"bm": 128, "bn": 64}, "float32", (9, 0)),
        ("vector", {"bm": 64, "bn": 64}, "float64", (9, 0)),
        ("vector", {"bm": 64, "bn": 64}, "float32", (8, 0)),
    ]
    keys = {cubins.entry_key(cubins.key_parts(build_key(*c))) for c in changed}
    assert len(keys) == 4 and key not in keys
    monkeypatch.setattr(cubins, "toolchain", lambda: {"numba_cuda": "0.31", "nvvm": "13.5", "nvjitlink": "13.5"})
    assert cubins.entry_key(cubins.key_parts(build_key(*base))) != key
    monkeypatch.undo()
    monkeypatch.setenv("MMTUNE_KERNELS", str(root))
    monkeypatch.setattr(cubins, "kernel_sources", lambda: sorted(sources.glob("*.py")))
    assert cubins.entry_key(cubins.key_parts(build_key(*base))) == key
    (sources / "base.py").write_text("x = 2\n")  # a kernel source changed: another binary
    assert cubins.entry_key(cubins.key_parts(build_key(*base))) != key
    for part in ("offset_bits", "unaligned", "layout", "arch", "source", "numba_cuda", "nvvm", "nvjitlink"):
        assert part in cubins.key_parts(build_key(*base))


def test_sources_are_hashed_only_when_they_change(root, tmp_path, monkeypatch):
    sources = tmp_path / "src"
    sources.mkdir()
    path = sources / "a.py"
    path.write_text("a = 1\n")
    monkeypatch.setattr(cubins, "kernel_sources", lambda: [path])
    first = cubins.source_hash()
    reads = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or original(self))
    assert cubins.source_hash() == first and reads == []
    path.write_text("a = 22\n")
    assert cubins.source_hash() != first and reads == [path]


def test_entries_round_trip_and_damaged_or_foreign_ones_read_as_missing(root):
    parts = cubins.key_parts(build_key("naive", {"block": 16}, "float32", (9, 0)))
    entry = fake_entry(parts)
    path = cubins.write(entry)
    assert cubins.read(parts) == entry
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temporary left
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # truncated
    assert cubins.read(parts) is None
    path.write_bytes(b"garbage")
    assert cubins.read(parts) is None
    other = cubins.key_parts(build_key("naive", {"block": 32}, "float32", (9, 0)))
    path.write_bytes(cubins.encode(fake_entry(other)))  # another key's entry under this name
    assert cubins.read(parts) is None


def test_a_damaged_entry_is_rebuilt(root, monkeypatch):
    parts = cubins.key_parts(build_key("naive", {"block": 16}, "float32", (9, 0)))
    built = []
    monkeypatch.setattr(cubins, "build", lambda *args: built.append(args) or fake_entry(parts))
    cubins.path_of(cubins.entry_key(parts)).parent.mkdir(parents=True, exist_ok=True)
    cubins.path_of(cubins.entry_key(parts)).write_bytes(cubins.MAGIC + b"\0\0\0\5{bad")
    assert cubins.get(build_key("naive", {"block": 16}, "float32", (9, 0))).cubin == b"\x7fELF fake"
    assert cubins.get(build_key("naive", {"block": 16}, "float32", (9, 0))).cubin == b"\x7fELF fake"
    assert len(built) == 1


def test_a_failed_write_leaves_the_old_entry(root, monkeypatch):
    parts = cubins.key_parts(build_key("naive", {"block": 16}, "float32", (9, 0)))
    cubins.write(fake_entry(parts, b"old"))

    def interrupted(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError):
        cubins.write(fake_entry(parts, b"new"))
    assert cubins.read(parts).cubin == b"old"
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def test_a_remembered_shape_is_forgotten_when_the_cache_changes(root, isolated_cache):
    shapes.remember(Problem("NVIDIA H200", "float32", 64, 64, 64), Config.of("vector", {"bm": 64}))
    assert shapes.recall(Problem("NVIDIA H200", "float32", 64, 64, 64)) == Config.of("vector", {"bm": 64})
    assert shapes.recall(Problem("NVIDIA H100", "float32", 64, 64, 64)) is None
    isolated_cache.parent.mkdir(parents=True, exist_ok=True)
    isolated_cache.write_bytes(b"a new cache")
    assert shapes.recall(Problem("NVIDIA H200", "float32", 64, 64, 64)) is None


BUILD = """
import json, sys
from autotune.store import cubins
from autotune.store import shapes
from autotune.store import warm
import kernels
from autotune.space.problem import Problem
from kernels.rules import Arch
family, config = "splitk", kernels.family("splitk").default
entry = cubins.get(cubins.BuildKey.of(kernels.Config.of(family, config), "float32", (96, 80, 64), "NN", Arch(9, 0)))
shapes.remember(Problem("NVIDIA H200", "float32", 96, 80, 64), kernels.Config.of(family, config))
from kernels.resources import ptx
divides = "div.s64" in ptx(kernels.build(family, config, "float32"), (9, 0))
helpers = b".text.__cuda_sm20_div_s64" in entry.cubin
print(json.dumps({"key": entry.key, "header": entry.header, "elf": entry.cubin[:4] == b"\\x7fELF",
                  "divides": divides, "helpers": helpers}))
"""
LOAD = """
import json, sys
from autotune import backends
from autotune.call import front
from autotune.space.problem import Problem
served = front.find_entry(backends.Device("NVIDIA H200", "9.0", 132), Problem("NVIDIA H200", "float32", 96, 80, 64))
loaded = [m for m in sys.modules if m == "numba" or m.startswith(("numba.", "kernels.")) and m != "kernels.rules"
          and m != "kernels.contract"]
print(json.dumps({"key": served.entry.key, "family": served.config.family, "loaded": loaded}))
"""


def test_a_stored_kernel_loads_in_a_fresh_process_without_numba(root):
    """Compile-only (NVVM + nvJitLink, no GPU); then a fresh process finds the shape's kernel
    up to the point of handing the cubin to the driver, with numba and the kernels unloaded."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    built = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    built = json.loads(built.stdout)
    header = built["header"]
    assert built["elf"] and header["splits"] > 1 and header["entry"].startswith("_Z")
    assert header["block"] and header["tile"] and header["static_shared"] > 0
    # linked as cuda.jit links what trials time: link-time optimized, a whole program whose 64-bit
    # divisions are inlined, not relocatable code calling ptxas's helper functions
    assert built["divides"] and not built["helpers"]
    loaded = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    result = json.loads(loaded.stdout)
    assert result == {"key": built["key"], "family": "splitk", "loaded": []}


def test_warm_takes_the_architectures_rows_as_lookup_prefers_them(root, monkeypatch):
    """Of a shipped and a cached row for one GPU and shape, the current one, else the faster."""
    from autotune.store import cache

    current = kernels.source_hash("vector")
    shipped = Row(device="NVIDIA H200", dtype="float32", m=8, n=8, k=8, family="vector", params={"from": "shipped"},
                  cc="9.0", gflops=2.0, source_hash=current)
    cached = replace(shipped, params={"from": "cache"}, gflops=3.0)
    other = replace(shipped, m=16, cc="8.0")
    monkeypatch.setattr(records, "shipped_rows", lambda device, dtype: [shipped, other])
    monkeypatch.setattr(cache.Cache, "rows", lambda self, *a, **k: [cached])
    kept = []
    monkeypatch.setattr(warm, "keep", lambda row, root=None, rivals=(): kept.append(row.params) or fake_entry({}))
    results = warm.warm(Arch(9, 0))
    assert kept == [{"from": "cache"}] and [r.error for r in results] == [None]
    kept.clear()
    monkeypatch.setattr(cache.Cache, "rows", lambda self, *a, **k: [replace(cached, source_hash="older", gflops=9.0)])
    warm.warm(Arch(9, 0))
    assert kept == [{"from": "shipped"}]


def test_warm_refuses_a_bad_architecture_in_one_line():
    result = CliRunner().invoke(app, ["warm", "--arch", "hopper"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: architecture must look like sm_90 or 9.0; got 'hopper'"
