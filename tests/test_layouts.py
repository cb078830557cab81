"""Transposed operands (layouts NN, NT, TN, TT) and 64-bit offsets on the autotune side: reading
operands, plans on the memory shapes, store keys, the cache's layout column, lookup's transfer
rule, tuning a layout, and matmul on transposed views under the simulator."""

import dataclasses
import json
import sqlite3
import types

import numpy as np
import pytest
from numba import cuda
from typer.testing import CliRunner

from autotune import memos
from autotune.memos import MEMOS
import autotune
import autotune.store.records
import kernels
from autotune.call import front
from autotune.backends import launch
from autotune.store import cubins
from autotune.store import shapes
from autotune.errors import RecordsError
from autotune.store.cache import Cache
from autotune.store.rows import validate_records
from autotune.tune.fleet import parse_study_name
from autotune.measure.measurement import error_bound, random_inputs, reference, relative_error, verify
from autotune.call.operands import Operand, check_product, read_cai, read_torch
from autotune.errors import OperandError
from kernels.rules import memory_shapes, offset_bits_for, peeled_rows, unaligned_for
from autotune.tune.study import space_hash, study_name
from autotune.space.problem import Problem
from autotune.store.rows import Row
from conftest import ON_GPU
from test_launch import FakeTensor
from dataclasses import replace
from kernels import Config
from kernels.rules import Arch

H100 = "NVIDIA H100 80GB HBM3"


def transposed_tensor(rows, cols, pointer=0x7000):
    """What `X.T` of a C-contiguous cols x rows torch tensor X reads as: shape (rows, cols)."""
    tensor = FakeTensor((rows, cols), contiguous=False, pointer=pointer)
    tensor.stride = lambda: (1, rows)
    return tensor


def cai(shape, strides, pointer=0x100):
    return types.SimpleNamespace(__cuda_array_interface__={
        "data": (pointer, False), "shape": shape, "strides": strides, "typestr": "<f4", "version": 3})


# Operands ---------------------------------------------------------------------------------

def test_transposed_torch_and_cai_views_read_as_layout_t(monkeypatch):
    monkeypatch.setattr(launch, "pointer_device", lambda pointer: 0)
    A, B = read_torch(transposed_tensor(3, 4)), read_torch(FakeTensor((4, 5)))
    assert A.strides == (4, 12)
    assert check_product(A, B) == (3, 5, 4, "float32", "TN")
    A, B = read_cai(cai((3, 4), (16, 4))), read_cai(cai((4, 5), (4, 16)))
    assert check_product(A, B) == (3, 5, 4, "float32", "NT")
    assert check_product(read_cai(cai((3, 4), (4, 12))), read_cai(cai((4, 5), (4, 16))))[4] == "TT"


@pytest.mark.parametrize("shape,strides", [((1, 5), (4, 4)), ((1, 5), (20, 4)), ((5, 1), (4, 4)), ((5, 1), (4, 20))])
def test_a_single_row_or_column_is_either_layout_so_reads_as_n(shape, strides):
    A = Operand(1, shape, strides, np.dtype("float32"), 0)
    B = Operand(2, (shape[1], 3), None, np.dtype("float32"), 0)
    assert check_product(A, B)[4] == "NN"


def test_other_strides_are_refused_naming_the_operand_and_the_layouts():
    A = Operand(1, (4, 6), (48, 8), np.dtype("float32"), 0)  # every other column
    B = Operand(2, (6, 2), None, np.dtype("float32"), 0)
    with pytest.raises(OperandError, match=r"^A has strides \(48, 8\) for shape \(4, 6\); matmul takes C-contiguous, "
                                           r"or the transpose of a C-contiguous array \(layouts N and T\)"):
        check_product(A, B)
    C = Operand(3, (4, 2), (4, 16), np.dtype("float32"), 0)  # C transposed: the kernels write C-contiguous C only
    with pytest.raises(OperandError, match="C is not C-contiguous"):
        check_product(Operand(1, (4, 6), None, np.dtype("float32"), 0), B, C)


