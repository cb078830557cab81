"""autotune.torch's C++ eager path (autotune/torch/native.cpp): built with the test extra's ninja
and the machine's C++ compiler, then the same answers, gradients and kernels as the Python path.
On the CPU, under the simulator, its autograd node runs and every product goes back to Python
(the table keeps CUDA launches only); with MMTUNE_TEST_GPU=1 the table launches them itself."""

import json
import shutil
import warnings

import pytest
from conftest import ON_GPU

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional  # noqa: E402

import autotune  # noqa: E402
import autotune.torch as mt  # noqa: E402
from autotune.backends import launch  # noqa: E402
from autotune.call import recording  # noqa: E402
from autotune.call.options import WAIT_ENV  # noqa: E402
from autotune.memos import Memos  # noqa: E402
from autotune.torch import native, ops  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to build the native path")


_BUILT = []  # the extension, once per process: a module fixture is made again after other modules


@pytest.fixture(scope="module")
def built():
    """The extension, built (or found built) once; each test turns it on by `on`."""
    if not _BUILT:
        _BUILT.append(ops.load_native())
        assert _BUILT[0] is not None, "MMTUNE_NATIVE=0 is set"
        native.extension = None  # other tests' products stay on the Python path
    return _BUILT[0]


@pytest.fixture
def on(built, monkeypatch):
    monkeypatch.setattr(native, "extension", built)
    monkeypatch.setenv(native.ENV, "1")
    monkeypatch.setenv(WAIT_ENV, "1")  # no stand-in serves, so the table takes every plan at once
    monkeypatch.delenv(ops.DISABLE_ENV, raising=False)
    torch.manual_seed(0)
    if ON_GPU:
        torch.backends.cuda.matmul.allow_tf32 = False
    return built


@pytest.fixture
def python_products(monkeypatch):
    """The products the Python path computed, as (A's shape, B's shape, A's strides, B's strides)."""
    calls = []
    compute = ops._computed

    def counted(a, b, bias, deterministic, precision):
        calls.append((tuple(a.shape), tuple(b.shape), a.stride(), b.stride()))
        return compute(a, b, bias, deterministic, precision)

    monkeypatch.setattr(ops, "_computed", counted)
    return calls


def _close(got, want, tolerance):
    assert (got - want).abs().max() <= tolerance * want.abs().max().clamp_min(1), (got - want).abs().max()


@pytest.mark.parametrize("dtype,lead,bias", [(torch.float64, (5,), True), (torch.float32, (2, 3), False)],
                         ids=["float64-2d-bias", "float32-3d-nobias"])
