import numpy as np
import pytest
from conftest import ON_GPU
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import cuda
from sampled import property_configs

import kernels

from autotune import memos
from autotune.memos import MEMOS
import autotune
import autotune.store.cache
import autotune.store.records
from autotune.select import lookup
from autotune.backends.simulator import PRETEND_ENV
from autotune.store.cache import Cache
from autotune.measure.measurement import error_bound, random_inputs, reference, relative_error
from autotune.errors import OperandError
from autotune.store.rows import Row

DEVICE = lookup._device()
SMALL = {"bm": 16, "bn": 32, "bk": 8, "tm": 2, "tn": 4, "pad": 1, "mapping": "strided", "prefetch": True}


def tuned(m, n, k, dtype="float32", family="register", params=SMALL, gflops=1.0):
    Cache().record(Row(device=DEVICE, dtype=dtype, m=m, n=n, k=k, family=family, params=params, gflops=gflops,
                        source_hash=kernels.source_hash(family)))
    memos.clear()


def check(C, A, B):
    ref = reference(A, B)
    if A.dtype.kind == "i":
        np.testing.assert_array_equal(C, ref)
    else:
        assert relative_error(C, ref) <= error_bound(A.dtype.name, A.shape[1])


#: the property test leaves out configs that split K more ways: the simulator starts a Python
#: thread for every GPU thread of every block, so K split 32 ways made this one test minutes long
#: on a loaded CI machine, and a split's code is the same at any count
PROPERTY_MAX_SPLITS = 8


def simulated_device_configs() -> dict:
    """The sampled configs (tests/sampled.py) that the simulator's device, a GPU of unknown
    architecture with every GPU's 48 KB of shared memory, takes from a cache row: wgmma's need an
    H100's shared memory."""
    from autotune import backends
    from autotune.space.configs import infeasibility

    limits = backends.current().limits()
    found = {key: [c for c in configs if infeasibility(key[0], c, key[1], limits) is None]
             for key, configs in property_configs().items()}
    return {key: configs for key, configs in found.items() if configs}


def test_lookup_says_exact_nearest_or_default():
    assert autotune.lookup(20, 30, 40).source == "default"
    tuned(20, 30, 40)
    exact = autotune.lookup(20, 30, 40)
    assert (exact.source, exact.family, exact.config, exact.distance) == ("exact", "register", SMALL, 0.0)
    near = autotune.lookup(40, 30, 40)
    assert (near.source, near.tuned_shape, near.distance) == ("nearest", (20, 30, 40), 1.0)
    assert autotune.lookup(20 * 16, 30, 40).source == "default"  # too far: 16x along M is distance 4
    assert autotune.lookup(20, 30, 40, "float64").source == "default"  # other dtype


def test_lookup_is_memoized_until_cleared():
    first = autotune.lookup(8, 8, 8)
    tuned(8, 8, 8)
    assert autotune.lookup(8, 8, 8) is not first
    assert autotune.lookup(8, 8, 8) is autotune.lookup(8, 8, 8)


def test_shipped_records_are_the_fallback(monkeypatch):
    record = Row(device=DEVICE, dtype="float32", m=64, n=64, k=64, family="shared", params={"tpb": 8, "pad": 0},
                 gflops=9.0, source_hash=kernels.source_hash("shared"))
    monkeypatch.setattr(autotune.store.records, "shipped_rows", lambda device=None, dtype=None: [record])
    choice = autotune.lookup(64, 64, 32)
    assert (choice.source, choice.origin, choice.family, choice.gflops) == ("nearest", "shipped", "shared", 9.0)
    tuned(64, 64, 32)
    assert (autotune.lookup(64, 64, 32).source, autotune.lookup(64, 64, 32).origin) == ("exact", "cache")


def test_rows_that_no_longer_fit_their_family_are_skipped_with_a_warning():
    tuned(16, 16, 16, params={**SMALL, "bm": 48})
    with pytest.warns(UserWarning, match="bm=48 is not one of"):
        assert autotune.lookup(16, 16, 16).source == "default"


TALL = {"bm": 64, "bn": 16, "bk": 8, "tm": 4, "tn": 4, "pad": 4, "stages": 1, "unroll": False, "fragments": 1,
        "wide_fetch": False, "async_copy": False, "min_blocks": 1}