@pytest.mark.parametrize("m,n,k,bits", [(65535, 65536, 1, 32), (65536, 16, 65537, 64), (16, 65537, 65536, 64),
                                        (65536, 65536, 1, 64), (2**20, 8, 2**12, 64), (5_000_000, 16, 16, 32)])
def test_operands_take_the_offset_width_their_size_needs_and_are_not_refused(m, n, k, bits):
    assert offset_bits_for(m, n, k) == bits
    A = Operand(1, (m, k), None, np.dtype("float32"), 0)
    B = Operand(2, (k, n), None, np.dtype("float32"), 0)
    assert check_product(A, B) == (m, n, k, "float32", "NN")  # no longer refused


def test_memory_shapes_are_the_stored_arrays():
    assert memory_shapes(3, 5, 4, "NN") == [(3, 4), (4, 5), (3, 5)]
    assert memory_shapes(3, 5, 4, "TN") == [(4, 3), (4, 5), (3, 5)]
    assert memory_shapes(3, 5, 4, "NT") == [(3, 4), (5, 4), (3, 5)]
    assert memory_shapes(3, 5, 4, "TT") == [(4, 3), (5, 4), (3, 5)]


# The driver path's plan ------------------------------------------------------------------

def test_a_plan_packs_the_memory_shapes_and_builds_for_the_layout_and_offsets(monkeypatch):
    asked = []
    entry = types.SimpleNamespace(key="k", cubin=b"", name="f", dynamic_shared=64 * 1024, tile=(64, 16), splits=1,
                                  workers_per_sm=0, adds=False, block=(128,), bias=False)

    def find_entry(gpu, problem, deterministic=False, wait=True, bias=False):
        asked.append((*problem.shape, problem.dtype, problem.layout))
        return front.Served(Config.of("vector", {}), entry)

    monkeypatch.setattr(front, "find_entry", find_entry)
    memos.clear()
    monkeypatch.setattr(launch, "load", lambda cubin, name, shared: launch.LoadedKernel(None, "k", shared))
    monkeypatch.setattr(launch.LoadedKernel, "opt_in", lambda self, dev: None)
    device = types.SimpleNamespace(enter=lambda: None, leave=lambda previous: None, ordinal=0)
    plan, _ = front._plan(device, None, Problem(H100, "float32", 5_000_000, 16, 16, "TN"), front.CallOptions())
    assert asked == [(5_000_000, 16, 16, "float32", "TN")]
    words, slots = launch.pack_arguments([(16, 5_000_000), (16, 16), (5_000_000, 16)], 4)
    assert (plan.words, plan.slots) == (words, slots)
    assert plan.words[5:9] == [16, 5_000_000, 20_000_000, 4]  # A as stored: 16 rows of 5,000,000
    assert plan.grid == (78125, 1, 1) and plan.shared == 64 * 1024 and plan.zero_words == 0
    streamed = types.SimpleNamespace(**{**vars(entry), "workers_per_sm": 2, "adds": True})
    device.attribute = {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132}.get
    plan = front.entry_plan(device, streamed, (5_000_000, 16, 16), "float32", "TN")
    assert plan.grid == (264, 1, 1) and plan.zero_words == 5_000_000 * 16  # stream-K: 2 blocks per SM, C zeroed


def test_a_few_rows_past_whole_tile_rows_are_peeled_where_their_tile_row_is_a_large_share():
    tile = {"bm": 64}
    assert [peeled_rows(m, tile) for m in (65, 129, 257, 260, 513)] == [1, 1, 1, 4, 1]
    assert peeled_rows(261, tile) == 0  # more than BM / 16 rows
    assert peeled_rows(1025, tile) == 0  # 16 tile rows: the 17th is a small share
    assert [peeled_rows(m, tile) for m in (64, 256, 33, 1)] == [0, 0, 0, 0]  # whole tile rows, or one tile
    assert peeled_rows(257, tile, "NT") == 1 and peeled_rows(257, tile, "TN") == 0  # A's rows must be rows in memory
    assert peeled_rows(129, {"bm": 128}) == 1 and peeled_rows(33, {"bm": 32}) == 0 and peeled_rows(257, {"tpb": 16}) == 0
    # a swapped wgmma tile's rows of C are its bn (kernels.wgmma_space.c_tile)
    assert peeled_rows(65, {"bm": 128, "bn": 64, "swap": 1}) == 1 and peeled_rows(65, {"bm": 128, "bn": 64}) == 0