def test_linear_through_the_native_node_matches_nn_linear(on, python_products, dtype, lead, bias):
    reference = nn.Linear(7, 4, bias=bias, dtype=dtype, device=DEVICE)
    layer = mt.Linear(7, 4, bias=bias, dtype=dtype, device=DEVICE)
    layer.load_state_dict(reference.state_dict())
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    for step in range(2):  # on a GPU the second step launches from the C++ table
        x = torch.randn(*lead, 7, dtype=dtype, device=DEVICE, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        layer.zero_grad(), reference.zero_grad()
        got, want = layer(x), reference(x_ref)
        _close(got, want, tolerance)
        upstream = torch.randn_like(got)
        got.backward(upstream), want.backward(upstream)
        _close(x.grad, x_ref.grad, tolerance)
        _close(layer.weight.grad, reference.weight.grad, tolerance)
        if bias:
            _close(layer.bias.grad, reference.bias.grad, tolerance)
        assert layer.weight.grad.is_contiguous()
        node = got.grad_fn if len(lead) == 1 else got.grad_fn.next_functions[0][0]
        assert "Product" in node.name()  # the C++ node, not autograd.Function's
    rows = x.numel() // 7
    # x @ W.T (NT), dX = dC @ W (NN), dW = dC.T @ x (TN, in W's layout): transposed views read in place
    expected = [((rows, 7), (7, 4), (7, 1), (1, 7)), ((rows, 4), (4, 7), (4, 1), (7, 1)),
                ((4, rows), (rows, 7), (1, 4), (7, 1))]
    assert python_products == (expected if ON_GPU else expected * 2)  # on a GPU the table served step 2
    assert on.size() == (3 if ON_GPU else 0)


@pytest.mark.parametrize("case", ["2d", "3d", "2d-nobias", "views"])
def test_gradcheck_float64(on, case):
    x = torch.randn(*((2, 3, 4) if case == "3d" else (3, 4)), dtype=torch.float64, device=DEVICE)
    weight = torch.randn(5, 4, dtype=torch.float64, device=DEVICE)
    bias = None if case == "2d-nobias" else torch.randn(5, dtype=torch.float64, device=DEVICE)
    if case == "views":  # every other column of a wider x (copied once refused), a transposed weight
        x = torch.randn(3, 8, dtype=torch.float64, device=DEVICE)[:, ::2]
        weight = torch.randn(4, 5, dtype=torch.float64, device=DEVICE).t()
    inputs = tuple(t.requires_grad_() for t in (x, weight, bias) if t is not None)
    assert torch.autograd.gradcheck(mt.linear, inputs, fast_mode=not ON_GPU)


def test_a_backward_that_builds_a_graph_is_differentiable(on):
    """Double backward, against F.linear's: the forward saves what its inputs' requires_grad say
    (needs_input_grad would answer for the running backward)."""
    results = []
    for linear in (mt.linear, functional.linear):
        torch.manual_seed(2)
        x, weight = (torch.randn(3, 4, dtype=torch.float64, device=DEVICE, requires_grad=True) for _ in range(2))
        upstream = torch.randn(3, 3, dtype=torch.float64, device=DEVICE, requires_grad=True)
        grads = torch.autograd.grad(linear(x, weight[:3]), (x, weight), upstream, create_graph=True)
        results.append(torch.autograd.grad(sum(g.square().sum() for g in grads), (x, weight, upstream),
                                           allow_unused=True, materialize_grads=True))
    for ours, theirs in zip(*results):
        _close(ours, theirs, 1e-12)


def test_no_grad_products_skip_the_node(on):
    a, b = torch.randn(3, 4, device=DEVICE), torch.randn(4, 5, device=DEVICE)
    with torch.no_grad():
        c = mt.matmul(a.requires_grad_(), b)
    assert c.grad_fn is None and torch.allclose(c, a @ b, atol=1e-5)
    assert mt.matmul(a.detach(), b).grad_fn is None


def test_recording_counts_the_calls_the_table_launches(on, tmp_path, python_products):
    layer = mt.Linear(6, 3, device=DEVICE)
    x = torch.randn(4, 6, device=DEVICE)
    with torch.no_grad():
        layer(x)  # planned (and on a GPU kept by the table, which then counts its calls)
        with autotune.record(tmp_path / "calls.json"):
            layer(x), layer(x)
        layer(x)  # not counted
    assert len(python_products) == (1 if ON_GPU else 4)
    assert [product["calls"] for product in json.loads((tmp_path / "calls.json").read_text())["products"]] == [2]


def test_recording_collects_what_counters_counted(tmp_path, monkeypatch):
    """A call path counting its own calls (the C++ path's table) counts while a recording runs,
    and what it counted joins `counts` before a nested recording starts and before one ends."""

    class Counter:
        def __init__(self):
            self.on, self.pending = [], []

        def counting(self, on):
            self.on.append(on)

        def counted(self):
            found, self.pending = self.pending, []
            return found

    counter, plan = Counter(), object()
    monkeypatch.setattr(recording, "counters", [counter])
    outer = recording.start(tmp_path / "outer.json")
    counter.pending = [(plan, 2)]
    with recording.record(tmp_path / "inner.json") as inner:
        assert inner.start == {plan: 2}  # counted before the inner recording began
        counter.pending = [(plan, 3)]
    assert recording.counts == {plan: 5} and counter.on == [True]  # the outer recording still counts
    recording.stop(outer)
    assert counter.on == [True, False] and recording.counts is None


def test_the_library_lies_in_the_cache_and_imports_from_there(built):
    """Built in a directory of its own and moved into place (no build lock left behind by a
    process that exits mid-build); a later process imports the library without building."""
    library = native.build_directory() / f"{built.__name__}.so"
    assert library.is_file()
    assert hasattr(native._imported(built.__name__, library), "matmul")


def test_memos_clear_calls_the_hooks_of_memos_held_outside_python():
    memos, forgotten = Memos(), []
    memos.table("x")["key"] = 1
    memos.on_clear(lambda: forgotten.append(True))
    memos.clear()
    assert forgotten == [True] and memos.table("x") == {}


def test_native_off_keeps_the_python_node(built, monkeypatch):
    monkeypatch.setattr(native, "extension", None)
    monkeypatch.setenv(native.ENV, "0")
    assert native.load(ops._native_fallback) is None
    y = mt.matmul(torch.randn(3, 4, device=DEVICE, requires_grad=True), torch.randn(4, 2, device=DEVICE))
    assert type(y.grad_fn).__name__ == "_ProductBackward"  # autograd.Function's node, in Python


def test_a_build_that_fails_is_said_once_and_python_serves(monkeypatch):
    def no_compiler(fallback):
        raise RuntimeError("Error building extension\nc++: command not found")

    monkeypatch.setattr(native, "_load", no_compiler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native._load_noting_failure(ops._native_fallback)
    assert len(caught) == 1 and "c++: command not found" in str(caught[0].message)
    assert "MMTUNE_NATIVE=0" in str(caught[0].message)


def test_plans_give_their_launches_as_the_table_reads_them():
    plan = object.__new__(launch.Plan)
    plan.kernel, plan.grid, plan.block, plan.shared = 1234, (3, 2, 1), (128, 1, 1), 0
    plan.zero_words, plan.words, plan.slots = 6, [0] * 27, [4, 13, 22]
    (whole,) = plan.launches()
    assert whole == launch.Launch(function=1234, grid=(3, 2, 1), block=(128, 1, 1), shared=0, zero_words=6,
                                  words=[0] * 27, slots=[4, 13, 22])
    peeled = launch.RowParts([(plan, 0, 0), (plan, 640, 320)]).launches()
    assert [(part.a_offset, part.c_offset) for part in peeled] == [(0, 0), (640, 320)]


@pytest.mark.skipif(not ON_GPU, reason="20 training steps: a GPU run (the simulator takes seconds a product)")
def test_training_through_the_native_node_follows_nn_linear(on):
    import test_torch  # its training test, here with the C++ path on

    test_torch.test_training_with_patch_follows_nn_linear()
    # the distinct products, launched from the table: 3 forward, 2 dX (the first layer needs none)
    # and 3 dW, layers 2 and 3 sharing theirs
    assert on.size() == 8


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs")
def test_cuda_graph_captures_native_launches(on):
    import test_torch  # its capture test, here with the C++ path on

    test_torch.test_cuda_graph_captures_the_forward_pass()
    assert on.size() >= 2  # the plans built before the capture, launched from the table
