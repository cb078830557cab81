"""The launch layer on the CPU: argument words against the compiled kernels and Numba's own
flattening, per-thread argument buffers, stream selection, operand reading and checks.
(Launching itself needs a GPU: tests/test_gpu_calls.py.)"""

import ctypes
import json
import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

import autotune
import kernels
from autotune.call import front
from autotune.backends import launch
from autotune.call.operands import Operand, check_bias, check_product, kind_of, read_cai, read_dlpack, read_torch
from autotune.errors import CaptureError, OperandError, StoreError
from autotune.store import cubins

CHILD = """
import json, ctypes, sys
import numpy as np
import kernels
from kernels.resources import link, ltoir
from autotune.backends import launch
from autotune.store import cubins
from numba.cuda import dispatcher, types
out = {"params": {}}
def parameters(kernel, family, cc=(9, 0, "a")):
    return cubins.entry_parameters(*link(ltoir(kernel, cc), cc, family))[1]
for family in sys.argv[1:]:
    dtype = "float64" if family == "dmma" else "float32"
    kernel = kernels.build(family, kernels.family(family).default, dtype)
    out["params"][family] = parameters(kernel, family)
    out["params"][family + " with a bias"] = parameters(kernel.with_bias(), family)
    if family != "wgmma":  # sm_80's cubins order their records otherwise
        out["params"][family + " for sm_80"] = parameters(kernel, family, (8, 0))

# Numba's own flattening of one float32[:, ::1] argument, with the device array faked
class Layout:
    strides_in_bytes, is_contiguous_c, is_contiguous_f = (20, 4), True, False
class Fake:
    size, ndim, shape, dtype, ptr, _layout = 15, 2, (3, 5), np.dtype(np.float32), 0xABC0, Layout()
dispatcher.wrap_arg = lambda value: type("W", (), {"to_device": lambda self, retr, stream: Fake()})()
args = []
holder = type("K", (), {"extensions": []})()
dispatcher._Kernel._prepare_args(holder, types.Array(types.float32, 2, "C"), None, 0, [], args)
out["numba_words"] = [getattr(a, "value", a) or 0 for a in args]
class Layout:
    strides_in_bytes, is_contiguous_c, is_contiguous_f = (4,), True, True
class Fake:
    size, ndim, shape, dtype, ptr, _layout = 5, 1, (5,), np.dtype(np.float32), 0xABC0, Layout()
args = []
dispatcher._Kernel._prepare_args(holder, types.Array(types.float32, 1, "C"), None, 0, [], args)
out["numba_bias_words"] = [getattr(a, "value", a) or 0 for a in args]
print(json.dumps(out))
"""


#: the FFMA tiles and the warpgroup family (every kernel the store builds is checked the same way,
#: cubins.build); every family under `python -m pytest -m long`
ENTRY_FAMILIES = [pytest.param(list(kernels.FAMILIES), marks=pytest.mark.long, id="all"),
                  pytest.param(["vector", "wgmma"], id="two")]


@pytest.mark.parametrize("families", ENTRY_FAMILIES)
def test_argument_words_match_the_compiled_kernels_and_numbas_flattening(families):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", CHILD, *families], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    words, slots = launch.pack_arguments([(3, 4), (4, 5), (3, 5)], 4)
    biased = launch.pack_arguments([(3, 4), (4, 5), (3, 5), (5,)], 4)[0]
    for family, params in out["params"].items():
        assert params == [8] * len(biased if family.endswith("with a bias") else words), family
    expected = launch.array_words((3, 5), 4)
    expected[launch.DATA_WORD] = 0xABC0
    assert out["numba_words"] == expected
    expected = launch.array_words((5,), 4)
    expected[launch.DATA_WORD] = 0xABC0
    assert out["numba_bias_words"] == expected == [0, 0, 5, 4, 0xABC0, 5, 4]
    assert slots == [4, 13, 22]
    assert words[9:18] == [0, 0, 20, 4, 0, 4, 5, 20, 4]  # B: 4x5 float32


