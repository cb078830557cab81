"""Every kernel family x dtype against a float64 reference, on odd shapes, into a poisoned output.

One file for the simulator and a GPU (MMTUNE_TEST_GPU=1): the simulator gets small shapes and small
tiles, a GPU the families' defaults and shapes that leave partial tiles at every edge.
"""

import dataclasses

import numpy as np
import pytest
from conftest import ON_GPU
from sampled import VARIANTS, property_configs, variant_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import cuda

import kernels
from kernels import intrinsics, warp_mma
from autotune.measure.measurement import (
    compare, poison_value, random_inputs, reference, relative_error, error_bound, stored,
)
from kernels.dmma import FIRST_TILE as DMMA_TILE
from kernels.tf32x3 import FIRST_TILE as TF32X3_TILE
from autotune.space.configs import DeviceLimits, families_for
from autotune.errors import OperandError
from autotune.call.operands import arrays_layout, check_shapes

DTYPES = list(kernels.DTYPES)

PIPELINED = {"unroll": True, "fragments": 2, "wide_fetch": True, "async_copy": False}
ASYNC = {**PIPELINED, "async_copy": True}

if ON_GPU:
    CONFIGS = {name: [entry.default] for name, entry in kernels.FAMILIES.items()}
    for name in ("vector", "splitk", "streamk"):
        CONFIGS[name].append({**kernels.FAMILIES[name].default, **PIPELINED})
        CONFIGS[name].append({**kernels.FAMILIES[name].default, **ASYNC, "stages": 3})
    CONFIGS["dmma"].append({**DMMA_TILE, "mma": "m16n8k4", "splits": 2})
    CONFIGS["dmma"].append({**DMMA_TILE, "mma": "m16n8k8", "splits": 2, "stored": "k"})
    CONFIGS["dmma"].append({**DMMA_TILE, "mma": "m16n8k8", "splits": 1, "stored": "memory"})
    CONFIGS["dmma"].append({**DMMA_TILE, "mma": "m16n8k8", "splits": 1, "stored": "memory", "stores": "pairs"})
    CONFIGS["tf32x3"].append({**TF32X3_TILE, "mma": "m16n8k8", "splits": 1, "stored": "memory"})
    CONFIGS["tf32x3"].append({**TF32X3_TILE, "mma": "m16n8k8", "splits": 2})
    CONFIGS["wgmma"].append({"bm": 128, "bn": 128, "stages": 4, "splits": 2, "min_blocks": 1, "producer": 0})
    CONFIGS["wgmma"].append({"bm": 128, "bn": 128, "stages": 3, "splits": 1, "min_blocks": 1, "producer": 1})
    CONFIGS["wgmma"].append({"bm": 128, "bn": 64, "stages": 4, "splits": 2, "min_blocks": 1, "producer": 2})
    SHAPES = [(1, 1, 1), (1, 1000, 1), (257, 129, 1), (513, 1021, 769), (1000, 1000, 1000), (1000, 1024, 996)]
    FAMILY_SHAPES = {}
