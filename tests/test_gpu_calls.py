"""The driver call path on a real GPU with PyTorch (and CuPy where installed): exact results,
the caller's stream, graph capture and replay, no host synchronization, threads, cuda:1.

    MMTUNE_TEST_GPU=1 python -m pytest -m gpu tests/test_gpu_calls.py
"""

import threading

import numpy as np
import pytest
from conftest import ON_GPU

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ON_GPU, reason="needs a GPU: MMTUNE_TEST_GPU=1")]
torch = pytest.importorskip("torch")

import kernels  # noqa: E402
from autotune.errors import CaptureError
from autotune import memos
from autotune.memos import MEMOS
from autotune.call import front
from autotune.backends import launch
from autotune.store import cubins, prebuilt
from autotune.store import shapes
from autotune.measure.measurement import error_bound, random_inputs, reference, relative_error
from autotune.space.problem import Problem
from kernels import Config
from kernels.rules import Arch, unaligned_for

SLEEP_CYCLES = 500_000_000  # ~0.25 s of one GPU thread spinning: long enough to see asynchrony


@pytest.fixture(autouse=True)
def fresh_plans(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_KERNELS", str(tmp_path / "kernels"))
    monkeypatch.setenv(front.WAIT_ENV, "1")  # each call runs its chosen kernel; the stand-in tests unset it
    memos.clear()
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.cuda.synchronize()
    memos.clear()


def operands(m, n, k, dtype, rng, device="cuda:0"):
    A, B = random_inputs(m, n, k, dtype, rng)
    return A, B, torch.from_numpy(A).to(device), torch.from_numpy(B).to(device)


def assert_exact(C, A, B, dtype):
    error = relative_error(C.cpu().numpy(), reference(A, B))
    assert error <= error_bound(dtype, A.shape[1]), error


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (1023, 1025, 999), (65, 33, 17)])
def test_results_through_the_driver_are_exact(shape, dtype, rng):
    A, B, tA, tB = operands(*shape, dtype, rng)
    C = front.matmul(tA, tB)
    assert front.backend() == "driver" and isinstance(C, torch.Tensor) and C.device == tA.device
    assert_exact(C, A, B, dtype)
    out = torch.full_like(C, -1)
    assert front.matmul(tA, tB, out=out) is out
    assert_exact(out, A, B, dtype)


@pytest.mark.parametrize("shape", [(257, 5003, 1031), (129, 256, 64), (65, 40, 33)])
def test_the_last_rows_peeled_off_are_computed_and_the_rest_left_alone(shape, rng):
    m, n, k = shape
    shapes.remember(Problem(torch.cuda.get_device_name(0), "float32", *shape),
                    Config.of("vector", {**kernels.family("vector").default, "bm": 64}))
    A, B, tA, tB = operands(*shape, "float32", rng)
    out = torch.full((m, n), float("nan"), device="cuda:0")
    front.matmul(tA, tB, out=out)
    plan = next(iter(MEMOS.table("call.plans").values())).plan
    assert isinstance(plan, launch.RowParts) and len(plan.parts) == 2
    assert_exact(out, A, B, "float32")


def test_split_k_zeroes_c_before_adding(rng):
    shape = (96, 80, 640)
    shapes.remember(Problem(torch.cuda.get_device_name(0), "float32", *shape),
                    Config.of("splitk", kernels.family("splitk").default))
    A, B, tA, tB = operands(*shape, "float32", rng)
    out = torch.full((96, 80), 7.0, device="cuda:0")
    for _ in range(3):  # a C not zeroed would accumulate
        front.matmul(tA, tB, out=out)
    assert next(iter(MEMOS.table("call.plans").values())).family == "splitk"
    assert_exact(out, A, B, "float32")


def test_a_torch_side_stream_orders_the_call(rng):
    """The issue's case: on a side stream, C.clone() after matmul(out=C) must see the product."""
    A, B, tA, tB = operands(512, 512, 512, "float32", rng)
    C = torch.empty(512, 512, device="cuda:0")
    front.matmul(tA, tB, out=C)  # the plan
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        C.fill_(float("nan"))
        torch.cuda._sleep(SLEEP_CYCLES)
        front.matmul(tA, tB, out=C)
        D = C.clone()
    torch.cuda.synchronize()
    assert_exact(D, A, B, "float32")