def test_an_entry_without_its_name_or_parameter_records_is_refused():
    with pytest.raises(StoreError, match="names no entry function"):
        cubins.entry_parameters(b"\x7fELF", "ptxas info : Used 32 registers")
    with pytest.raises(StoreError, match="not an ELF cubin"):
        cubins.entry_parameters(b"PTX", "ptxas info    : Compiling entry function 'k' for 'sm_90'")
    size_8 = (8 << 18).to_bytes(4, "little")
    records = bytes([0x04, 0x17, 12, 0, *[0] * 4, 1, 0, 8, 0, *size_8, 0x01, 0x35, 0, 0, 0x03, 0x19, 8, 0,
                     0x02, 0x6D, 0, 0])
    assert list(cubins.nv_info_records(records)) == [
        (0x17, bytes([0] * 4 + [1, 0, 8, 0]) + size_8), (0x35, bytes(2)), (0x19, bytes([8, 0])), (0x6D, bytes(2))]
    with pytest.raises(ValueError, match="runs past"):
        list(cubins.nv_info_records(bytes([0x04, 0x17, 12, 0, 0, 0])))


class FakeDriver:
    """Records launches: the words the kernel would receive, read through kernelParams."""

    def __init__(self, words: int = 27):
        self.launches, self.memsets, self.count = [], [], words

    def cuLaunchKernel(self, kernel, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * self.count).from_address(params)
        words = [ctypes.c_uint64.from_address(p).value for p in pointers]
        self.launches.append(dict(grid=(gx, gy, gz), block=(bx, by, bz), stream=stream, words=words,
                                  thread=threading.get_ident()))
        return (0,)

    def cuMemsetD32Async(self, pointer, value, count, stream):
        self.memsets.append((pointer, value, count, stream))
        return (0,)


def fake_plan(monkeypatch, splits=1):
    driver = FakeDriver()
    monkeypatch.setattr(launch, "driver", driver)
    dev = types.SimpleNamespace(enter=lambda: None, leave=lambda previous: None, ordinal=0)
    loaded = launch.LoadedKernel(library=None, kernel="k", dynamic_shared=0)
    words, slots = launch.pack_arguments([(30, 20), (20, 10), (30, 10)], 4)
    grid = launch.grid_for(30, 10, (16, 8), splits)
    return launch.Plan(loaded, dev, launch.Blocks(grid, (64,), 30 * 10 if splits > 1 else 0), words, slots), driver


class ContextDriver(FakeDriver):
    """Also tracks the thread's current context, as the CUDA driver does."""

    def __init__(self, current):
        super().__init__()
        self.current, self.at_launch = current, []

    def cuCtxGetCurrent(self):
        return 0, self.current

    def cuCtxSetCurrent(self, context):
        self.current = context
        return (0,)

    def cuLaunchKernel(self, *args):
        self.at_launch.append(self.current)
        return super().cuLaunchKernel(*args)


@pytest.mark.parametrize("caller", [7, 0], ids=["another GPU's context", "no context"])
def test_a_launch_on_another_gpu_puts_the_callers_context_back(monkeypatch, caller):
    """PyTorch follows the thread's current context: leaving GPU 1's current after a call on
    cuda:1 tensors sent its next work on cuda:0 to GPU 1 (an illegal address, seen on 2 H200s)."""
    driver = ContextDriver(caller)
    monkeypatch.setattr(launch, "driver", driver)
    gpu1 = object.__new__(launch.GpuContext)
    gpu1.ordinal, gpu1.context, gpu1.context_id = 1, 11, 11
    loaded = launch.LoadedKernel(library=None, kernel="k", dynamic_shared=0)
    words, slots = launch.pack_arguments([(30, 20), (20, 10), (30, 10)], 4)
    plan = launch.Plan(loaded, gpu1, launch.Blocks(launch.grid_for(30, 10, (16, 8), 1), (64,)), words, slots)
    assert driver.current == caller
    plan.launch(0x1000, 0x2000, 0x3000, 0)
    assert driver.at_launch == [11] and driver.current == caller
    driver.current = 11  # already current: nothing to switch or put back
    plan.launch(0x1000, 0x2000, 0x3000, 0)
    assert driver.at_launch == [11, 11] and driver.current == 11