else:
    # Small tiles keep the simulator (one Python thread per CUDA thread) fast.
    CONFIGS = {
        "naive": [{"block_x": 8, "block_y": 4}, {"block_x": 32, "block_y": 1}],
        "shared": [{"tpb": 8, "pad": 1}, {"tpb": 16, "pad": 0}],
        "register": [
            {"bm": 16, "bn": 32, "bk": 4, "tm": 2, "tn": 4, "pad": 1, "mapping": "strided", "prefetch": True},
            {"bm": 32, "bn": 16, "bk": 8, "tm": 4, "tn": 1, "pad": 0, "mapping": "contiguous", "prefetch": False},
        ],
        "vector": [
            {"bm": 32, "bn": 32, "bk": 8, "tm": 4, "tn": 4, "pad": 4, "stages": 2, "unroll": False, "fragments": 1,
             "wide_fetch": False, "async_copy": False, "min_blocks": 1},
            {"bm": 32, "bn": 64, "bk": 8, "tm": 8, "tn": 4, "pad": 0, "stages": 1, "min_blocks": 2, **PIPELINED},
            {"bm": 32, "bn": 32, "bk": 8, "tm": 4, "tn": 4, "pad": 4, "stages": 3, "min_blocks": 1, **ASYNC},
        ],
        # every instruction shape; a warp's tiles along rows and along columns; K split
        "dmma": [
            {"mma": "m16n8k8", "bm": 32, "bn": 32, "bk": 16, "warps_m": 2, "warps_n": 1, "stages": 3, "splits": 1,
             "min_blocks": 1},
            {"mma": "m8n8k4", "bm": 16, "bn": 32, "bk": 8, "warps_m": 1, "warps_n": 2, "stages": 2, "splits": 2,
             "min_blocks": 1},
            {"mma": "m16n8k16", "bm": 32, "bn": 16, "bk": 16, "warps_m": 1, "warps_n": 1, "stages": 2, "splits": 1,
             "min_blocks": 1},
            {"mma": "m16n8k4", "bm": 16, "bn": 32, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 4, "splits": 1,
             "min_blocks": 1},
            # tiles as they lie in memory, K split; K-major tiles; each read one element a load, by any instruction;
            # C's columns in pairs where its rows are aligned (a K split adds them one at a time)
            {"mma": "m16n8k8", "bm": 32, "bn": 32, "bk": 16, "warps_m": 2, "warps_n": 1, "stages": 3, "splits": 2,
             "min_blocks": 1, "stored": "memory", "stores": "pairs"},
            {"mma": "m16n8k16", "bm": 16, "bn": 16, "bk": 16, "warps_m": 1, "warps_n": 1, "stages": 2, "splits": 1,
             "min_blocks": 1, "stored": "k"},
            {"mma": "m16n8k4", "bm": 16, "bn": 16, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 2, "splits": 1,
             "min_blocks": 1, "stored": "memory", "stores": "pairs"},
        ],
        # both TF32 instruction shapes; one chunk of 2 steps and 2 chunks of 1 step per tile of K; a
        # warp's tiles along columns and along rows; K split; tiles as they lie in memory; 3 stages
        "tf32x3": [
            {"mma": "m16n8k8", "bm": 32, "bn": 16, "bk": 16, "warps_m": 2, "warps_n": 1, "stages": 2, "chunk": 2,
             "splits": 1, "min_blocks": 1},
            {"mma": "m16n8k4", "bm": 32, "bn": 16, "bk": 8, "warps_m": 1, "warps_n": 2, "stages": 2, "chunk": 1,
             "splits": 2, "min_blocks": 1},
            # tiles as they lie in memory, a lane's k's adjacent, K split
            {"mma": "m16n8k8", "bm": 16, "bn": 16, "bk": 16, "warps_m": 1, "warps_n": 1, "stages": 2, "chunk": 2,
             "splits": 2, "min_blocks": 1, "stored": "memory"},
            {"mma": "m16n8k8", "bm": 16, "bn": 8, "bk": 8, "warps_m": 1, "warps_n": 1, "stages": 3, "chunk": 1,
             "splits": 1, "min_blocks": 1},
        ],
        # one warpgroup a block (tests/test_wgmma.py runs two); the ring of raw tiles wrapping, K split
        "wgmma": [
            {"bm": 64, "bn": 64, "stages": 2, "splits": 1, "min_blocks": 1, "producer": 0},
            {"bm": 64, "bn": 64, "stages": 3, "splits": 2, "min_blocks": 1, "producer": 0},
        ],
        # K=19 in 4 splits of one 8-step each leaves the fourth split empty
        "splitk": [
            {"bm": 32, "bn": 32, "bk": 8, "tm": 4, "tn": 4, "pad": 4, "stages": 2, "min_blocks": 1, "splits": 4,
             **ASYNC},
            {"bm": 32, "bn": 32, "bk": 16, "tm": 8, "tn": 4, "pad": 0, "stages": 1, "unroll": False, "fragments": 1,
             "wide_fetch": True, "async_copy": False, "min_blocks": 2, "splits": 2},
        ],
        # B's rows (or columns) walked by 2 and 4 threads with 2 loads in flight, C's edge columns,
        # K's last partial group, and K split 2 ways (the second split empty at K=1)
        "gemv": [
            {"rows": 2, "cols": 16, "threads": 32, "unroll": 2, "splits": 1},
            {"rows": 4, "cols": 16, "threads": 64, "unroll": 2, "splits": 2},
        ],
        # as many blocks as the simulator's SMs (kernels.base.SIMULATED_SMS) times workers_per_sm: shares
        # that begin and end inside tiles, and (at 1x1x1) more blocks than k-steps
        "streamk": [
            {"bm": 16, "bn": 32, "bk": 8, "tm": 4, "tn": 4, "pad": 4, "stages": 3, "min_blocks": 1, "workers_per_sm": 3,
             **ASYNC},
            {"bm": 32, "bn": 16, "bk": 8, "tm": 4, "tn": 4, "pad": 0, "stages": 2, "unroll": False, "fragments": 1,
             "wide_fetch": True, "async_copy": False, "min_blocks": 1, "workers_per_sm": 2},
        ],
    }
    # the last has 16-byte-aligned rows (K, N multiples of 4) and whole tiles inside, for wide fetches,
    # and K long enough for asynchronous copies to run unchecked for a few tiles
    SHAPES = [(1, 1, 1), (1, 13, 1), (7, 1, 3), (17, 23, 19), (3, 41, 37), (37, 68, 44)]
    # tf32x3 issues three instructions where dmma issues one, each meeting the block's threads at a
    # barrier here: the fewest and smallest shapes that still leave partial tiles and split K
    # unevenly, and (the last) aligned rows in every layout with whole tiles inside C and K long
    # enough for copies without bounds tests
    FAMILY_SHAPES = {"tf32x3": [(1, 1, 1), (7, 1, 3), (17, 23, 19), (32, 20, 32)],
                     # a warpgroup's 128 threads meet at a barrier per instruction, 12 a K-tile of 32
                     "wgmma": [(1, 1, 1), (17, 23, 19), (32, 20, 72)],
                     # a few rows, as gemv serves: its rows of blocks cost a whole row of C each
                     "gemv": [(1, 1, 1), (1, 13, 1), (7, 1, 3), (3, 41, 37), (8, 36, 44)]}

CASES = [
    pytest.param(family, config, id=f"{family}-{i}")
    for family, configs in CONFIGS.items()
    for i, config in enumerate(configs)
]
#: the dtypes each family multiplies (dmma: float64 alone; tf32x3: float32 alone)
FAMILY_DTYPES = {family: [d for d in DTYPES if family in families_for(d)] for family in CONFIGS}


def dtype_of(family: str) -> str:
    """float32 where the family takes it, else the first dtype it does."""
    return "float32" if "float32" in FAMILY_DTYPES[family] else FAMILY_DTYPES[family][0]