def test_an_explicit_stream_wins(rng):
    A, B, tA, tB = operands(256, 256, 256, "float32", rng)
    C = torch.empty(256, 256, device="cuda:0")
    front.matmul(tA, tB, out=C)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # fill on side, then matmul on `other` waiting for it
        C.fill_(float("nan"))
        torch.cuda._sleep(SLEEP_CYCLES)
        ready = torch.cuda.Event()
        ready.record()
    other = torch.cuda.Stream()
    other.wait_event(ready)
    front.matmul(tA, tB, out=C, stream=other)
    with torch.cuda.stream(other):
        D = C.clone()
    torch.cuda.synchronize()
    assert_exact(D, A, B, "float32")


def test_graph_capture_and_replay(rng):
    A, B, tA, tB = operands(384, 256, 320, "float32", rng)
    C = torch.empty(384, 256, device="cuda:0")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        front.matmul(tA, tB, out=C)  # plans are built before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        front.matmul(tA, tB, out=C)
    A2, B2 = random_inputs(384, 256, 320, "float32", rng)
    tA.copy_(torch.from_numpy(A2))
    tB.copy_(torch.from_numpy(B2))
    C.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_exact(C, A2, B2, "float32")


def test_a_missing_plan_during_capture_is_an_error(rng):
    _, _, tA, tB = operands(64, 48, 32, "float32", rng)
    C = torch.empty(64, 48, device="cuda:0")
    front.matmul(*operands(16, 16, 16, "float32", rng)[2:])  # the device is set up; this shape is not
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(CaptureError, match="before capturing"):
        with torch.cuda.graph(graph):
            front.matmul(tA, tB, out=C)


def test_matmul_does_not_wait_for_the_gpu(rng):
    _, _, tA, tB = operands(256, 256, 256, "float32", rng)
    C = torch.empty(256, 256, device="cuda:0")
    front.matmul(tA, tB, out=C)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    front.matmul(tA, tB, out=C)
    done = torch.cuda.Event()
    done.record()
    assert not done.query()  # matmul returned while the stream still sleeps


def test_threads_calling_at_once_get_their_own_results(rng):
    inputs = [operands(128, 96, 64, "float32", rng) for _ in range(8)]
    outs = [torch.empty(128, 96, device="cuda:0") for _ in inputs]
    front.matmul(inputs[0][2], inputs[0][3], out=outs[0])
    errors = []

    def work(i):
        try:
            for _ in range(50):
                front.matmul(inputs[i][2], inputs[i][3], out=outs[i])
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors
    for (A, B, _, _), C in zip(inputs, outs):
        assert_exact(C, A, B, "float32")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_tensor_on_cuda_1_runs_on_gpu_1(rng):
    A, B, tA, tB = operands(300, 200, 100, "float32", rng, device="cuda:1")
    torch.cuda.set_device(0)
    C = front.matmul(tA, tB)
    assert C.device == torch.device("cuda:1")
    torch.cuda.synchronize(1)
    assert_exact(C, A, B, "float32")


def test_cupy_arrays_use_cupys_stream(rng):
    cupy = pytest.importorskip("cupy")
    A, B = random_inputs(256, 192, 128, "float32", rng)
    cA, cB = cupy.asarray(A), cupy.asarray(B)
    C = front.matmul(cA, cB)
    assert isinstance(C, cupy.ndarray)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        C.fill(np.nan)
        front.matmul(cA, cB, out=C)
        D = C.copy()
    stream.synchronize()
    assert relative_error(cupy.asnumpy(D), reference(A, B)) <= error_bound("float32", 128)


