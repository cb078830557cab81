"""The kernels that ship as stand-ins (autotune.store.prebuilt): current, complete, and found by a
first call whose store is empty, on the GPUs they were built for alone."""

from dataclasses import replace

import pytest

import kernels
from autotune.store import background, cubins, prebuilt
from kernels import Config
from kernels.rules import Arch

HOPPER = Arch(9, 0, "a")
WGMMA = Config.of("wgmma", {"bm": 128, "bn": 128, "stages": 4, "splits": 1, "min_blocks": 1, "producer": 1})


@pytest.fixture
def empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_KERNELS", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("arch", prebuilt.ARCHES, ids=str)
def test_the_shipped_kernels_are_built_from_these_sources_for_every_kind_of_product(arch, empty_store):
    shipped = prebuilt.entries(arch)
    assert shipped, f"no kernels ship for {arch.sm}: run python -m autotune.store.prebuilt"
    current = cubins.source_hash(empty_store)
    stale = sorted({entry.header["parts"]["source"] for entry in shipped} - {current})
    assert not stale, f"the kernels shipped for {arch.sm} were built from other kernel sources ({stale}, now " \
                      f"{current}): run python -m autotune.store.prebuilt"
    found = sorted((p["dtype"], p["layout"], p["unaligned"], p["offset_bits"], p["arch"], p["family"], p["config"],
                    "bias" in p["arguments"]) for p in (entry.header["parts"] for entry in shipped))
    wanted = sorted((key.dtype, key.layout, key.unaligned, key.offset_bits, key.arch.sm, key.config.family,
                     key.config.params_json, key.bias) for key in prebuilt.keys(arch))
    assert found == wanted
    # per dtype: NN, NT and TN have two row lengths, TT three; NN and NT with a bias too
    assert len(wanted) == 2 * (3 * 2**2 + 2**3 + 2 * 2**2)


def test_a_first_call_with_an_empty_store_takes_the_shipped_kernel_of_its_kind(empty_store):
    for layout, shape in (("NN", (1000, 1000, 1000)), ("NT", (999, 1001, 513)), ("TT", (3, 5, 7))):
        key = cubins.BuildKey.of(WGMMA, "float32", shape, layout, Arch(9, 0))
        found = background.stand_ins(key, shape[:2])
        assert [background.config_of(entry) for entry in found] == [prebuilt.STAND_INS["float32"]]
        parts = found[0].header["parts"]
        assert (parts["layout"], parts["unaligned"], parts["arch"]) == (layout, key.unaligned, "sm_90a")
    # float64's stand-in is dmma's few tile on sm_90, spelled out for the numba-free call path
    assert prebuilt.STAND_INS["float64"] == Config.of("dmma", {**kernels.family("dmma").few_tile("float64", "9.0"),
                                                               "splits": 1})
    double = cubins.BuildKey.of(WGMMA, "float64", (64, 64, 63), "TN", Arch(9, 0))
    assert [background.config_of(entry) for entry in background.stand_ins(double, (64, 64))] == [
        prebuilt.STAND_INS["float64"]]
    for dtype, layout in (("float32", "NT"), ("float64", "NN")):  # nn.Linear's x @ W.T + b; A @ B + b
        biased = replace(cubins.BuildKey.of(WGMMA, dtype, (100, 96, 64), layout, Arch(9, 0)), bias=True)
        assert [entry.bias for entry in background.stand_ins(biased, (100, 96))] == [True]
    biased = replace(cubins.BuildKey.of(WGMMA, "float32", (100, 96, 64), "TN", Arch(9, 0)), bias=True)
    assert background.stand_ins(biased, (100, 96)) == []  # none ships: its first call waits for the build
    assert background.stand_ins(cubins.BuildKey.of(WGMMA, "float32", (64, 64, 64), "NN", Arch(8, 0)), (64, 64)) == []
    assert background.stand_ins(cubins.BuildKey.of(WGMMA, "int32", (64, 64, 64), "NN", Arch(9, 0)), (64, 64)) == []


def test_a_stored_kernel_of_the_kind_is_preferred_and_stale_shipped_kernels_serve_nothing(empty_store, monkeypatch):
    key = cubins.BuildKey.of(WGMMA, "float32", (256, 256, 256), "NN", Arch(9, 0))
    shipped = background.stand_ins(key, (256, 256))[0]
    parts = {**shipped.header["parts"], **cubins.toolchain(), "source": cubins.source_hash(empty_store),
             "config": Config.of("vector", {"bm": 32}).params_json}
    mine = cubins.Entry(cubins.entry_key(parts), {**shipped.header, "parts": parts}, shipped.cubin)
    cubins.write(mine, empty_store)
    assert [entry.key for entry in background.stand_ins(key, (256, 256))] == [mine.key]
    cubins.path_of(mine.key, empty_store).unlink()
    monkeypatch.setattr(cubins, "source_hash", lambda root=None: "changed-sources")  # kernels/ edited since
    assert background.stand_ins(key, (256, 256)) == []