def run(kernel, A, B):
    """Launch into a poisoned output; return what the kernel wrote."""
    m, n = A.shape[0], B.shape[1]
    C = np.full((m, n), poison_value(kernel.dtype), dtype=A.dtype)
    dC = cuda.to_device(C)
    kernel(cuda.to_device(A), cuda.to_device(B), dC)
    return dC.copy_to_host()


def assert_matches_reference(kernel, A, B):
    out = run(kernel, A, B)
    ref = reference(A, B)
    if kernel.dtype == "int32":
        np.testing.assert_array_equal(out, ref.astype(np.int32))
    else:
        assert np.all(np.isfinite(out)), "unwritten (poisoned) elements remain"
        assert relative_error(out, ref) <= error_bound(kernel.dtype, A.shape[1])


@pytest.mark.parametrize("family,config,dtype", [
    pytest.param(*case.values, dtype, id=f"{case.id}-{dtype}")
    for case in CASES for dtype in FAMILY_DTYPES[case.values[0]]
])
def test_family_matches_reference_on_odd_shapes(family, config, dtype, rng):
    """The first config of a family runs every shape in its first dtype; the others, and the other
    dtypes (the same tiles and moves, in other arithmetic), the last two: partial tiles at every
    edge, a K split unevenly."""
    kernel = kernels.build(family, config, dtype)
    family_shapes = FAMILY_SHAPES.get(family, SHAPES)
    every = config is CONFIGS[family][0] and (dtype == dtype_of(family) or ON_GPU)
    shapes = family_shapes if every else family_shapes[-2:]
    for m, n, k in shapes:
        A, B = random_inputs(m, n, k, dtype, rng)
        assert_matches_reference(kernel, A, B)


def run_layout(kernel, A, B):
    """Launch with A and B passed as the kernel's layout says: a "T" operand as its C-contiguous
    transpose."""
    a = np.ascontiguousarray(A.T) if kernel.layout[0] == "T" else A
    b = np.ascontiguousarray(B.T) if kernel.layout[1] == "T" else B
    C = cuda.to_device(np.full((A.shape[0], B.shape[1]), poison_value(kernel.dtype), dtype=A.dtype))
    kernel(cuda.to_device(a), cuda.to_device(b), C)
    return C.copy_to_host()


# gemv's second config splits K, which B's columns in memory walk in groups from each split's start
LAYOUT_CASES = [case for case in CASES
                if case.id.endswith("-0") or case.values[1].get("async_copy") or case.values[0] == "gemv"]


