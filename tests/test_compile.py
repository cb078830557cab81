"""Every family's configs that the restriction function accepts compile for sm_90 on the CPU, and
those the space offers older architectures compile for them.

Compiling needs real numba-cuda (NVVM + nvJitLink from the cu13 wheels), not the simulator the
rest of the suite runs under, so the check runs in a child process with the simulator off.
"""

import json
import os
import subprocess
import sys

import pytest

import kernels
from autotune.space.configs import families_for
from kernels.dmma import warp_tiles
from kernels.warp_mma import SHAPES, counts

#: configs compiled per family in its first dtype (float32; dmma: float64), and in each other one;
#: `python -m pytest -m sweep` compiles SWEEP_SAMPLE of every family in every dtype
SAMPLES = {"naive": (1, 1), "shared": (1, 1), "register": (1, 1), "vector": (2, 1), "splitk": (1, 1), "streamk": (1, 1),
           "dmma": (2, 0), "tf32x3": (2, 0), "gemv": (1, 1), "wgmma": (1, 0)}
SWEEP_SAMPLE = 40
CHILD = """
import json, sys
import kernels
from autotune.space.configs import DeviceLimits, sample_configs
from kernels.resources import HOPPER, link, ltoir, parse_report
family, dtype, count, part, parts = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
entry = kernels.family(family)
# every GPU's 48 KB of shared memory where the family's default fits in it, else an H100's; sm_90a
# for a family whose instructions exist there alone (wgmma), else sm_90
limits = DeviceLimits() if entry.restrict(entry.default, dtype, DeviceLimits()) is None else DeviceLimits.for_cc("9.0")
target = entry.oldest_arch(dtype) if len(entry.oldest_arch(dtype) or ()) == 3 else HOPPER
configs = sample_configs(family, dtype, limits, count, seed=hash((family, dtype)) % 1000)[part::parts]
for config in configs:
    kernel = kernels.build(family, config, dtype)
    try:  # compiled once as it runs (link-time optimized): the assembler's report and the PTX it assembled
        code = ltoir(kernel, target)
        resources = parse_report(link(code, target, family)[1], target)
        text = link(code, target, family, output="ptx")[0].decode()
        error = resources.problem(kernel.threads, limits)
    except Exception as failure:  # noqa: BLE001 - any compiler failure is this config's verdict
        resources, text, error = None, "", f"{type(failure).__name__}: {failure}"
    print(json.dumps({"config": config, "resources": resources and resources.as_dict(), "error": error,
                      "mma": text.count("mma.sync.aligned."),
                      "tf32_mma": text.count(f"mma.sync.aligned.{config.get('mma')}.row.col.f32.tf32.tf32.f32"),
                      "tf32_splits": text.count("setp.lt.f32 %near"), "dynamic_shared": kernel.dynamic_shared,
                      "wgmma": text.count("wgmma.mma_async.sync.aligned.m64n"),
                      "vector_loads": text.count("ld.shared.v"), "global_vector_loads": text.count("ld.global.v"),
                      "streamed_loads": text.count("ld.global.nc.L1::no_allocate.v"),
                      "atomic_adds": text.count("red.global.add") + text.count("atom.global.add"),
                      "scalar_shared_loads": sum(text.count(f"ld.shared.{t}") for t in ("f32", "f64", "u32", "b32"))}))
"""