def test_a_peeled_plan_launches_the_first_rows_then_the_rest_on_their_rows_of_a_and_c(monkeypatch):
    entries = {257: types.SimpleNamespace(key="main", cubin=b"", name="f", dynamic_shared=0, tile=(64, 128), splits=1,
                                          workers_per_sm=0, adds=False, block=(128,), bias=False),
               1: types.SimpleNamespace(key="rest", cubin=b"", name="g", dynamic_shared=0, tile=(16, 128), splits=16,
                                        workers_per_sm=0, adds=True, block=(64,), bias=False)}
    configs = {257: Config.of("vector", {"bm": 64}), 1: Config.of("splitk", {"bm": 16, "splits": 16})}
    monkeypatch.setattr(front, "find_entry", lambda gpu, problem, deterministic=False, wait=True, bias=False:
                        front.Served(configs[problem.m], entries[problem.m]))
    memos.clear()
    monkeypatch.setattr(launch, "load", lambda cubin, name, shared: launch.LoadedKernel(None, name, shared))
    launched = []
    monkeypatch.setattr(launch.Plan, "launch",
                        lambda plan, a, b, c, stream, bias=0: launched.append((plan.kernel, a, b, c, stream)))
    device = types.SimpleNamespace(enter=lambda: None, leave=lambda previous: None, ordinal=0)
    m, n, k = 257, 5003, 1031
    plan, served = front._plan(device, None, Problem(H100, "float32", m, n, k), front.CallOptions())
    assert isinstance(plan, launch.RowParts) and served.config == configs[257]
    (main, *_), (rest, *_) = plan.parts
    assert main.words == launch.pack_arguments([(256, k), (k, n), (256, n)], 4)[0] and main.grid == (4 * 40, 1, 1)
    assert rest.words == launch.pack_arguments([(1, k), (k, n), (1, n)], 4)[0] and rest.grid == (40, 16, 1)
    assert (main.zero_words, rest.zero_words) == (0, n)  # the rest adds into its own row of C alone
    plan.launch(1000, 2000, 3000, 7)
    assert launched == [("f", 1000, 2000, 3000, 7), ("g", 1000 + 256 * k * 4, 2000, 3000 + 256 * n * 4, 7)]


def test_find_entry_remembers_and_builds_per_layout_offset_width_and_alignment(monkeypatch, tmp_path):
    built = []
    monkeypatch.setattr(cubins, "get", lambda key, root=None: built.append(key) or "entry")
    gpu = autotune.backends.Device(H100, "9.0", 132)
    assert front.find_entry(gpu, Problem(H100, "float32", 65536, 16, 65537, "NT")).entry == "entry"
    front.find_entry(gpu, Problem(H100, "float32", 8, 8, 8, "TT"))
    front.find_entry(gpu, Problem(H100, "float64", 8, 8, 6))  # A's rows of 6 doubles: 48 bytes; B's of 8 doubles
    front.find_entry(gpu, Problem(H100, "float32", 8, 7, 9))  # A's rows of 9 floats, B's and C's of 7
    assert [(key.layout, key.offset_bits, key.unaligned) for key in built] == [
        ("NT", 64, "AB"), ("TT", 32, ""), ("NN", 32, ""), ("NN", 32, "ABC")]  # NT: A's rows of 65537, B's of 65537
    assert shapes.recall(Problem(H100, "float32", 8, 8, 8, "TT")) is not None
    assert shapes.recall(Problem(H100, "float32", 8, 8, 8)) is None