def test_a_plan_writes_only_pointers_and_stream_per_call(monkeypatch):
    plan, driver = fake_plan(monkeypatch, splits=3)
    plan.launch(0x1000, 0x2000, 0x3000, 7)
    plan.launch(0x4000, 0x5000, 0x6000, 0)
    first, second = driver.launches
    assert first["grid"] == (2 * 2, 3, 1) and first["block"] == (64, 1, 1) and first["stream"] == 7
    assert [first["words"][i] for i in plan.slots] == [0x1000, 0x2000, 0x3000]
    assert [second["words"][i] for i in plan.slots] == [0x4000, 0x5000, 0x6000]
    assert [w for i, w in enumerate(second["words"]) if i not in plan.slots] == [
        w for i, w in enumerate(plan.words) if i not in plan.slots]
    assert driver.memsets == [(0x3000, 0, 300, 7), (0x6000, 0, 300, 0)]  # split-K zeroes C first


def test_a_plan_with_a_bias_passes_its_pointer_after_c(monkeypatch):
    """A kernel built with a bias takes a fourth array (7 words: 1-D) whose pointer each call sets;
    a kernel adding into C still has C zeroed first (its first split adds the bias)."""
    driver = FakeDriver(words=34)
    monkeypatch.setattr(launch, "driver", driver)
    dev = types.SimpleNamespace(enter=lambda: None, leave=lambda previous: None, ordinal=0)
    loaded = launch.LoadedKernel(library=None, kernel="k", dynamic_shared=0)
    words, slots = launch.pack_arguments([(30, 20), (20, 10), (30, 10), (10,)], 4)
    assert slots == [4, 13, 22, 31] and words[27:] == [0, 0, 10, 4, 0, 10, 4]
    plan = launch.Plan(loaded, dev, launch.Blocks(launch.grid_for(30, 10, (16, 8), 2), (64,), 300), words, slots)
    plan.launch(0x1000, 0x2000, 0x3000, 7, 0x4000)
    plan.launch(0x5000, 0x6000, 0x7000, 7, 0x8000)
    assert [[launched["words"][i] for i in slots] for launched in driver.launches] == [
        [0x1000, 0x2000, 0x3000, 0x4000], [0x5000, 0x6000, 0x7000, 0x8000]]
    assert driver.memsets == [(0x3000, 0, 300, 7), (0x7000, 0, 300, 7)]


def test_threads_get_their_own_argument_buffers(monkeypatch):
    plan, driver = fake_plan(monkeypatch)
    buffers = {}

    def work(index):
        buffers[index] = plan.buffer()
        for _ in range(200):
            plan.launch(index * 16, index * 16 + 1, index * 16 + 2, index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(b) for b in buffers.values()}) == 8
    for record in driver.launches:
        index = record["stream"]
        assert [record["words"][i] for i in plan.slots] == [index * 16, index * 16 + 1, index * 16 + 2]


def test_grids_put_every_tile_on_x_so_tall_and_wide_products_run():
    assert launch.grid_for(5_000_000, 16, (64, 16), 1) == (78125, 1, 1)
    assert launch.grid_for(16, 5_000_000, (16, 64), 4) == (78125, 4, 1)
    assert launch.grid_for(100, 300, (32, 64), 4) == (4 * 5, 4, 1)
    assert launch.grid_for(5_000_000, 16, (64, 16), 1, workers=264) == (264, 1, 1)  # stream-K: a block per worker
    with pytest.raises(OperandError, match="needs 68719476736 blocks, over CUDA.s 2147483647"):
        launch.grid_for(2**24, 2**24, (64, 64), 1)