#: NT (nn.Linear's x @ W.T) and TT (both operands transposed) in every run; TN, whose two reads NN
#: and TT make, with `-m long`
@pytest.mark.parametrize("layout", ["NT", pytest.param("TN", marks=pytest.mark.long), "TT"])
@pytest.mark.parametrize("family,config", LAYOUT_CASES)
def test_transposed_layouts_match_reference(family, config, layout, rng):
    """Every family reads transposed operands in place; the last shape has aligned rows in every
    layout (M, N, K multiples of 4), so wide moves of the parts stored as they are run too."""
    dtype = dtype_of(family)
    kernel = kernels.build(family, config, dtype, layout)
    for m, n, k in FAMILY_SHAPES[family][-2:] if family in FAMILY_SHAPES else [(17, 23, 19), (36, 68, 44)]:
        A, B = random_inputs(m, n, k, dtype, rng)
        out = run_layout(kernel, A, B)
        assert np.all(np.isfinite(out)), "unwritten (poisoned) elements remain"
        assert relative_error(out, reference(A, B)) <= error_bound(dtype, k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemv_reads_a_as_vectors_with_the_same_sums(dtype, rng):
    """With `a_vectors` and B's columns in memory, gemv reads A's values as vector loads: in NT a
    row's k's, in TT (A transposed) a k's rows where the tile's rows all lie in A (M = 8 in tiles of
    4; M = 7 reads scalars there). Each element of C sums the same products in the same order as
    with scalar reads, so all agree to the bit."""
    scalar = {"rows": 4, "cols": 16, "threads": 64, "unroll": 2, "splits": 1}
    vectors = {**scalar, "a_vectors": True, "streamed": True}
    for m, n, k in [(8, 36, 44), (7, 36, 44)]:
        A, B = random_inputs(m, n, k, dtype, rng)
        expected = run_layout(kernels.build("gemv", scalar, dtype, "NT"), A, B)
        assert relative_error(expected, reference(A, B)) <= error_bound(dtype, k)
        for config, layout in [(vectors, "NT"), (vectors, "TT"), (scalar, "TT")]:
            np.testing.assert_array_equal(run_layout(kernels.build("gemv", config, dtype, layout), A, B), expected)


#: per family, a shape with partial tiles at every edge and, for the configs that split K, a split
#: left empty (gemv: K = 1 in 2 splits; splitk: K = 19 in 4 splits of 8); dmma's C of aligned rows,
#: which its paired stores write
BIAS_SHAPES = {"gemv": (3, 13, 1), "wgmma": (17, 23, 19), "dmma": (17, 24, 19)}


@pytest.mark.parametrize("family,config", CASES)
def test_every_config_adds_a_bias_once_in_its_epilogue(family, config, rng):
    """A build `with_bias` adds the bias to every row of C, once: by the block whose part of K
    starts at 0 where blocks add into C (split-K, stream-K), whose other splits, empty or not, add
    none. The bias is of the products' size, so one left out or added twice fails the bound."""
    dtype = dtype_of(family)
    m, n, k = (513, 1021, 769) if ON_GPU else BIAS_SHAPES.get(family, (17, 23, 19))
    kernel = kernels.build_for(family, config, dtype, (m, n, k), "NT").with_bias()
    A, B = random_inputs(m, n, k, dtype, rng)
    bias = (rng.uniform(-1, 1, n) * np.sqrt(k)).astype(dtype)
    C = cuda.to_device(np.full((m, n), poison_value(dtype), dtype=A.dtype))
    kernel(cuda.to_device(A), cuda.to_device(np.ascontiguousarray(B.T)), C, bias=cuda.to_device(bias))
    out = C.copy_to_host()
    assert np.all(np.isfinite(out)), "unwritten (poisoned) elements remain"
    assert relative_error(out, reference(A, B) + bias) <= error_bound(dtype, k)


def test_a_family_whose_kernels_take_no_bias_says_so():
    """A family outside mmtune may define kernels of three arguments: a build of theirs with a bias
    is refused by name, and without one it compiles as before (no fourth argument)."""
    kernel = kernels.build("naive", CONFIGS["naive"][0], "float32")
    three = dataclasses.replace(kernel, family="outside", py_func=lambda A, B, C: None)
    assert not three.takes_bias and len(three.signature.args) == 3
    with pytest.raises(ValueError, match="outside family's kernels take no bias"):
        three.with_bias()
    assert kernel.takes_bias and len(kernel.with_bias().signature.args) == 4


DEEP = {"bm": 64, "bn": 64, "bk": 32, "tm": 4, "tn": 4, "pad": 4, "stages": 4, "min_blocks": 1, **ASYNC}


#: NN and TT (A's part stored transposed and B's as it is, then the other way round) in every run; NT and TN
#: (both parts alike) with `-m long`
@pytest.mark.parametrize("layout", [layout if layout in ("NN", "TT") else pytest.param(layout, marks=pytest.mark.long)
                                    for layout in kernels.LAYOUTS])
def test_tiles_past_48_kb_live_in_dynamic_shared_memory(layout, rng):
    kernel = kernels.build("vector", DEEP, "float32", layout)
    assert kernel.dynamic_shared == 4 * 32 * (64 + 64 + 8) * 4 > 48 * 1024
    m, n, k = 72, 68, 100
    A, B = random_inputs(m, n, k, "float32", rng)
    assert relative_error(run_layout(kernel, A, B), reference(A, B)) <= error_bound("float32", k)


def test_wide_offsets_are_chosen_by_operand_size():
    assert kernels.offset_bits_for(65535, 65536, 1) == 32
    assert kernels.offset_bits_for(65536, 16, 65537) == 64  # A: 2**32 + 65536 elements
    assert kernels.offset_bits_for(16, 65537, 65536) == 64  # B
    assert kernels.offset_bits_for(65536, 65536, 1) == 64  # C


def test_grid_puts_every_tile_on_x():
    assert kernels.grid_of(5_000_000, 16, (64, 16)) == (78125, 1, 1)
    assert kernels.grid_of(100, 300, (32, 64), 4) == (4 * 5, 4, 1)
    streamed = kernels.build("streamk", {**kernels.family("streamk").default, "workers_per_sm": 2}, "float32")
    assert streamed.grid(5_000_000, 16, sm_count=132) == (264, 1, 1) and streamed.adds
    assert not kernels.build("vector", kernels.family("vector").default, "float32").adds
    config = CONFIGS["vector"][0]
    tiles = -(-5_000_000 // config["bm"]) * -(-16 // config["bn"])
    assert kernels.build("vector", config, "float32").grid(5_000_000, 16) == (tiles, 1, 1)
    with pytest.raises(kernels.GridTooLarge):
        kernels.grid_of(2**40, 2**40, (256, 256))


def test_limits_allow_dynamic_shared_memory_by_architecture():
    deep = {**DEEP, "bm": 128, "bn": 128, "tm": 8, "tn": 8}  # 4 x 32 x 264 x 4 bytes = 135 KB
    assert kernels.family("vector").restrict(deep, "float32", DeviceLimits()) is not None
    assert kernels.family("vector").restrict(deep, "float32", DeviceLimits.for_cc("9.0")) is None
    assert kernels.family("vector").restrict(deep, "float32", DeviceLimits.for_cc("8.6")) is not None


def _off_16_byte_boundary(X):
    """X on the device, its data 4 bytes past a 16-byte boundary."""
    flat = cuda.to_device(np.concatenate([X[:1, :1].ravel(), X.ravel()]))
    return flat[1:].reshape(X.shape)


WIDE_CASES = [case for case in CASES if case.values[1].get("wide_fetch")]


@pytest.mark.parametrize("family,config", WIDE_CASES)
@pytest.mark.parametrize("rows", ["", "AB"])
def test_wide_fetches_fall_back_to_scalar_loads_on_unaligned_operands(family, config, rows, rng):
    """Pointers off 16-byte boundaries on builds for aligned and for unaligned rows, and aligned
    operands on a build for unaligned rows: any operands run on any build."""
    kernel = kernels.build(family, config, "float32", unaligned=rows)
    m, n, k = SHAPES[-1]
    A, B = random_inputs(m, n, k, "float32", rng)
    for move in (_off_16_byte_boundary, cuda.to_device) if rows else (_off_16_byte_boundary,):
        C = cuda.to_device(np.full((m, n), np.nan, np.float32))
        kernel(move(A), move(B), C)
        assert relative_error(C.copy_to_host(), reference(A, B)) <= error_bound("float32", k)


@pytest.mark.parametrize("family,config", WIDE_CASES)
@pytest.mark.parametrize("layout", ["NN", "TT"])
def test_rows_of_odd_length_move_untested_inside_c(family, config, layout, rng):
    """N and K odd: blocks inside C take the loop without bounds tests on the build for the shape,
    fetching groups as scalar loads from one address, or copying them one element at a time."""
    m, n, k = (ON_GPU and (1001, 1023, 999)) or (37, 67, 45)
    kernel = kernels.build_for(family, config, "float32", (m, n, k), layout)
    assert kernels.unaligned_for(m, n, k, layout, "float32") == "ABC" and kernel.unaligned  # those it moves wide
    A, B = random_inputs(m, n, k, "float32", rng, layout)
    C = cuda.to_device(np.full((m, n), np.nan, np.float32))
    kernel(*(cuda.to_device(x) for x in stored(A, B, layout)), C)
    assert relative_error(C.copy_to_host(), reference(A, B)) <= error_bound("float32", k)


ADDING_CASES = [case for case in CASES if case.values[0] in ("splitk", "streamk")]


@pytest.mark.parametrize("family,config", ADDING_CASES)
def test_split_products_go_into_unaligned_c_in_groups(family, config, rng):
    """C's rows of odd length, the first starting 4 bytes past a 16-byte boundary: row after row,
    a group of 4 columns starts at each slot of a 16-byte word, and tiles moved back from C's right
    edge start groups at columns that are not multiples of 4. The build for such rows adds each
    group as the widest adds its address allows (on a GPU a misaligned vector add faults)."""
    m, n, k = (ON_GPU and (301, 1023, 517)) or (9, 45, 19)
    kernel = kernels.build_for(family, config, "float32", (m, n, k))
    assert kernel.unaligned.endswith("C")
    A, B = random_inputs(m, n, k, "float32", rng)
    C = _off_16_byte_boundary(np.full((m, n), np.nan, np.float32))
    kernel(cuda.to_device(A), cuda.to_device(B), C)
    assert relative_error(C.copy_to_host(), reference(A, B)) <= error_bound("float32", k)


def test_vector_phase_is_an_elements_slot_in_its_16_byte_word():
    phase_of = intrinsics.vector_phase(4)

    @cuda.jit
    def phases(X, out):
        i, j = cuda.grid(2)
        if i < X.shape[0] and j < X.shape[1]:
            out[i, j] = phase_of(X, (i, j))

    X = _off_16_byte_boundary(np.zeros((3, 7), np.float32))
    out = cuda.to_device(np.full((3, 7), -1, np.int32))
    phases[(1, 1), (4, 8)](X, out)
    np.testing.assert_array_equal(out.copy_to_host(), (1 + np.arange(21).reshape(3, 7)) % 4)


@pytest.mark.parametrize("family", list(kernels.FAMILIES))
def test_k_zero_gives_zeros(family):
    dtype = dtype_of(family)
    kernel = kernels.build(family, CONFIGS[family][0], dtype)
    out = run(kernel, np.zeros((5, 0), dtype), np.zeros((0, 3), dtype))
    np.testing.assert_array_equal(out, np.zeros((5, 3), dtype))


def test_accumulates_in_the_element_type():
    """float32 kernels must not round through float64: the result equals float32 summation."""
    kernel = kernels.build("naive", CONFIGS["naive"][0], "float32")
    A = np.full((1, 3), 1.0, np.float32)
    B = np.array([[2.0**24], [1.0], [1.0]], np.float32)  # 2^24 + 1 + 1 in float32 stays 2^24
    assert run(kernel, A, B)[0, 0] == np.float32(2.0**24)


def test_int32_wraps_like_numpy():
    kernel = kernels.build("shared", CONFIGS["shared"][0], "int32")
    A = np.full((2, 2), 2**30, np.int32)
    B = np.full((2, 2), 2, np.int32)
    np.testing.assert_array_equal(run(kernel, A, B), A @ B)


@pytest.mark.parametrize(
    "A,B,C,message",
    [
        ((3, 4), (5, 2), (3, 2), "inner dimensions differ"),
        ((3, 4), (4, 2), (2, 3), "C must be 3x2"),
        ((3, 4, 1), (4, 2), (3, 2), "A must be 2-D"),
    ],
)
def test_operand_shapes_are_checked(A, B, C, message):
    arrays = [np.ones(s, np.float32) for s in (A, B, C)]
    with pytest.raises(OperandError, match=message):
        check_shapes(*arrays)


def test_operands_must_be_c_contiguous_or_transposed_and_of_one_dtype():
    A = np.ones((4, 4), np.float32)
    assert arrays_layout(A, np.ones((4, 4), np.float32).T) == "NT"
    with pytest.raises(OperandError, match="B has strides"):
        arrays_layout(A, np.ones((4, 8), np.float32)[:, ::2])
    with pytest.raises(OperandError, match="A and B differ in dtype"):
        check_shapes(A.astype(np.float64), A)


def test_unknown_family_and_dtype_are_refused():
    with pytest.raises(ValueError, match="unknown kernel family 'tensor'"):
        kernels.build("tensor", {}, "float32")
    with pytest.raises(ValueError, match="unsupported dtype 'float16'"):
        kernels.build("naive", kernels.family("naive").default, "float16")


# --- property test: configs drawn from each family's feasible space compute the right product ---

def check_drawn_config(data, configs: dict[tuple[str, str], list[dict]]) -> None:
    family, dtype = data.draw(st.sampled_from(sorted(configs)), label="family, dtype")
    config = data.draw(st.sampled_from(configs[family, dtype]), label="config")
    top = 300 if ON_GPU else 40
    m, n, k = (data.draw(st.integers(1, top), label=d) for d in "mnk")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    A, B = random_inputs(m, n, k, dtype, np.random.default_rng(seed))
    assert_matches_reference(kernels.build(family, config, dtype), A, B)


@settings(max_examples=30 if ON_GPU else 6, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)  # the same draws every run: a run's length does not depend on its luck
@given(data=st.data())
def test_feasible_configs_are_correct(data):
    check_drawn_config(data, property_configs())


@pytest.mark.sweep
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_feasible_config_may_be_drawn_and_is_correct(data):
    check_drawn_config(data, property_configs(every=True))


@pytest.mark.parametrize("case", variant_cases(), ids=lambda case: case.id)
def test_sampled_configs_are_correct_in_every_build_variant(case, rng):
    kernel = kernels.build(case.family, case.config, case.dtype, case.layout, case.offset_bits, case.unaligned)
    A, B = random_inputs(*case.shape, case.dtype, rng)
    out, ref = run_layout(kernel, A, B), reference(A, B)
    if case.dtype == "int32":
        np.testing.assert_array_equal(out, ref.astype(np.int32))
    else:
        assert np.all(np.isfinite(out)), "unwritten (poisoned) elements remain"
        assert relative_error(out, ref) <= error_bound(case.dtype, case.shape[2])


def test_the_sample_covers_every_family_dtype_and_build_variant():
    cases = variant_cases()
    pairs = {(f, d) for d in kernels.DTYPES for f in families_for(d)}
    assert {(case.family, case.dtype) for case in cases} == pairs
    for family, dtype in pairs:
        mine = [case for case in cases if (case.family, case.dtype) == (family, dtype)]
        assert {case.layout for case in mine} == set(kernels.LAYOUTS)
        assert {bool(case.unaligned) for case in mine} == {True, False}
        assert {case.offset_bits for case in mine} == {32, 64}
    assert len({layout for layout, _, _ in VARIANTS}) == len(kernels.LAYOUTS)


# --- the tensor cores' fragments and TF32 (kernels.warp_mma) ---

def test_mma_fragments_follow_the_ptx_tables():
    """PTX ISA, m16n8k8 .f64: a0..a3 at (g, t), (g+8, t), (g, t+4), (g+8, t+4); b0, b1 at (t, g),
    (t+4, g); c0..c3 at (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1); m8n8k4 the first of each."""
    lane = 4 * 5 + 3  # g = 5, t = 3
    assert warp_mma.fragment("m16n8k8", lane) == {
        "A": [(5, 3), (13, 3), (5, 7), (13, 7)], "B": [(3, 5), (7, 5)], "C": [(5, 6), (5, 7), (13, 6), (13, 7)]}
    assert warp_mma.fragment("m8n8k4", lane) == {"A": [(5, 3)], "B": [(3, 5)], "C": [(5, 6), (5, 7)]}
    for shape, (m, n, k) in warp_mma.SHAPES.items():  # every element of A, B and C is one lane's
        held = [warp_mma.fragment(shape, lane) for lane in range(32)]
        for name, rows, cols in (("A", m, k), ("B", k, n), ("C", m, n)):
            assert sorted(e for h in held for e in h[name]) == [(r, c) for r in range(rows) for c in range(cols)]


def one_warps_mma(shape, kind, A, B, C):
    """D = A @ B + C by the simulator's mma of `kind`, each of 32 lanes passing its fragments."""
    m, n, _ = warp_mma.SHAPES[shape]
    mma = warp_mma.mma(shape, kind)
    lanes = [warp_mma.fragment(shape, lane) for lane in range(32)]
    a = np.array([[A[e] for e in lane["A"]] for lane in lanes])
    b = np.array([[B[e] for e in lane["B"]] for lane in lanes])
    c = np.array([[C[e] for e in lane["C"]] for lane in lanes])

    @cuda.jit
    def one_warp(a, b, c, d):
        lane = cuda.threadIdx.x
        out = mma(tuple(a[lane]), tuple(b[lane]), tuple(c[lane]))
        for i in range(len(out)):
            d[lane, i] = out[i]

    d = np.zeros((32, warp_mma.counts(shape)[2]), C.dtype)
    one_warp[1, 32](a, b, c, d)
    D = np.zeros((m, n), C.dtype)
    for lane, values in zip(lanes, d):
        for e, value in zip(lane["C"], values):
            D[e] = value
    return D


@pytest.mark.skipif(ON_GPU, reason="the simulator's exchange of fragments")
@pytest.mark.parametrize("shape", warp_mma.KINDS["f64"])
def test_simulated_mma_multiplies_a_warps_fragments(shape, rng):
    m, n, k = warp_mma.SHAPES[shape]
    A, B, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    np.testing.assert_allclose(one_warps_mma(shape, "f64", A, B, C), A @ B + C, rtol=1e-12, atol=1e-12)


def bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def from_bits(*words) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


#: float32 -> TF32 rounding and truncation of whole arrays, through kernels.warp_mma's own functions
rounded_tf32 = np.vectorize(warp_mma.round_tf32, otypes=[np.float32])
truncated_tf32 = np.vectorize(warp_mma.truncated_tf32, otypes=[np.float32])


@pytest.mark.skipif(ON_GPU, reason="the simulator's TF32 arithmetic")
@pytest.mark.parametrize("shape", warp_mma.KINDS["tf32"])
def test_simulated_tf32_mma_multiplies_tf32_values_and_reads_nothing_else(shape, rng):
    """TF32 values exactly (their products are exact in float32, the sums are float32's); of other
    float32 operands only their TF32 bits (as the tensor cores read them)."""
    m, n, k = warp_mma.SHAPES[shape]
    A = rng.standard_normal((m, k), np.float32)
    B = rng.standard_normal((k, n), np.float32)
    C = rng.standard_normal((m, n), np.float32)
    tf32_A, tf32_B = rounded_tf32(A), rounded_tf32(B)
    assert not (bits(tf32_A) & 0x1FFF).any() and not (bits(tf32_B) & 0x1FFF).any()
    exact = tf32_A.astype(np.float64) @ tf32_B + C
    np.testing.assert_allclose(one_warps_mma(shape, "tf32", tf32_A, tf32_B, C), exact, rtol=1e-5, atol=1e-5)
    truncated = truncated_tf32(A).astype(np.float64) @ truncated_tf32(B) + C
    D = one_warps_mma(shape, "tf32", A, B, C)
    np.testing.assert_allclose(D, truncated, rtol=1e-5, atol=1e-5)
    assert np.abs(D - (A.astype(np.float64) @ B + C)).max() > 1e-3  # float32's product it is not


def test_mma_kinds_take_their_own_shapes():
    assert warp_mma.KINDS["tf32"] == ("m16n8k4", "m16n8k8") and set(warp_mma.KINDS["f64"]) == set(warp_mma.SHAPES)
    with pytest.raises(ValueError, match="no tf32 mma of shape 'm8n8k4'"):
        warp_mma.mma("m8n8k4", "tf32")
    with pytest.raises(ValueError, match="no tf32 mma of shape 'm16n8k16'"):
        warp_mma.mma("m16n8k16", "tf32")
    with pytest.raises(ValueError, match="no bf16 mma"):
        warp_mma.mma("m16n8k8", "bf16")


def test_round_tf32_rounds_to_nearest_with_ties_away_from_zero():
    one = 0x3F800000
    cases = {
        one + 0x1000: one + 0x2000,  # 1 + 2**-11, half-way: away from zero (to even would give 1)
        one + 0x3000: one + 0x4000,  # 1 + 2**-10 + 2**-11, half-way: away from zero
        one + 0x0FFF: one,  # below half-way
        one + 0x0800: one,  # 1 + 2**-12
        one + 0x1001: one + 0x2000,  # above half-way
        one + 0x2000: one + 0x2000,  # TF32 already
        0x3FFFF000: 0x40000000,  # the carry runs into the exponent: 2 - 2**-11 -> 2
        0x00001000: 0x00002000,  # subnormals too
        0x7F7FF000: 0x7F800000,  # past float32's largest: inf
        0x7F800000: 0x7F800000,  # inf stays inf
    }
    for x, expected in cases.items():
        for sign in (0, 0x80000000):  # symmetric: ties away from zero either way
            got = bits(warp_mma.round_tf32(from_bits(x | sign)[0]))
            assert got == expected | sign, (hex(x | sign), hex(int(got)), hex(expected | sign))
    assert warp_mma.round_tf32(1 + 2**-11) == 1 + 2**-10 and warp_mma.round_tf32(1 + 2**-12) == 1.0
    assert warp_mma.round_tf32(-(1 + 2**-11)) == -(1 + 2**-10) and warp_mma.round_tf32(-(1 + 2**-12)) == -1.0
    assert warp_mma.round_tf32(float("inf")) == float("inf") and warp_mma.round_tf32(-float("inf")) == -float("inf")
    # NaNs stay NaNs, also those that rounding their bits would make inf (payload in the dropped
    # bits only) or -0 (the carry out of the top)
    for nan in (0x7FC00000, 0x7F800001, 0x7F800FFF, 0x7FFFF000, 0xFFFFFFFF):
        assert np.isnan(warp_mma.round_tf32(from_bits(nan)[0])), hex(nan)
    assert bits(warp_mma.truncated_tf32(from_bits(one + 0x1FFF)[0])) == one  # the tensor cores' reading: truncation


def test_simulated_split_holds_a_float32_in_two_tf32_values(rng):
    x = np.ldexp(rng.standard_normal(2000), rng.integers(-60, 60, 2000)).astype(np.float32)
    parts = np.array([warp_mma.split_parts(value) for value in x], np.float64)
    big, small = parts[:, 0], parts[:, 1]
    assert np.array_equal(big.astype(np.float32), big) and np.array_equal(small.astype(np.float32), small)
    assert not (bits(big) & 0x1FFF).any() and not (bits(small) & 0x1FFF).any()
    assert np.all(np.abs(big + small / warp_mma.SMALL_SCALE - x) <= 2.0**-22 * np.abs(x))
    assert np.count_nonzero(small) > len(x) // 2  # big alone would not do


def test_the_split_is_finite_and_holds_tiny_values_and_infinities_as_documented():
    """No finite x overflows its big part; the small part holds x to 2**-147 however tiny x is;
    +-Inf is +-1 and +-Inf; NaN stays in the big part."""
    for x in (3.4020e38, 3.40282e38, -3.40282e38):
        big, small = warp_mma.split_parts(np.float32(x))
        assert np.isfinite(big) and np.isfinite(small) and abs(small) <= abs(np.float32(x)) / 2
    tiny = np.float32(1e-39) * np.arange(1, 200, dtype=np.float32) / 7  # subnormals, many bit patterns
    for x in (*tiny, np.float32(1.4e-45), np.float32(2.0**-120 * 1.2345)):
        big, small = warp_mma.split_parts(x)
        assert abs(big + small / warp_mma.SMALL_SCALE - float(x)) <= 2.0**-147, x
    assert warp_mma.split_parts(np.float32(np.inf)) == (1.0, np.inf)
    assert warp_mma.split_parts(np.float32(-np.inf)) == (-1.0, -np.inf)
    assert np.isnan(warp_mma.split_parts(np.float32(np.nan))[0])


def test_tf32x3_fails_verification_without_its_split(rng):
    """The simulated TF32 mma reads only its operands' TF32 bits, so a tf32x3 kernel that passed A
    and B to it unsplit would fail the project's verification by far (as would one TF32 product of
    rounded operands, torch's allow_tf32), while the three products of the split parts pass: the
    kernel tests above catch a lost or broken split."""
    m, n, k = 16, 16, 256
    A, B = random_inputs(m, n, k, "float32", rng)
    bound = error_bound("float32", k)

    def verified(product):
        return compare(product.astype(np.float32), A, B, "float32", rng)

    unsplit = verified(truncated_tf32(A).astype(np.float64) @ truncated_tf32(B))
    assert not unsplit.ok and unsplit.error > 10 * bound
    one_product = verified(rounded_tf32(A).astype(np.float64) @ rounded_tf32(B))
    assert not one_product.ok and one_product.error > 10 * bound
    split = np.vectorize(warp_mma.split_parts, otypes=[np.float32, np.float32])
    (a_big, a_small), (b_big, b_small) = split(A), split(B)
    three = ((a_small.astype(np.float64) @ b_big + a_big.astype(np.float64) @ b_small) / warp_mma.SMALL_SCALE
             + a_big.astype(np.float64) @ b_big)
    assert verified(three).ok


@pytest.mark.parametrize("layout", kernels.LAYOUTS)
def test_dmma_moves_unaligned_rows_one_element_at_a_time(layout, rng):
    """float64 rows of odd length are not 16-byte aligned: blocks inside C still copy untested."""
    m, n, k = (ON_GPU and (1001, 1023, 999)) or (33, 35, 37)
    kernel = kernels.build_for("dmma", CONFIGS["dmma"][0], "float64", (m, n, k), layout)
    assert kernel.unaligned == "".join(name for name, wide in (("A", layout[0] == "T"), ("B", layout[1] == "N")) if wide)
    A, B = random_inputs(m, n, k, "float64", rng, layout)
    C = cuda.to_device(np.full((m, n), np.nan))
    kernel(*(cuda.to_device(x) for x in stored(A, B, layout)), C)
    assert relative_error(C.copy_to_host(), reference(A, B)) <= error_bound("float64", k)


@pytest.mark.parametrize("layout", kernels.LAYOUTS)
@pytest.mark.parametrize("family", ["dmma", "tf32x3"])
def test_tiles_stored_as_they_lie_in_memory_are_copied_wide_in_every_layout(family, layout, rng):
    """With stored="memory" no part is transposed into shared memory, so both are copied 16 bytes
    at a time (and both are built for unaligned rows); a lane's k's, read in the tile's order
    from rows along K and from columns along M or N, give the product of its fragments' order."""
    dtype = dtype_of(family)
    config = next(c for c in CONFIGS[family] if c.get("stored") == "memory")
    m, n, k = (ON_GPU and (1001, 1023, 999)) or (19, 17, 35)
    kernel = kernels.build_for(family, config, dtype, (m, n, k), layout)
    assert kernel.unaligned == "AB"
    A, B = random_inputs(m, n, k, dtype, rng, layout)
    C = cuda.to_device(np.full((m, n), np.nan, dtype))
    kernel(*(cuda.to_device(x) for x in stored(A, B, layout)), C)
    assert compare(C.copy_to_host(), A, B, dtype, rng).ok


def test_dmma_multiplies_float64_alone():
    with pytest.raises(ValueError, match="dmma multiplies float64 only"):
        kernels.build("dmma", kernels.family("dmma").default, "float32")


@pytest.mark.parametrize("layout", kernels.LAYOUTS)
def test_tf32x3_moves_unaligned_rows_one_element_at_a_time(layout, rng):
    """float32 rows of odd length are not 16-byte aligned: blocks inside C still copy untested
    (the last config storing its tiles "mn", whose parts stored as they lie in memory move wide:
    on the simulator small tiles and 3 stages, so that its shape is small too)."""
    m, n, k = (ON_GPU and (1001, 1023, 999)) or (17, 9, 25)
    config = next(c for c in reversed(CONFIGS["tf32x3"]) if c.get("stored", "mn") == "mn")
    kernel = kernels.build_for("tf32x3", config, "float32", (m, n, k), layout)
    assert kernel.unaligned == "".join(name for name, wide in (("A", layout[0] == "T"), ("B", layout[1] == "N")) if wide)
    A, B = random_inputs(m, n, k, "float32", rng, layout)
    C = cuda.to_device(np.full((m, n), np.nan, np.float32))
    kernel(*(cuda.to_device(x) for x in stored(A, B, layout)), C)
    assert compare(C.copy_to_host(), A, B, "float32", rng).ok


def test_tf32x3_multiplies_float32_alone():
    for dtype in ("float64", "int32"):
        with pytest.raises(ValueError, match=f"tf32x3 multiplies float32 only, not {dtype}"):
            kernels.build("tf32x3", kernels.family("tf32x3").default, dtype)