def test_store_keys_differ_by_layout_offset_bits_and_alignment():
    base = cubins.BuildKey(Config.of("vector", {"bm": 64}), "float32", Arch(9, 0))
    keys = {cubins.entry_key(cubins.key_parts(replace(base, layout=layout, offset_bits=bits, unaligned=rows)))
            for layout in kernels.LAYOUTS for bits in (32, 64) for rows in ("", "A", "B", "AB", "ABC")}
    assert len(keys) == 40
    assert cubins.key_parts(base)["layout"] == "NN" and cubins.key_parts(base)["offset_bits"] == 32
    assert cubins.key_parts(base)["unaligned"] == ""


def test_unaligned_rows_name_the_operands_whose_rows_miss_16_byte_multiples():
    assert unaligned_for(64, 64, 64, "NN", "float32") == ""
    assert unaligned_for(64, 64, 63, "NN", "float32") == "A"  # A: 64 x 63; B: 63 x 64
    assert unaligned_for(64, 63, 64, "NN", "float32") == "BC"  # B: 64 x 63; C: 64 x 63
    assert unaligned_for(64, 63, 64, "NT", "float32") == "C"  # B stored as 63 x 64
    assert unaligned_for(63, 64, 64, "TN", "float32") == "A"  # A stored as 64 x 63
    assert unaligned_for(64, 64, 63, "TT", "float32") == "B"  # B stored as 64 x 63
    assert unaligned_for(64, 64, 6, "NN", "float64") == "" and unaligned_for(64, 64, 6, "NN", "float32") == "A"
    assert unaligned_for(64, 64, 3, "NN", "float64") == "A" and unaligned_for(64, 64, 3, "NN", "int32") == "A"


# The cache, records and studies ------------------------------------------------------------

def row(layout=None, pad=0, shape=(256, 256, 256), gflops=100.0):
    m, n, k = shape
    found = Row(device=H100, cc="9.0", sm_count=132, dtype="float32", m=m, n=n, k=k, family="shared",
                 params={"tpb": 8, "pad": pad}, gflops=gflops, source_hash=kernels.source_hash("shared"))
    return found if layout is None else replace(found, layout=layout)


def test_an_older_cache_gains_the_layout_column_in_its_key(isolated_cache):
    isolated_cache.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(isolated_cache)
    old.execute("CREATE TABLE best (device TEXT, dtype TEXT, m INTEGER, n INTEGER, k INTEGER, family TEXT, params TEXT, "
                "gflops FLOAT, sm_count INTEGER, PRIMARY KEY (device, dtype, m, n, k))")
    old.execute("INSERT INTO best VALUES ('GPU', 'float32', 8, 8, 8, 'shared', '{\"tpb\": 8, \"pad\": 0}', 1.0, 132)")
    old.commit()
    old.close()
    cache = Cache()
    assert [(r.m, r.layout, r.sm_count) for r in cache.rows()] == [(8, "NN", 132)]
    assert cache.record(replace(row("TN"), device="GPU", m=8, n=8, k=8))  # another key, not a faster row
    assert [r.layout for r in cache.rows()] == ["NN", "TN"]
    assert cache.get(Problem("GPU", "float32", 8, 8, 8, "TN")).layout == "TN"
    assert Cache().table.pks == ["device", "dtype", "m", "n", "k", "layout", "precision"]  # opened again: nothing to migrate


def test_records_carry_the_layout_and_rows_without_one_are_nn(tmp_path):
    Cache().merge([row(), row("TT", pad=1)])
    assert {(r.layout, r.params["pad"]) for r in Cache().rows()} == {("NN", 0), ("TT", 1)}
    with pytest.raises(RecordsError, match="layout is invalid \\('XY'\\)"):
        validate_records([{**row().as_dict(), "layout": "XY"}])
    out = tmp_path / "records.json"
    autotune.store.records.promote([row(), row("TT", pad=1)], out=out)
    written = json.loads(out.read_text())
    assert ["layout" in r for r in written] == [False, True]  # NN rows stay as the shipped files have them