# Streams ----------------------------------------------------------------------------------

class FakeTensor:
    """What read_torch uses of a torch.Tensor."""

    __module__ = "torch"

    def __init__(self, shape, dtype="torch.float32", device=0, contiguous=True, pointer=0x7000):
        self.shape, self.dtype, self._device, self._contiguous, self._pointer = shape, dtype, device, contiguous, pointer

    def data_ptr(self):
        return self._pointer

    def is_contiguous(self):
        return self._contiguous

    def get_device(self):
        return self._device

    def stride(self):
        return (1, self.shape[0])

    def element_size(self):
        return 4


def fake_modules(monkeypatch):
    seen = []
    torch = types.SimpleNamespace(_C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda d: seen.append(("torch", d)) or 1000 + d))
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_current_stream=lambda d: seen.append(("cupy", d)) or types.SimpleNamespace(ptr=2000 + d)))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return seen


def test_the_current_stream_is_the_callers_per_kind_and_device(monkeypatch):
    seen = fake_modules(monkeypatch)
    assert launch.current_stream("torch", 1) == 1001
    assert launch.current_stream("cupy", 0) == 2000
    assert launch.current_stream("cai", 0) == 0  # Numba arrays and others: the default stream
    assert seen == [("torch", 1), ("cupy", 0)]
    assert kind_of(FakeTensor((2, 2))) == "torch"


def test_an_explicit_stream_overrides_and_may_be_any_kind():
    assert launch.stream_handle(42) == 42
    assert launch.stream_handle(types.SimpleNamespace(cuda_stream=43)) == 43  # torch.cuda.Stream
    assert launch.stream_handle(types.SimpleNamespace(ptr=44)) == 44  # cupy.cuda.Stream
    assert launch.stream_handle(types.SimpleNamespace(handle=ctypes.c_void_p(45))) == 45  # Numba, ctypes
    assert launch.stream_handle(types.SimpleNamespace(handle=ctypes.c_void_p(None))) == 0  # Numba's default
    with pytest.raises(TypeError, match="stream must be"):
        launch.stream_handle("fast")


def test_the_call_path_launches_on_the_callers_stream(monkeypatch):
    """front.matmul with fake torch tensors: the plan's launch gets torch's current stream of
    the tensors' device, or the explicit stream."""
    fake_modules(monkeypatch)
    launched = []
    plan = types.SimpleNamespace(launch=lambda a, b, c, s, bias: launched.append((a, b, c, s, bias)))
    A, B, C = FakeTensor((3, 4), device=1, pointer=1), FakeTensor((4, 5), device=1, pointer=2), FakeTensor((3, 5), device=1, pointer=3)
    built = []

    def build(key, kind, operands, options):
        built.append(options.bias)
        call = front._plans[key] = front.CallPlan(kind=kind, m=3, n=5, dtype="float32", layout="NN",
                                                  out_key=((3, 5), None, "torch.float32", 1), plan=plan,
                                                  family="naive", config={})
        return call

    monkeypatch.setattr(front, "_build", build)
    autotune.clear()
    monkeypatch.setattr(front, "backend", lambda: "driver")
    assert front.matmul(A, B, out=C) is C
    front.matmul(A, B, out=C, stream=types.SimpleNamespace(cuda_stream=77))
    front.matmul(A, B, out=C, bias=FakeTensor((5,), device=1, pointer=4))
    assert launched == [(1, 2, 3, 1001, 0), (1, 2, 3, 77, 0), (1, 2, 3, 1001, 4)]
    assert built == [False, True]  # a bias makes a plan of its own
    with pytest.raises(OperandError, match="out must be a 3x5 device array of float32"):
        front.matmul(A, B, out=FakeTensor((5, 3), device=1))
    with pytest.raises(OperandError, match="C is not C-contiguous"):
        front.matmul(A, B, out=FakeTensor((3, 5), device=1, contiguous=False))