def compile_in_child(family: str, dtype: str, count: int) -> list[dict]:
    """Compile `count` sampled configs: a sweep's split over one child process per CPU core, a few
    in one child (the test run keeps every core busy already)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONHASHSEED"] = "0"
    parts = min(count // 8 or 1, os.cpu_count() or 1)
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, family, dtype, str(count), str(part), str(parts)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for part in range(parts)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        results += [json.loads(line) for line in out.splitlines()]
    return results


FAMILY_DTYPES = [(f, d) for f in kernels.FAMILIES for d in kernels.DTYPES if f in families_for(d)]
#: the default run compiles every family in its first dtype (float32; dmma: float64); its other
#: dtypes' builds (the same code paths in other arithmetic) compile under `python -m pytest -m long`,
#: which keeps CI within its minutes
FIRST_DTYPES = {f: next(d for g, d in FAMILY_DTYPES if g == f) for f, _ in FAMILY_DTYPES}
DEFAULT_FAMILY_DTYPES = [(f, d) if d == FIRST_DTYPES[f] else pytest.param(f, d, marks=pytest.mark.long)
                         for f, d in FAMILY_DTYPES]


def sample_size(family: str, dtype: str) -> int:
    first, other = SAMPLES.get(family, (1, 1))
    return first if dtype == FIRST_DTYPES[family] else other


@pytest.mark.parametrize("family,dtype", DEFAULT_FAMILY_DTYPES)
def test_accepted_configs_compile_for_sm90(family, dtype):
    check_compiled(family, dtype, sample_size(family, dtype))


@pytest.mark.sweep
@pytest.mark.parametrize("family,dtype", FAMILY_DTYPES)
def test_many_accepted_configs_compile_for_sm90(family, dtype):
    check_compiled(family, dtype, SWEEP_SAMPLE)


def check_compiled(family: str, dtype: str, count: int) -> None:
    results = compile_in_child(family, dtype, count)
    assert len(results) == count
    failures = [r for r in results if r["error"]]
    assert not failures, failures
    if family in ("vector", "splitk", "streamk"):
        assert all(r["vector_loads"] and not r["scalar_shared_loads"] for r in results), results
        assert all(bool(r["atomic_adds"]) == (family != "vector") for r in results), results
    if family == "gemv":  # B read 16 bytes a load where its rows are aligned, allocating no L1 where streamed;
        # adds only when K is split
        assert all(bool(r["streamed_loads"]) == r["config"]["streamed"] for r in results), results
        assert all(r["global_vector_loads"] + r["streamed_loads"] for r in results), results
        assert all(bool(r["atomic_adds"]) == (r["config"]["splits"] > 1) for r in results), results
    if family == "dmma":  # the instructions PTX accepts for sm_90, with K split through atomic adds
        assert all(r["mma"] and bool(r["atomic_adds"]) == (r["config"]["splits"] > 1) for r in results), results
    if family == "tf32x3":  # TF32 instructions of the config's shape alone, on operands split into TF32 parts
        assert all(r["tf32_mma"] == r["mma"] > 0 and r["tf32_splits"] for r in results), results
        assert all(bool(r["atomic_adds"]) == (r["config"]["splits"] > 1) for r in results), results
        assert any(r["config"]["splits"] > 1 for r in results) and any(r["config"]["splits"] == 1 for r in results)
        for r in results:  # per step of K and tile: three products, and each element read split once
            config = r["config"]
            steps, (tiles_m, tiles_n) = config["bk"] // SHAPES[config["mma"]][2], warp_tiles(config)
            a_count, b_count, _ = counts(config["mma"])
            loops = 2  # the k-loop without bounds tests and the one with them
            chunk = config.get("chunk", 1)  # one fragment set (kernels.dmma): a tile a pass of each loop
            assert r["mma"] == loops * steps * tiles_m * tiles_n * 3, r
            # and the first chunk, read ahead of the loops
            assert r["tf32_splits"] == (loops * steps + chunk) * (tiles_m * a_count + tiles_n * b_count), r
    if family == "wgmma":  # one K-tile's 12 instructions, A and B split in registers, K split through adds
        assert all(r["wgmma"] == 12 and r["tf32_splits"] and not r["mma"] for r in results), results
        assert all(bool(r["atomic_adds"]) == (r["config"]["splits"] > 1) for r in results), results
    for r in results:
        res = r["resources"]
        assert 0 < res["registers"] <= 255
        if family == "naive" or r["dynamic_shared"]:  # the report counts static shared memory alone
            assert res["shared_bytes"] == 0
        else:
            # the NN build's tiles: the mma.sync families pad theirs by layout, and size a config by its largest
            sizes = kernels.family(family).shared_bytes
            expected = sizes(r["config"], dtype, "NN") if family in ("dmma", "tf32x3") else sizes(r["config"], dtype)
            assert res["shared_bytes"] == expected, (r["config"], res)


PIPELINE_CHILD = """
import json
import re
import kernels
from kernels.resources import ptx
base = dict(bm=64, bn=64, bk=16, tm=8, tn=4, pad=4, stages=2, fragments=1, wide_fetch=False, async_copy=False)
variants = {f"{u}-{b}": dict(unroll=u, min_blocks=b) for u in (False, True) for b in (1, 2)}
variants["wide"] = dict(unroll=True, min_blocks=1, wide_fetch=True)
variants["fragments"] = dict(unroll=True, min_blocks=1, fragments=2)
variants["async"] = dict(unroll=True, min_blocks=1, wide_fetch=True, async_copy=True, stages=3)
unaligned = {"wide-AB": ("wide", "AB"), "async-B": ("async", "B"), "async-A": ("async", "A")}
out = {}
for name, (variant, rows) in {**{v: (v, "") for v in variants}, **unaligned}.items():
    kernel = kernels.build("vector", {**base, **variants[variant]}, "float32", unaligned=rows)
    text = ptx(kernel)
    out[name] = dict(built=kernel.unaligned, vector_loads=text.count("ld.shared.v4"),
                     min_blocks=".minnctapersm 2" in text,
                     wide_global_loads=text.count("ld.global.v4"), wide_shared_stores=text.count("st.shared.v4"),
                     global_loads=text.count("ld.global"), wide_copies=text.count("cp.async.cg.shared.global [%r"),
                     element_copies=text.count("cp.async.ca.shared.global [%r"), waits=text.count("cp.async.wait_group 1;"),
                     split_loads=len(re.findall(r"ld\\.global\\.f32\\s+%f\\d+, \\[%rd\\d+\\+12\\]", text)))