def test_study_names_hold_a_layout_other_than_nn_and_the_space():
    tag = f":space-{space_hash()}"
    assert study_name(Problem("NVIDIA H200", "float32", 8, 9, 10)) == "mmtune:NVIDIA H200:float32:8x9x10" + tag
    name = study_name(Problem("NVIDIA H200", "float32", 8, 9, 10, "TN"))
    assert name == "mmtune:NVIDIA H200:float32:8x9x10:TN" + tag
    assert parse_study_name(name) == ("NVIDIA H200", "float32", (8, 9, 10), "TN")
    assert parse_study_name("mmtune:NVIDIA H200:float32:8x9x10") == ("NVIDIA H200", "float32", (8, 9, 10), "NN")


def test_a_changed_space_names_another_study(monkeypatch):
    """After an upgrade that changes a family's space, tuning starts a new study beside the old one
    (Optuna cannot resume a study over another space)."""
    before = study_name(Problem("NVIDIA H200", "float32", 8, 9, 10))
    vector = kernels.family("vector")
    monkeypatch.setitem(kernels.FAMILIES, "vector", dataclasses.replace(vector, space={**vector.space, "stages": [1, 2]}))
    assert study_name(Problem("NVIDIA H200", "float32", 8, 9, 10)) != before


# lookup's transfer rule ----------------------------------------------------------------------

@pytest.fixture
def pretend_h100(monkeypatch):
    monkeypatch.setenv("MMTUNE_PRETEND_GPU", f"{H100};9.0;132")
    monkeypatch.setattr(autotune.store.records, "measured_tables", lambda: [])  # rows alone decide here
    memos.clear()


def ship(monkeypatch, *rows):
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [
        r for r in rows if device in (None, r.device) and dtype in (None, r.dtype)])
    memos.clear()


def test_lookup_prefers_rows_of_the_layout_then_nn_rows(monkeypatch, pretend_h100):
    ship(monkeypatch, row(pad=1, gflops=1.0), row("TN", pad=2, gflops=0.5), row("TT", pad=0, shape=(256, 256, 300)))
    served = {layout: autotune.lookup(256, 256, 256, layout=layout) for layout in kernels.LAYOUTS}
    assert {layout: (c.config["pad"], c.tuned_layout) for layout, c in served.items()} == {
        "NN": (1, "NN"), "TN": (2, "TN"), "NT": (1, "NN"), "TT": (1, "NN")}  # an exact row beats a nearby one
    assert autotune.lookup(256, 256, 300, layout="TT").config["pad"] == 0
    ship(monkeypatch, row("TN", pad=2))
    assert autotune.lookup(256, 256, 256).source == "default"  # a TN config is not moved to other layouts
    with pytest.raises(OperandError, match="unknown layout XY"):
        autotune.lookup(256, 256, 256, layout="XY")


def test_lookup_and_best_cli_show_the_layout(monkeypatch, pretend_h100):
    from autotune.cli import app

    ship(monkeypatch, row("TN", pad=2))
    result = CliRunner().invoke(app, ["lookup", "--m", "256", "--n", "256", "--k", "256", "--layout", "tn"])
    assert result.exit_code == 0, result.output
    assert "tuned for 256x256x256 TN (distance 0.00)" in result.stdout
    result = CliRunner().invoke(app, ["lookup", "--m", "256", "--n", "256", "--k", "256", "--layout", "XT"])
    assert result.exit_code == 2 and "unknown layout 'XT'; known: NN, NT, TN, TT" in result.output
    Cache().merge([Row.of(r) for r in [row("TT")]])
    result = CliRunner().invoke(app, ["best", "--layout", "TT", "--json"])
    assert [r["layout"] for r in json.loads(result.stdout)] == ["TT"]
    assert CliRunner().invoke(app, ["best", "--layout", "NN", "--json"]).stdout.strip() == "[]"