# Operands ---------------------------------------------------------------------------------

def test_operands_are_read_from_each_kind(monkeypatch):
    t = read_torch(FakeTensor((3, 4), contiguous=False))
    assert (t.pointer, tuple(t.shape), t.strides, t.device) == (0x7000, (3, 4), (4, 12), 0)
    monkeypatch.setattr(launch, "pointer_device", lambda pointer: 3)  # the driver's answer
    cai = types.SimpleNamespace(__cuda_array_interface__={
        "data": (0x100, False), "shape": (3, 4), "strides": (16, 4), "typestr": "<f4", "version": 3})
    assert read_cai(cai) == Operand(0x100, (3, 4), None, "<f4", 3)  # C strides given explicitly read as contiguous
    host = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    d = read_dlpack(host)
    assert (d.pointer, d.shape, d.strides, d.dtype, d.device) == (host.ctypes.data, (3, 2), (16, 8), np.float32, -1)


def op(shape, dtype="float32", device=0, strides=None):
    return Operand(1, shape, strides, np.dtype(dtype), device)


@pytest.mark.parametrize("A,B,C,message", [
    (op((2, 3, 4)), op((4, 2)), None, r"A must be 2-D, got shape \(2, 3, 4\)"),  # batched: out of scope
    (op((4,)), op((4, 2)), None, r"A must be 2-D"),
    (op((2, 4)), op((4, 2), "float64"), None, "A and B differ in dtype: float32 and float64"),
    (op((2, 4), "float16"), op((4, 2), "float16"), None, "unsupported dtype float16"),
    (op((2, 4)), op((5, 2)), None, "inner dimensions differ: A is 2x4, B is 5x2"),
    (op((2, 4)), op((4, 2), strides=(4, 8)), None, r"B has strides \(4, 8\) for shape \(4, 2\); matmul takes "
     r"C-contiguous, or the transpose of a C-contiguous array \(layouts N and T\)"),
    (op((2, 4)), op((4, 2)), op((2, 2), strides=(4, 8)), "C is not C-contiguous"),
    (op((2, 4)), op((4, 2), device=1), None, "B is on cuda:1 and A on cuda:0"),
    (op((2, 4), device=-1), op((4, 2), device=-1), None, "A is not on a CUDA device"),
    (op((2, 4)), op((4, 2)), op((2, 3)), "C must be 2x2, got 2x3"),
    (op((2, 4)), op((4, 2)), op((2, 2), "int32"), "C has dtype int32"),
])
def test_operand_checks_refuse_with_one_line(A, B, C, message):
    with pytest.raises(OperandError, match=message):
        check_product(A, B, C)


@pytest.mark.parametrize("bias,message", [
    (op((4,)), r"bias must have shape \(5,\), one value per column of C; got \(4,\)"),
    (op((1, 5)), r"bias must have shape \(5,\)"),
    (op((5,), "float64"), "bias has dtype float64, A and B float32"),
    (op((5,), strides=(8,)), r"bias has strides \(8,\); pass a contiguous bias"),
    (op((5,), device=1), "bias is on cuda:1 and A on cuda:0"),
    (op((5,), device=-1), "bias is on the host and A on cuda:0"),
])
def test_bias_checks_refuse_with_one_line(bias, message):
    with pytest.raises(OperandError, match=message):
        check_bias(bias, 5, "float32", 0)
    check_bias(op((5,)), 5, "float32", 0)
    check_bias(op((1,), strides=(8,)), 1, "float32", 0)  # a stride along one element never matters


def test_graph_capture_without_a_plan_is_an_error(monkeypatch):
    monkeypatch.setattr(launch, "capturing", lambda stream: True)
    with pytest.raises(CaptureError, match="call matmul once with these operands before capturing"):
        front._refuse_during_capture(5, (2, 3, 4), "float32", 0)