def test_the_numba_fallback_uses_the_callers_stream_too(rng, monkeypatch):
    monkeypatch.setenv(front.ENV, "numba")
    memos.clear()
    A, B, tA, tB = operands(256, 256, 256, "float32", rng)
    C = torch.empty(256, 256, device="cuda:0")
    front.matmul(tA, tB, out=C)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        C.fill_(float("nan"))
        torch.cuda._sleep(SLEEP_CYCLES)
        front.matmul(tA, tB, out=C)
        D = C.clone()
    torch.cuda.synchronize()
    assert front.backend() == "numba"
    assert_exact(D, A, B, "float32")


# Layouts, grids and offsets (issue 19 items 3 and 4) ----------------------------------------

def views(m, n, k, layout, rng, dtype="float32"):
    """A and B on the GPU as `layout` says ("T": the `.T` view of a contiguous tensor, no copy),
    and the NumPy logical operands for the reference."""
    A, B = random_inputs(m, n, k, dtype, rng, layout)
    tA = torch.from_numpy(np.ascontiguousarray(A.T)).cuda().T if layout[0] == "T" else torch.from_numpy(A).cuda()
    tB = torch.from_numpy(np.ascontiguousarray(B.T)).cuda().T if layout[1] == "T" else torch.from_numpy(B).cuda()
    return A, B, tA, tB


@pytest.mark.parametrize("layout", kernels.LAYOUTS)
@pytest.mark.parametrize("shape", [(256, 256, 256), (1023, 1025, 999), (65, 33, 17)])
def test_transposed_torch_views_run_in_place_and_exactly(layout, shape, rng):
    A, B, tA, tB = views(*shape, layout, rng)
    assert tA.is_contiguous() == (layout[0] == "N") and tB.is_contiguous() == (layout[1] == "N")
    C = front.matmul(tA, tB)
    assert (front.backend(), next(iter(MEMOS.table("call.plans").values())).layout) == ("driver", layout)
    assert_exact(C, A, B, "float32")
    expected = torch.matmul(tA.double(), tB.double())
    assert torch.linalg.norm(C.double() - expected) / torch.linalg.norm(expected) <= error_bound("float32", shape[2])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TT"])
@pytest.mark.parametrize("shape", [(1, 5003, 1031), (3, 4096, 1024), (1, 1000, 4096)])
def test_products_of_a_few_rows_stream_b_once(layout, shape, dtype, rng):
    """The few-rows rule's gemv, its rows or columns of B aligned or not, K split, into NaN."""
    A, B, tA, tB = views(*shape, layout, rng, dtype)
    out = torch.full(shape[:2], float("nan"), dtype=tA.dtype, device="cuda:0")
    front.matmul(tA, tB, out=out)
    assert next(iter(MEMOS.table("call.plans").values())).family == "gemv"
    assert_exact(out, A, B, dtype)