# Measuring and tuning a layout -------------------------------------------------------------

@pytest.mark.parametrize("layout", kernels.LAYOUTS)
def test_inputs_are_stored_as_the_layout_says_and_verified_against_the_logical_product(layout, rng):
    A, B = random_inputs(5, 7, 3, "float32", rng, layout)
    assert A.shape == (5, 3) and B.shape == (3, 7)
    assert (A.flags.f_contiguous, B.flags.f_contiguous) == (layout[0] == "T", layout[1] == "T")
    config = kernels.family("shared").default
    assert verify(kernels.build("shared", config, "float32", layout), 9, 11, 13, rng).ok
    wrong = "NN" if layout != "NN" else "TT"  # inputs stored for another layout than the kernel's fail (square: in bounds)
    assert not verify(dataclasses.replace(kernels.build("shared", config, "float32", layout), layout=wrong), 9, 9, 9,
                      rng).ok


def test_tune_a_layout_names_its_study_and_row_by_it():
    from autotune.tune.replay import Replay
    from autotune.tune.tuner import TuneRequest, TuneError, tune

    result = tune(TuneRequest(12, 10, 8, trials=3, families=["shared"], jobs=1, layout="TN"), Replay(default=7.0),
                  show_progress=False)
    device = result.study_name.split(":")[1]  # "simulator", or the GPU's name
    assert result.study_name == study_name(Problem(device, "float32", 12, 10, 8, "TN", "ieee"), narrowed=True) and result.row.layout == "TN"
    assert [r.layout for r in Cache().rows()] == ["TN"]
    with pytest.raises(TuneError, match="unknown layout 'NX'"):
        tune(TuneRequest(12, 10, 8, layout="NX"), Replay(), show_progress=False)


# matmul on transposed views (the simulator: Numba's dispatcher) -----------------------------

#: on a GPU, Numba's `.T` of a device array launches a transpose into a new C-contiguous array; on
#: the simulator it is a view, as PyTorch's and CuPy's are everywhere (tests/test_gpu_calls.py)
NUMBA_VIEWS = pytest.mark.skipif(ON_GPU, reason="Numba's .T of a device array is a copy on a GPU")


@NUMBA_VIEWS
@pytest.mark.parametrize("layout", kernels.LAYOUTS)
@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 9, 6), (33, 17, 1)])
def test_matmul_reads_transposed_numba_views_in_place(layout, shape, rng):
    A, B = random_inputs(*shape, "float32", rng, layout)
    dA = cuda.to_device(A.T).T if layout[0] == "T" else cuda.to_device(A)
    dB = cuda.to_device(B.T).T if layout[1] == "T" else cuda.to_device(B)
    C = autotune.matmul(dA, dB).copy_to_host()
    assert relative_error(C, reference(A, B)) <= error_bound("float32", shape[2])
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)
    (plan,) = MEMOS.table("call.numba_plans").values()
    single = {"A": shape[0] == 1 or shape[2] == 1, "B": shape[2] == 1 or shape[1] == 1}
    expected = ("N" if single["A"] else layout[0]) + ("N" if single["B"] else layout[1])  # both layouts at once: N
    assert plan.layout == plan.kernel.layout == expected


def test_numpy_operands_of_any_layout_are_copied_for_the_nn_kernel(rng):
    A, B = random_inputs(6, 4, 5, "float32", rng, "TT")
    C = autotune.matmul(A, B)
    assert relative_error(C, reference(A, B)) <= error_bound("float32", 5)
    assert {kernel.layout for kernel in MEMOS.table("select.kernels").values()} == {"NN"}


@NUMBA_VIEWS
def test_a_transposed_out_is_refused():
    dA, dB = cuda.to_device(np.ones((3, 4), np.float32)), cuda.to_device(np.ones((4, 5), np.float32))
    with pytest.raises(OperandError, match="C is not C-contiguous"):
        autotune.matmul(dA, dB, out=cuda.to_device(np.ones((5, 3), np.float32)).T)
