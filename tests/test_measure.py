import math
import time

import numpy as np
import pytest
from numba import cuda, float32

from conftest import ON_GPU

import kernels
from autotune.measure.measurement import (
    cublas_gflops, cublas_matmul, error_bound, measure, random_inputs, reference, relative_error, time_launches, verify,
)
from autotune.measure.stored import StoredKernel, launched, stored_code
from kernels.base import Kernel


def broken_kernel(skip_last_row=False, scale=1.0):
    """A float32 naive kernel that leaves the last row unwritten or scales its result."""
    good = kernels.build("naive", {"block_x": 8, "block_y": 8}, "float32")

    def naive_broken(A, B, C):
        col, row = cuda.grid(2)
        rows = C.shape[0] - 1 if skip_last_row else C.shape[0]
        if row < rows and col < C.shape[1]:
            acc = float32(0)
            for i in range(A.shape[1]):
                acc += A[row, i] * B[i, col]
            C[row, col] = acc * float32(scale)

    return Kernel("naive", good.config, "float32", naive_broken, block=good.block, tile=good.tile)


def test_verify_passes_a_correct_kernel(rng):
    kernel = kernels.build("naive", {"block_x": 8, "block_y": 8}, "float32")
    check = verify(kernel, 9, 11, 13, rng)
    assert check.ok and check.error < check.bound


def test_verify_catches_unwritten_elements(rng):
    check = verify(broken_kernel(skip_last_row=True), 9, 11, 13, rng)
    assert not check.ok and math.isinf(check.error)


def test_verify_catches_tf32_sized_errors(rng):
    check = verify(broken_kernel(scale=1 + 3e-4), 9, 11, 64, rng)
    assert not check.ok, check.describe()


def test_int32_must_be_exact(rng):
    A, B = random_inputs(4, 5, 6, "int32", rng)
    ref = reference(A, B)
    out = ref.astype(np.int32)
    assert relative_error(out, ref) == 0
    out[1, 2] += 1
    assert math.isinf(relative_error(out, ref))


def test_error_bound_grows_with_sqrt_k():
    assert error_bound("float32", 400) == pytest.approx(2 * error_bound("float32", 100))
    assert error_bound("float64", 100) < 1e-13
    assert error_bound("int32", 100) == 0


def test_random_inputs_are_never_all_zero(rng):
    for dtype in kernels.DTYPES:
        A, B = random_inputs(8, 8, 8, dtype, rng)
        assert A.dtype == np.dtype(dtype) and np.count_nonzero(A) > 32 and np.count_nonzero(B) > 32


def test_non_finite_output_fails():
    ref = np.ones((2, 2))
    assert math.isinf(relative_error(np.array([[1, np.nan], [1, 1]], np.float32), ref))


def test_measure_times_only_verified_kernels(rng):
    good = measure(kernels.build("naive", {"block_x": 8, "block_y": 8}, "float32"), (5, 6, 7), rng, warmup=1, repeat=3)
    assert good.verification.ok and good.timing.samples <= 3 and good.gflops > 0
    bad = measure(broken_kernel(skip_last_row=True), (5, 6, 7), rng, warmup=1, repeat=3)
    assert not bad.verification.ok and bad.timing is None and bad.gflops == 0


def test_measuring_runs_the_stored_build_only_of_code_the_store_key_names(rng):
    built, broken = kernels.build("naive", {"block_x": 8, "block_y": 8}, "float32"), broken_kernel()
    assert stored_code(built) and not stored_code(broken)
    assert launched(broken) is broken
    assert isinstance(launched(built), StoredKernel) if ON_GPU else launched(built) is built  # the simulator: no cubins


@pytest.mark.skipif(not ON_GPU, reason="cubins need a GPU")
def test_a_build_is_compiled_once_for_every_shape_it_measures(rng, monkeypatch):
    from autotune.store import cubins

    builds = []
    real = cubins.build
    monkeypatch.setattr(cubins, "build", lambda key, root=None: builds.append(key) or real(key, root))
    config = kernels.family("splitk").default
    for shape in ((96, 80, 64), (200, 136, 72), (64, 64, 4096)):
        result = measure(kernels.build_for("splitk", config, "float32", shape), shape, rng, warmup=1, repeat=3)
        assert result.verification.ok and result.gflops > 0
    assert len(builds) == 1 and len(list(cubins.directory().glob("*.cubin"))) == 1


def test_time_launches_reports_quartiles():
    timing = time_launches(lambda: None, warmup=0, repeat=2)
    assert timing.samples == 2 and timing.q25_ms <= timing.median_ms <= timing.q75_ms
    assert timing.spread >= 0


@pytest.mark.skipif(not ON_GPU, reason="device time against host time needs a GPU")
def test_time_launches_times_the_gpu_not_the_python_launching_it():
    """At 16^3 a launch from Python costs far more than the kernel runs: the samples must not see it."""
    kernel = kernels.build("naive", {"block_x": 16, "block_y": 16}, "float32")
    dA, dB, dC = (cuda.to_device(np.ones((16, 16), np.float32)) for _ in range(3))
    launches = {"naive": lambda: kernel.launch(dA, dB, dC)}
    cublas = cublas_matmul()
    if cublas:
        launches["cuBLAS"] = lambda: cublas(dA, dB, dC)
    for name, launch in launches.items():
        launch()
        cuda.synchronize()
        started = time.perf_counter()
        for _ in range(200):
            launch()
        host_ms = (time.perf_counter() - started) / 200 * 1e3
        cuda.synchronize()
        assert time_launches(launch).median_ms < host_ms / 2, name


def test_cublas_gflops_times_cublas_where_there_is_one(rng):
    gflops = cublas_gflops(64, 48, 32, "float32", rng)
    if cublas_matmul() is None:  # the simulator
        assert gflops is None
    else:
        assert gflops > 0