def test_the_last_few_rows_are_a_product_of_their_own(monkeypatch, rng):
    """65 rows on 64-row tiles would take a second tile row for one row of C: that row is a
    product of its own, looked up as any (the few-rows rule on a GPU whose SMs are known: B
    streamed once)."""
    monkeypatch.setenv(PRETEND_ENV, f"{DEVICE};9.0;2")
    tuned(65, 24, 20, family="vector", params=TALL)
    choice = autotune.lookup(65, 24, 20)
    assert (choice.source, choice.peel, choice.rest.source, choice.rest.family) == ("exact", 1, "few-rows", "gemv")
    A, B = random_inputs(65, 24, 20, "float32", rng)
    check(autotune.matmul(A, B), A, B)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    check(autotune.matmul(dA, dB).copy_to_host(), A, B)
    (plan,) = MEMOS.table("call.numba_plans").values()
    assert [(first, rows, kernel.tile) for first, rows, kernel, _ in plan.parts] == [(0, 64, (64, 16)), (64, 1, (1, 64))]
    assert autotune.lookup(65, 24, 20, layout="TN").peel == 0  # A's rows are columns in memory
    check(autotune.matmul(cuda.to_device(np.ascontiguousarray(A.T)).T, dB).copy_to_host(), A, B)


def test_a_bias_is_added_by_the_kernels_of_every_part_and_of_an_empty_k(monkeypatch, rng):
    """matmul(A, B, bias=b) adds b to every row of C, peeled rows too, for NumPy and device arrays;
    with K = 0, C is the bias. A bias that does not fit is refused with one line."""
    monkeypatch.setenv(PRETEND_ENV, f"{DEVICE};9.0;2")
    tuned(65, 24, 20, family="vector", params=TALL)
    A, B = random_inputs(65, 24, 20, "float32", rng)
    bias = rng.uniform(-4, 4, 24).astype(np.float32)
    want = reference(A, B) + bias
    assert relative_error(autotune.matmul(A, B, bias=bias), want) <= error_bound("float32", 20)
    got = autotune.matmul(cuda.to_device(A), cuda.to_device(B), bias=cuda.to_device(bias)).copy_to_host()
    assert relative_error(got, want) <= error_bound("float32", 20)
    np.testing.assert_array_equal(autotune.matmul(np.ones((3, 0), np.float32), np.ones((0, 24), np.float32),
                                                  bias=bias), np.broadcast_to(bias, (3, 24)))
    with pytest.raises(OperandError, match=r"bias must have shape \(24,\)"):
        autotune.matmul(cuda.to_device(A), cuda.to_device(B), bias=cuda.to_device(bias[:-1]))
    with pytest.raises(OperandError, match="bias has dtype float64, A and B float32"):
        autotune.matmul(A, B, bias=bias.astype(np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_matmul_numpy_in_numpy_out_after_tuning(dtype, rng):
    tuned(19, 23, 17, dtype)
    A, B = random_inputs(19, 23, 17, dtype, rng)
    C = autotune.matmul(A, B)
    assert isinstance(C, np.ndarray) and C.dtype == A.dtype
    check(C, A, B)
    assert lookup.kernel_for(autotune.lookup(19, 23, 17, dtype), dtype, (19, 23, 17)).config == SMALL


def test_matmul_device_arrays_stay_on_the_device(rng):
    tuned(9, 11, 13)
    A, B = random_inputs(9, 11, 13, "float32", rng)
    dC = autotune.matmul(cuda.to_device(A), cuda.to_device(B))
    assert cuda.devicearray.is_cuda_ndarray(dC)
    check(dC.copy_to_host(), A, B)


def test_out_is_reused(rng):
    tuned(9, 11, 13)
    A, B = random_inputs(9, 11, 13, "float32", rng)
    out = np.empty((9, 11), np.float32)
    assert autotune.matmul(A, B, out=out) is out
    check(out, A, B)
    d_out = cuda.device_array((9, 11), np.float32)
    assert autotune.matmul(cuda.to_device(A), cuda.to_device(B), out=d_out) is d_out
    check(d_out.copy_to_host(), A, B)


def test_non_contiguous_numpy_inputs_are_copied(rng):
    tuned(7, 5, 6)
    wide, tall = random_inputs(7, 6, 12, "float32", rng)  # 7x12 and 12x6
    A, B = wide[:, ::2], tall[:5].T  # 7x6 strided, 6x5 Fortran-ordered
    assert not A.flags.c_contiguous and not B.flags.c_contiguous
    check(autotune.matmul(A, B), A, B)


def test_kernels_are_built_once(rng):
    tuned(9, 11, 13)
    A, B = random_inputs(9, 11, 13, "float32", rng)
    autotune.matmul(A, B)
    kernel = lookup.kernel_for(autotune.lookup(9, 11, 13), "float32", (9, 11, 13))
    autotune.matmul(A, B)
    assert lookup.kernel_for(autotune.lookup(9, 11, 13), "float32", (9, 11, 13)) is kernel


@pytest.mark.parametrize(
    "A,B,message",
    [
        (np.ones((3, 4), np.float32), np.ones((5, 2), np.float32), "inner dimensions differ: A is 3x4, B is 5x2"),
        (np.ones(4, np.float32), np.ones((4, 2), np.float32), "A must be 2-D"),
        (np.ones((2, 2), np.float32), np.ones((2, 2), np.float64), "A and B differ in dtype"),
        (np.ones((2, 2), np.float16), np.ones((2, 2), np.float16), "unsupported dtype float16"),
        (np.ones((2, 2), np.float32), [[1.0, 2.0], [3.0, 4.0]], "both be NumPy arrays or both be device arrays"),
        ([[1.0]], [[1.0]], "A is a list: expected a NumPy array or a CUDA device array"),
    ],
)
def test_bad_operands_get_clear_errors(A, B, message):
    with pytest.raises(OperandError, match=message):
        autotune.matmul(A, B)


def test_out_of_the_wrong_shape_is_refused():
    with pytest.raises(OperandError, match="out must be a 2x3 NumPy array of float32"):
        autotune.matmul(np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), out=np.empty((3, 2), np.float32))


def test_non_contiguous_device_arrays_are_refused():
    dA = cuda.to_device(np.ones((4, 4), np.float32))
    with pytest.raises(OperandError, match=r"A has strides \(16, 8\) for shape \(4, 2\); matmul takes C-contiguous, or "):
        autotune.matmul(dA[:, ::2], cuda.to_device(np.ones((2, 3), np.float32)))


@pytest.mark.skipif(not ON_GPU, reason="CuPy and PyTorch need a GPU")
def test_cuda_array_interface_objects_come_back_as_their_kind(rng):
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    A, B = random_inputs(65, 33, 17, "float32", rng)
    C = autotune.matmul(cupy.asarray(A), cupy.asarray(B))
    assert isinstance(C, cupy.ndarray)
    check(cupy.asnumpy(C), A, B)
    T = autotune.matmul(torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda())
    assert isinstance(T, torch.Tensor) and T.is_cuda
    check(T.cpu().numpy(), A, B)


def test_device_out_of_the_wrong_shape_is_refused():
    dA, dB = cuda.to_device(np.ones((2, 4), np.float32)), cuda.to_device(np.ones((4, 3), np.float32))
    with pytest.raises(OperandError, match="out must be a 2x3 device array of float32"):
        autotune.matmul(dA, dB, out=cuda.device_array((3, 2), np.float32))


def test_empty_products(rng):
    C = autotune.matmul(cuda.to_device(np.ones((0, 4), np.float32)), cuda.to_device(np.ones((4, 3), np.float32)))
    assert C.shape == (0, 3)
    np.testing.assert_array_equal(autotune.matmul(np.ones((2, 0), np.float32), np.ones((0, 3), np.float32)), np.zeros((2, 3)))


def test_products_too_large_for_the_gpu_are_refused(monkeypatch):
    from autotune import backends

    monkeypatch.setattr(backends.current(), "free_memory", lambda: 2**20)
    with pytest.raises(OperandError, match="the product needs 0.00 GiB on the GPU; 0.00 GiB is free"):
        autotune.matmul(np.ones((300, 300), np.float32), np.ones((300, 300), np.float32))
    with pytest.raises(OperandError, match="needs .* GiB on the GPU"):
        autotune.matmul(cuda.to_device(np.ones((600, 2), np.float32)), cuda.to_device(np.ones((2, 600), np.float32)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_propagate_as_numpy_does(bad, rng):
    tuned(7, 9, 5)
    A, B = random_inputs(7, 9, 5, "float32", rng)
    A[2, 3] = bad
    B[1, 4] = bad
    C = autotune.matmul(A, B)
    expected = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(C), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(C), np.isinf(expected))
    finite = np.isfinite(expected)
    assert np.allclose(C[finite], expected[finite], rtol=1e-5, atol=1e-5)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_matmul_is_right_for_any_tuned_config_shape_dtype_and_input_kind(data, tmp_path_factory, monkeypatch):
    configs = {key: found for key, found in ((key, [c for c in configs if c.get("splits", 1) <= PROPERTY_MAX_SPLITS])
                                             for key, configs in simulated_device_configs().items()) if found}
    family, dtype = data.draw(st.sampled_from(sorted(configs)), label="family, dtype")
    config = data.draw(st.sampled_from(configs[family, dtype]), label="config")
    m, n, k = (data.draw(st.integers(1, 24), label=d) for d in "mnk")
    on_device = data.draw(st.booleans(), label="device arrays")
    monkeypatch.setenv("MMTUNE_CACHE", str(tmp_path_factory.mktemp("cache") / "cache.db"))
    tuned(m, n, k, dtype, family, config)
    precision = kernels.family(family).precision  # the lookup that serves its row
    assert autotune.lookup(m, n, k, dtype, precision=precision).config == config
    A, B = random_inputs(m, n, k, dtype, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed")))
    if on_device:
        C = autotune.matmul(cuda.to_device(A), cuda.to_device(B), precision=precision).copy_to_host()
    else:
        C = autotune.matmul(A, B, precision=precision)
    check(C, A, B)