def sampled_error(C, tA, tB, rows: int = 64) -> float:
    """Relative error of a sample of C's rows against float64 (a full reference would not fit)."""
    pick = torch.linspace(0, tA.shape[0] - 1, min(rows, tA.shape[0]), device=tA.device).long()
    ref = tA[pick].double() @ tB.double()
    return float(torch.linalg.norm(C[pick].double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("m,n,k", [(5_000_000, 16, 16), (16, 5_000_000, 16)], ids=["tall", "wide"])
def test_tall_and_wide_products_run(m, n, k):
    tA, tB = torch.randn(m, k, device="cuda:0"), torch.randn(k, n, device="cuda:0")
    C = front.matmul(tA, tB)
    torch.cuda.synchronize()
    assert sampled_error(C, tA, tB) <= error_bound("float32", k)


def test_an_operand_past_2_32_elements_gets_64_bit_offsets():
    """C of 65536 x 65537 (4.3e9 elements, 17 GB of float32) came back wrong with 32-bit offsets."""
    m, n, k = 65536, 65537, 16
    tA, tB = torch.randn(m, k, device="cuda:0"), torch.randn(k, n, device="cuda:0")
    C = front.matmul(tA, tB)
    torch.cuda.synchronize()
    call = next(iter(MEMOS.table("call.plans").values()))
    parts = cubins.key_parts(cubins.BuildKey(Config.of(call.family, call.config), "float32",
                                              Arch.of(torch.cuda.get_device_capability(0)).native, offset_bits=64,
                                              unaligned=unaligned_for(m, n, k, "NN", "float32")))
    assert call.plan.loaded.image == cubins.read(parts).cubin  # the 64-bit kernel was built and launched
    assert sampled_error(C, tA, tB) <= error_bound("float32", k)
    ref = tA[-8:].double() @ tB[:, -8:].double()  # C's last elements: past 2**32 from its start
    assert float(torch.linalg.norm(C[-8:, -8:].double() - ref) / torch.linalg.norm(ref)) <= error_bound("float32", k)
    del C
    torch.cuda.empty_cache()


def test_a_first_call_takes_a_stored_stand_in_then_switches_to_the_chosen_kernel(rng, monkeypatch):
    """No first-call stall: with the chosen kernel missing from the store but another config's
    kernel for the same product stored, the first call runs the stand-in while a child process
    builds the chosen one; a later call, once it is built, runs the chosen kernel. Both exact."""
    shape = (300, 100, 200)
    gpu = front._identity(launch.device(0))
    problem = Problem(gpu.name, "float32", *shape)
    chosen = front.find_entry(gpu, problem, wait=True).config  # remembered for the shape; built into the store
    stand_in = Config.of("naive", {"block_x": 16, "block_y": 16})
    assert chosen.family != stand_in.family
    key = cubins.BuildKey.of(chosen, "float32", shape, "NN", Arch.of(gpu.cc))
    cubins.path_of(cubins.stored(key).key).unlink()  # as if never built
    cubins.get(cubins.BuildKey.of(stand_in, "float32", shape, "NN", Arch.of(gpu.cc)))
    monkeypatch.delenv(front.WAIT_ENV)
    A, B, tA, tB = operands(*shape, "float32", rng)
    assert_exact(front.matmul(tA, tB), A, B, "float32")
    call = next(iter(MEMOS.table("call.plans").values()))
    assert call.family == "naive" and call.pending is not None
    call.pending.build.wait()
    assert_exact(front.matmul(tA, tB), A, B, "float32")
    switched = next(iter(MEMOS.table("call.plans").values()))
    assert switched.family == chosen.family and switched.pending is None


@pytest.mark.parametrize("dtype, layout, shape, with_bias", [("float32", "NT", (300, 100, 200), True),
                                                              ("float64", "TN", (257, 99, 131), False),
                                                              ("float64", "NN", (257, 99, 131), True)])
def test_a_first_call_with_an_empty_store_takes_the_kernel_that_ships(dtype, layout, shape, with_bias, rng,
                                                                      monkeypatch):
    """A fresh install (autotune.store.prebuilt): the first call runs the shipped kernel of its kind
    (with a bias: built with one) while the chosen one builds, then switches; both exact. Where none
    ships for this GPU, it waits."""
    gpu = front._identity(launch.device(0))
    shipped = prebuilt.entries(Arch.of(gpu.cc).native)
    monkeypatch.delenv(front.WAIT_ENV)
    m, n, k = shape
    A, B, tA, tB = operands(m, n, k, dtype, rng)
    a = tA if layout[0] == "N" else tA.T.contiguous().T
    b = tB if layout[1] == "N" else tB.T.contiguous().T
    bias = rng.uniform(-4, 4, n).astype(dtype) if with_bias else np.zeros(n, dtype)
    t_bias = torch.from_numpy(bias).cuda() if with_bias else None

    def assert_right(C):
        error = relative_error(C.cpu().numpy(), reference(A, B) + bias)
        assert error <= error_bound(dtype, k), error

    assert_right(front.matmul(a, b, bias=t_bias))
    call = next(iter(MEMOS.table("call.plans").values()))
    if not shipped:
        assert call.pending is None
        return
    assert Config.of(call.family, call.config) == prebuilt.STAND_INS[dtype] and call.pending is not None
    assert call.pending.build.key.bias == with_bias
    call.pending.build.wait()
    assert_right(front.matmul(a, b, bias=t_bias))
    switched = next(iter(MEMOS.table("call.plans").values()))
    assert switched.pending is None and Config.of(switched.family, switched.config) == call.pending.build.key.config