print(json.dumps(out))
"""


@pytest.mark.long  # ten builds of one family: python -m pytest -m long (the default run keeps CI within its minutes)
def test_pipeline_parameters_reach_the_compiled_code():
    """Both pipelines run two k-loops, one without bounds tests and then one with them, each with
    its own copy of the tile's code. unroll: BK steps of (TM + TN) / 4 vector loads each, written
    out (as many with two fragment sets); min_blocks=2: the PTX directive that makes ptxas keep a
    128-thread block within 256 registers per thread; wide_fetch: 16-byte global loads (A's 64x16
    and B's 16x64 tiles are 2 + 2 of them per thread) and B's 16-byte shared stores, for the first
    tile before the loops and the next one in each loop; async_copy: no global loads;
    A's 8 elements per thread copied one by one and B's as 2 16-byte copies, in the prologue and
    in two loops: one without bounds tests, then one with them (where both paths, inside and at
    the edges, are written out for A and for B's unaligned fallback of 8 elements), each loop
    with its own written-out tile and waiting for all but the newest of 3 - 1 tiles. Built for
    unaligned rows, operands fetched through registers read each group of 4 inside the matrix as
    4 scalar loads at immediate offsets from one address, in all three places, and B keeps its
    16-byte shared stores; copied asynchronously, the loop without tests copies those operands
    one element at a time (8 of B's per thread) and keeps 16-byte copies for the others; an
    operand the pipeline never moves 16 bytes at a time (A copied asynchronously) changes
    nothing."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", PIPELINE_CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    per_step = (8 + 4) // 4
    assert out["False-1"]["vector_loads"] == 2 * per_step  # one step's loads, in each loop
    assert out["True-1"]["vector_loads"] == out["fragments"]["vector_loads"] == 2 * 16 * per_step
    assert [out[f"{u}-{b}"]["min_blocks"] for u in (False, True) for b in (1, 2)] == [False, True, False, True]
    assert out["True-1"]["wide_global_loads"] == out["True-1"]["wide_shared_stores"] == 0
    assert (out["wide"]["wide_global_loads"], out["wide"]["wide_shared_stores"]) == (3 * (2 + 2), 3 * 2)
    copies = out["async"]
    assert (copies["global_loads"], copies["wide_shared_stores"], copies["waits"]) == (0, 0, 2)
    assert copies["vector_loads"] == 2 * 16 * per_step
    checked = 2 * 8 + 2 * 8  # A inside and at the edges; B's fallback inside and at the edges
    assert (copies["wide_copies"], copies["element_copies"]) == (3 * 2, 2 * checked + 8)
    edges = 2 * (8 + 8)  # A's and B's elements at the edges, in the two checked places
    assert out["wide"]["global_loads"] == 3 * (2 + 2) + 2 * edges  # and the unaligned fallback inside
    split = out["wide-AB"]
    assert (split["built"], split["vector_loads"]) == ("AB", out["wide"]["vector_loads"])
    assert (split["wide_global_loads"], split["wide_shared_stores"]) == (0, 3 * 2)
    assert (split["global_loads"], split["split_loads"]) == (3 * (8 + 8) + edges, 3 * (2 + 2))
    narrow = out["async-B"]
    assert (narrow["built"], narrow["wide_copies"], narrow["element_copies"]) == ("B", 2 * 2, 2 * checked + 8 + 8)
    assert {**out["async-A"], "built": None} == {**copies, "built": None} and out["async-A"]["built"] == ""


OFFSETS_CHILD = """
import json
import kernels
from kernels.resources import HOPPER, link, ltoir, parse_report, ptx
config = dict(kernels.family("vector").default, async_copy=True, stages=3)
out = {}
for bits in (32, 64):
    kernel = kernels.build("vector", config, "float32", "TN", bits)
    code = ltoir(kernel)  # compiled once as it runs: the linked PTX and the assembler's report
    text = link(code, HOPPER, "vector", output="ptx")[0].decode()
    out[bits] = dict(opaque_offsets=text.count("mov.u32"), wide_multiplies=text.count("mul.lo.s64") + text.count("mad.lo.s64"),
                     spills=parse_report(link(code, HOPPER, "vector")[1]).spill_stores)
deep = kernels.build("vector", dict(config, bm=64, bn=64, bk=32, tm=4, tn=4, stages=4), "float32")
text = ptx(deep)
out["dynamic"] = dict(bytes=deep.dynamic_shared, extern=".extern .shared" in text,
                      shared_vector_loads=text.count("ld.shared.v4"), generic_vector_loads=text.count("ld.v4"))
print(json.dumps(out))
"""


@pytest.mark.long  # several builds of one family: python -m pytest -m long
def test_offset_width_and_dynamic_shared_memory_reach_the_compiled_code():
    """64-bit offsets: no 32-bit offset copies, 64-bit index arithmetic instead, and no spills;
    tiles in dynamic shared memory are still read with shared-memory vector loads."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", OFFSETS_CHILD], env=env, capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    narrow, wide = found["32"], found["64"]
    assert narrow["opaque_offsets"] > 0 and wide["opaque_offsets"] < narrow["opaque_offsets"]
    assert wide["wide_multiplies"] > narrow["wide_multiplies"]
    assert narrow["spills"] == wide["spills"] == 0
    dynamic = found["dynamic"]
    assert dynamic["bytes"] > 48 * 1024 and dynamic["extern"]
    assert dynamic["shared_vector_loads"] > 0 and dynamic["generic_vector_loads"] == 0


GEMV_LOADS_CHILD = """
import json
import kernels
from kernels.resources import ptx
out = {}
for layout in ("NT", "TT"):
    for dtype in ("float32", "float64"):
        for on in (False, True):
            config = {"rows": 4, "cols": 16, "threads": 256, "unroll": 1, "splits": 1, "streamed": on, "a_vectors": on}
            text = ptx(kernels.build("gemv", config, dtype, layout))
            out[f"{layout} {dtype} {on}"] = dict(streamed=text.count("ld.global.nc.L1::no_allocate.v"),
                                                 cached=text.count("ld.global.v"))
print(json.dumps(out))
"""


def test_gemv_streams_b_and_reads_a_as_vectors_where_its_flags_say():
    """`streamed` turns B's vector loads into streamed ones, and `a_vectors` adds A's vector loads
    (the only cached vector loads left once B streams) in NT and TT alike."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", GEMV_LOADS_CHILD], env=env, capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    for layout in ("NT", "TT"):
        for dtype in ("float32", "float64"):
            off, on = found[f"{layout} {dtype} False"], found[f"{layout} {dtype} True"]
            assert off["streamed"] == 0 and off["cached"] > 0, (layout, dtype, off)  # B's loads, A's scalars
            assert on["streamed"] > 0 and on["cached"] > 0, (layout, dtype, on)  # B streamed, A's vectors


WRITE_BACK_CHILD = """
import json
import kernels
from kernels.resources import HOPPER, link, ltoir, parse_report
tall = dict(kernels.family("vector").default, tm=16, tn=8, min_blocks=2)
split = dict(kernels.family("splitk").default, min_blocks=1)
out = {}
for name, family, config, dtype, rows in (("tall", "vector", tall, "float32", ""), ("float32", "splitk", split, "float32", ""),
                                          ("unaligned", "splitk", split, "float32", "C"),
                                          ("tall-unaligned", "vector", tall, "float32", "C"),
                                          ("float64", "splitk", split, "float64", "C"), ("int32", "splitk", split, "int32", "")):
    kernel = kernels.build(family, config, dtype, unaligned=rows)
    code = ltoir(kernel)  # compiled once as it runs: the linked PTX and the assembler's report
    text = link(code, HOPPER, family, output="ptx")[0].decode()
    stack = parse_report(link(code, HOPPER, family)[1]).stack_bytes
    out[name] = dict(built=kernel.unaligned, stack=stack, wide_stores=text.count("st.global.v4"),
                     stores=text.count("st.global."), wide_adds=text.count("red.global.add.v4.f32"),
                     pair_adds=text.count("red.global.add.v2.f32"), adds=text.count("red.global.add."),
                     atomics=text.count("atom.global"))
print(json.dumps(out))
"""


@pytest.mark.long  # several builds of one family: python -m pytest -m long
def test_c_is_written_from_registers_and_split_products_added_16_bytes_at_a_time():
    """The write-back is straight-line code, so a 16x8 register tile's accumulators stay in
    registers (no stack frame) and go out as scalar stores; with K split, float32 groups of 4
    columns are one 4-lane `red` (and lanes one at a time at C's edges), float64 and int32 lanes
    one `red` each, and nothing reads an atomic's result back. Built for C's rows unaligned, a
    float32 group is one 4-lane `red`, two 2-lane ones, or a 2-lane one between two 1-lane ones, as
    its address allows; a kernel that stores C, or adds float64, is built as for aligned rows."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", WRITE_BACK_CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    tall = out["tall"]
    assert (tall["stack"], tall["wide_stores"], tall["adds"]) == (0, 0, 0) and tall["stores"] >= 16 * 8
    float32, float64, int32 = out["float32"], out["float64"], out["int32"]
    groups, lanes = 8 * 8 // 4, 8 * 8  # the default tile: 8x8 per thread, in groups of 4 columns
    assert float32["wide_adds"] == groups and float32["adds"] == groups + lanes
    assert (float64["wide_adds"], int32["wide_adds"]) == (0, 0)
    assert float64["adds"] == int32["adds"] == 2 * lanes  # the groups' lanes and the fallback's
    assert all(r["wide_stores"] == r["stores"] == r["atomics"] == 0 for r in (float32, float64, int32))
    unaligned = out["unaligned"]
    assert (unaligned["built"], unaligned["wide_adds"], unaligned["pair_adds"]) == ("C", groups, 2 * groups + groups)
    assert unaligned["adds"] == groups + 3 * groups + 2 * groups + lanes and unaligned["stack"] == 0
    assert {**out["tall-unaligned"], "built": "C"} == {**tall, "built": "C"} and out["tall-unaligned"]["built"] == ""
    assert float64["built"] == "" and float32["pair_adds"] == 0


PAIRED_STORES_CHILD = """
import json
import kernels
from kernels.resources import HOPPER, link, ltoir, parse_report
tile = {"mma": "m16n8k8", "bm": 128, "bn": 128, "bk": 16, "warps_m": 2, "warps_n": 4, "stages": 4, "splits": 1,
        "min_blocks": 1, "stored": "memory"}
out = {}
for name, family, config, dtype in (("elements", "dmma", tile, "float64"),
                                    ("pairs", "dmma", {**tile, "stores": "pairs"}, "float64"),
                                    ("split", "dmma", {**tile, "stores": "pairs", "splits": 2}, "float64"),
                                    ("float32", "tf32x3", {**tile, "stores": "pairs", "chunk": 2}, "float32")):
    code = ltoir(kernels.build(family, config, dtype))
    text = link(code, HOPPER, family, output="ptx")[0].decode()
    report = parse_report(link(code, HOPPER, family)[1])
    out[name] = dict(pairs=text.count("st.global.v2."), stores=text.count("st.global."), local=text.count(".local."),
                     stack=report.stack_bytes, spills=report.spill_stores)
print(json.dumps(out))
"""


def test_float64_pairs_of_c_go_out_as_16_byte_stores():
    """`stores` "pairs" writes a lane's two columns of each row of C as one 16-byte store, with the
    element stores kept for C of unaligned rows, and the accumulators still in registers (the
    write-back is straight-line code); a K split adds element by element, and float32 keeps its
    element stores (kernels.mma_epilogue)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", PAIRED_STORES_CHILD], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    per_lane = 128 * 128 // 256  # a lane's elements of the 128 x 128 tile
    assert out["elements"]["pairs"] == 0 and out["elements"]["stores"] == per_lane
    assert out["pairs"]["pairs"] == per_lane // 2 and out["pairs"]["stores"] == per_lane // 2 + per_lane
    assert out["split"]["pairs"] == out["float32"]["pairs"] == 0
    assert all(r["local"] == r["stack"] == r["spills"] == 0 for r in out.values()), out


ARCH_CHILD = """
import json, sys
from autotune.space.configs import GpuLimits, default_config, runs_on, sample_configs
from autotune.space.compile import compile_check
cc = sys.argv[1]
from kernels.rules import Arch
target, limits = Arch.of(cc).pair, GpuLimits.for_cc(cc)
served = [(family, dtype, c) for family, dtype, count in (("vector", "float32", 2), ("splitk", "float64", 1),
          ("dmma", "float64", 1), ("tf32x3", "float32", 1)) if runs_on(family, dtype, cc)
          for c in sample_configs(family, dtype, limits, count, seed=1)]
piped = {**default_config("vector"), "async_copy": True, "stages": 3}
for family, dtype, config in served + [("vector", "float32", piped), ("splitk", "float32", default_config("splitk"))]:
    (result,) = compile_check(family, [config], dtype, limits, target)
    print(json.dumps({"family": family, "config": config, "error": result.error}))
"""


#: both run with `-m long`: the instruction rule they confirm with the compiler is checked on the CPU by
#: test_space.py's test_configs_use_only_the_instructions_their_gpu_has in every run
@pytest.mark.long
@pytest.mark.parametrize("cc", ["7.5", "8.0"])
def test_what_a_gpu_of_an_older_architecture_is_offered_compiles_for_it(cc):
    """The configs the space allows a T4 (sm_75) or an A100 (sm_80) compile for it (the A100's
    include the tensor-core families), and what the space keeps from them would not: a cp.async
    pipeline on the T4, float32 split-K's 16-byte atomic adds on both."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    child = subprocess.run([sys.executable, "-c", ARCH_CHILD, cc], env=env, capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stderr[-3000:]
    *offered, piped, split = [json.loads(line) for line in child.stdout.splitlines()]
    assert {r["family"] for r in offered} == ({"vector", "splitk"} | ({"dmma", "tf32x3"} if cc == "8.0" else set()))
    assert not [r for r in offered if r["error"]], offered
    assert (piped["error"] is None) == (cc == "8.0"), piped
    assert "requires .target sm_90" in split["error"], split


SM90A_CHILD = """
import sys
from numba import cuda
from kernels.ptx import asm
from kernels.resources import link
from kernels.rules import Arch

fence = asm("wgmma.fence.sync.aligned;")

def probe():
    fence()

for cc in (Arch(9, 0, "a"), Arch(9, 0)):
    try:
        code, _ = cuda.compile(probe, (), device=False, abi="numba", cc=cc.target, output="ltoir")
        cubin, _ = link(bytes(code), cc.target, "probe")
        print(cc.sm, "ok", len(cubin))
    except Exception as failure:  # noqa: BLE001
        print(cc.sm, "refused", str(failure).replace(chr(10), " ")[:300])
"""


def test_an_arch_specific_instruction_compiles_for_sm_90a_and_not_for_sm_90():
    """wgmma needs the sm_90a target: NVVM for compute_90a and nvJitLink for sm_90a (the "a" kept
    through kernels.resources.link), while a plain sm_90 build refuses it."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    child = subprocess.run([sys.executable, "-c", SM90A_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    arch_specific, plain = child.stdout.splitlines()
    assert arch_specific.startswith("sm_90a ok") and int(arch_specific.split()[-1]) > 0, arch_specific
    assert plain.startswith("sm_90 refused") and "wgmma" in plain, plain


ADJACENT_CHILD = """
import json
import kernels
from kernels.resources import ptx
out = {}
for family, dtype, mma, stored in (("dmma", "float64", "m16n8k8", "k"), ("dmma", "float64", "m16n8k16", "k"),
                                  ("tf32x3", "float32", "m16n8k8", "k"), ("dmma", "float64", "m16n8k8", "memory")):
    config = {**kernels.family(family).default, "mma": mma, "bm": 64, "bn": 128, "bk": 16, "warps_m": 1,
              "warps_n": 4, "stages": 3, "stored": stored}
    text = ptx(kernels.build(family, config, dtype))
    kind = dtype[-2:]
    out[f"{family}-{mma}-{stored}"] = {"pairs": text.count(f"ld.shared.v2.f{kind}"), "scalars": text.count(f"ld.shared.f{kind}"),
                                       "element_copies": text.count("cp.async.ca.shared.global")}
print(json.dumps(out))
"""


def test_tf32x3_reads_k_major_rows_two_a_load_and_float64_each_element_alone():
    """TF32's split parts read a lane's k's of a K-major row two a load: per 16-deep tile of K, a warp of
    64 x 32 reads 4 tiles x 2 row halves of A and 4 columns of B, each (instruction K / 8) loads a step,
    in one loop (one fragment set, a tile a pass). float64 reads each element alone, from tiles of any
    layout, straight into the registers its instruction reads (kernels.mma_space.paired), in the loop
    with bounds tests and the one without (two tiles a pass where a tile is one chunk, kernels.dmma) and
    once ahead of them. Tiles as they lie in memory (NN: A along K, B along N) copy fewer elements one
    at a time (only tiles at C's edges do)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    child = subprocess.run([sys.executable, "-c", ADJACENT_CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    counts = json.loads(child.stdout)
    per_step = 4 * 2 + 4
    reads = 2 * 2 + 1  # float64's chunk reads: two loops of two a pass, and the first ahead of them
    split_reads = 2 * 1 + 1  # tf32x3's (one fragment set, a tile a pass): its one two-step chunk
    assert {name: (c["pairs"], c["scalars"]) for name, c in counts.items()} == {
        "dmma-m16n8k8-k": (0, reads * 2 * per_step), "dmma-m16n8k16-k": (0, reads * 4 * per_step),
        "tf32x3-m16n8k8-k": (split_reads * 2 * per_step, 0), "dmma-m16n8k8-memory": (0, reads * 2 * per_step)}
    assert counts["dmma-m16n8k8-memory"]["element_copies"] < counts["dmma-m16n8k8-k"]["element_copies"]


THREE_BLOCKS_CHILD = """
import json
import kernels
from autotune.space.guesses import small_c_guess
from autotune.space.configs import DeviceLimits, GpuLimits
from kernels.resources import compile_report
hopper = GpuLimits.of(DeviceLimits.for_cc("9.0"), "9.0", 132)
out = {}
for shape in ((2368, 2320, 240), (2367, 2321, 241)):  # the second built for unaligned rows
    for layout in ("NN", "NT", "TN", "TT"):
        config = small_c_guess(shape, "float64", hopper, layout=layout)
        kernel = kernels.build_for(config.family, config.params, "float64", shape, layout)
        report = compile_report(kernel)
        out[f"{layout} {shape}"] = {"threads": kernel.threads, "registers": report.registers, "built": kernel.unaligned,
                                    "spills": report.spill_stores + report.spill_loads,
                                    "tile": [config.params["bm"], config.params["bn"]]}
print(json.dumps(out))
"""


def test_the_small_tiers_64x64_tile_leaves_registers_for_three_blocks_an_sm_in_every_layout():
    """The third tier's 64x64 tile asks ptxas for three blocks an SM (min_blocks 3): in NT, and built for
    unaligned rows, it otherwise took the registers of two (docs/performance.md, step 65). Built for aligned
    rows it spills in no layout (TN's build for unaligned rows spills a few bytes, and ran faster)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", THREE_BLOCKS_CHILD], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert {report["built"] for report in out.values()} == {"", "AB"}
    for build, report in out.items():
        assert report["tile"] == [64, 64] and (report["built"] or report["spills"] == 0), (build, report)
        assert 3 * report["threads"] * report["registers"] <= 65536, (build, report)
