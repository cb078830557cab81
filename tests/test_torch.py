"""autotune.torch: the mmtune::matmul op, its autograd, Linear, patch, torch.compile and torch's
settings. On the CPU these run CPU tensors through mmtune's kernels under the CUDA simulator
(torch.compile with the aot_eager backend); with MMTUNE_TEST_GPU=1 the same tests run on CUDA
tensors with the default inductor backend, plus training, CUDA graphs and the profiler:

    MMTUNE_TEST_GPU=1 python -m pytest tests/test_torch.py
"""

import warnings

import pytest
from conftest import ON_GPU

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional  # noqa: E402

import autotune.torch as mt  # noqa: E402
from autotune.torch import native, ops  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"
BACKEND = "inductor" if ON_GPU else "aot_eager"
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.fixture(autouse=True)
def seeded(monkeypatch):
    """And the Python eager path: tests/test_native.py runs the C++ one."""
    monkeypatch.delenv(ops.DISABLE_ENV, raising=False)
    monkeypatch.setenv(native.ENV, "0")
    monkeypatch.setattr(native, "extension", None)
    torch.manual_seed(0)
    if ON_GPU:
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.fixture
def kernel_calls(monkeypatch):
    """The products mmtune's kernels computed, as (A's shape, B's shape, A's strides, B's strides),
    and whether the kernel added a bias."""
    calls = []
    compute = ops._computed

    def counted(a, b, bias, deterministic, precision):
        product = compute(a, b, bias, deterministic, precision)
        calls.append((tuple(a.shape), tuple(b.shape), a.stride(), b.stride(), bias is not None))
        return product

    monkeypatch.setattr(ops, "_computed", counted)
    return calls


def _close(got, want):
    scale = want.abs().max().clamp_min(1)
    assert (got - want).abs().max() <= TOLERANCE[want.dtype] * scale * 10, (got - want).abs().max()


def _mlp(sizes, dtype=torch.float32, bias=True):
    """Initialised on the CPU, so the CPU and a GPU run start from the same weights."""
    layers = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out, bias=bias, dtype=dtype), nn.Tanh()]
    return nn.Sequential(*layers[:-1]).to(DEVICE)


def _twin(model):
    """A copy of `model` with the same parameters, patched to mmtune."""
    twin = type(model)(*[_copy(module) for module in model]) if isinstance(model, nn.Sequential) else _copy(model)
    twin.load_state_dict(model.state_dict())
    mt.patch(twin)
    return twin


def _copy(module):
    if isinstance(module, nn.Linear):
        return nn.Linear(module.in_features, module.out_features, module.bias is not None, device=DEVICE,
                         dtype=module.weight.dtype)
    return type(module)()


@pytest.mark.parametrize("dtype,lead,bias", [(torch.float32, (5,), True), (torch.float64, (2, 3), True),
                                             (torch.float32, (2, 3), False), (torch.float64, (5,), False)],
                         ids=["float32-2d-bias", "float64-3d-bias", "float32-3d-nobias", "float64-2d-nobias"])
def test_linear_matches_nn_linear_forward_and_backward(dtype, lead, bias, kernel_calls):
    reference = nn.Linear(7, 4, bias=bias, dtype=dtype, device=DEVICE)
    layer = _twin(reference)
    x = torch.randn(*lead, 7, dtype=dtype, device=DEVICE, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    got, want = layer(x), reference(x_ref)
    assert got.shape == want.shape and got.dtype == dtype
    _close(got, want)
    upstream = torch.randn_like(got)
    got.backward(upstream)
    want.backward(upstream)
    _close(x.grad, x_ref.grad)
    _close(layer.weight.grad, reference.weight.grad)
    if bias:
        _close(layer.bias.grad, reference.bias.grad)
    rows = x.numel() // 7
    # forward x @ W.T (NT) + b, the bias added by the kernel, dX = dC @ W (NN), dW = dC.T @ x (TN, in W's
    # own layout): one kernel each, transposed views read in place
    assert kernel_calls == [((rows, 7), (7, 4), (7, 1), (1, 7), bias), ((rows, 4), (4, 7), (4, 1), (7, 1), False),
                            ((4, rows), (rows, 7), (1, 4), (7, 1), False)]
    assert layer.weight.grad.is_contiguous()


def test_linear_is_a_drop_in():
    torch.manual_seed(3)
    reference = nn.Linear(6, 5, device=DEVICE)
    torch.manual_seed(3)
    layer = mt.Linear(6, 5, device=DEVICE)
    assert isinstance(layer, nn.Linear)
    assert layer.state_dict().keys() == reference.state_dict().keys()
    for ours, theirs in zip(layer.parameters(), reference.parameters()):
        assert torch.equal(ours, theirs)  # the same initialisation, draw for draw
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(6, device=DEVICE)  # no batch dimension, as nn.Linear takes
    _close(layer(x), reference(x))
    assert "precision='tf32x3'" in repr(mt.Linear(2, 3, precision="tf32x3"))


@pytest.mark.parametrize("case", ["2d", "3d", "2d-nobias", "views"])
def test_gradcheck_float64(case):
    x = torch.randn(*((2, 3, 4) if case == "3d" else (3, 4)), dtype=torch.float64, device=DEVICE)
    weight = torch.randn(5, 4, dtype=torch.float64, device=DEVICE)
    bias = None if case == "2d-nobias" else torch.randn(5, dtype=torch.float64, device=DEVICE)
    if case == "views":  # every other column of a wider x, and a weight that is itself a transpose
        x = torch.randn(3, 8, dtype=torch.float64, device=DEVICE)[:, ::2]
        weight = torch.randn(4, 5, dtype=torch.float64, device=DEVICE).t()
        assert not x.is_contiguous() and not weight.is_contiguous()
    inputs = tuple(t.requires_grad_() for t in (x, weight, bias) if t is not None)

    def function(*tensors):
        return mt.linear(*tensors)

    assert torch.autograd.gradcheck(function, inputs, fast_mode=not ON_GPU)


def test_the_op_passes_torch_library_opcheck():
    a = torch.randn(3, 4, device=DEVICE, requires_grad=True)
    b = torch.randn(5, 4, device=DEVICE).t().requires_grad_()
    bias = torch.randn(5, device=DEVICE, requires_grad=True)
    torch.library.opcheck(torch.ops.mmtune.matmul.default, (a, b, bias, ""),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_compile_fullgraph_no_break_and_one_recompile():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    model = _mlp((6, 8, 3))
    twin = _twin(model)
    counter = CompileCounterWithBackend(BACKEND)
    compiled = torch.compile(twin, backend=counter, fullgraph=True)
    for batch in (2, 3, 9):
        x = torch.randn(batch, 6, device=DEVICE)
        y = compiled(x)
        _close(y, model(x))
        y.sum().backward()
    assert counter.frame_count <= 2  # the first batch, then one dynamic graph for all others
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(BACKEND)
    compiled = torch.compile(twin, backend=counter, fullgraph=True)
    for batch in (4, 7):
        x = torch.randn(batch, 6, device=DEVICE)
        torch._dynamo.mark_dynamic(x, 0)
        compiled(x)
    assert counter.frame_count == 1


def test_patch_swaps_in_place_and_unpatch_undoes(kernel_calls):
    model = nn.Sequential(nn.Linear(4, 6, device=DEVICE), nn.ReLU(), nn.Linear(6, 6, dtype=torch.float16),
                          nn.Sequential(nn.Linear(6, 3, device=DEVICE)))
    model.add_module("attention", nn.MultiheadAttention(6, 2))  # its out_proj is a subclass of nn.Linear
    parameters = list(model.parameters())
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)
    summary = mt.patch(model)
    assert summary.swapped == ["0", "3.0"]
    assert summary.kept == {"2": "its weight is torch.float16",
                            "attention.out_proj": "a NonDynamicallyQuantizableLinear, not an nn.Linear"}
    assert "2 nn.Linear layer(s) swapped, 2 left" in str(summary)
    assert type(model[0]) is mt.Linear and list(model.parameters()) == parameters
    before = model[0].weight.detach().clone()
    model[0](torch.randn(2, 4, device=DEVICE)).sum().backward()
    optimizer.step()  # the optimizer made before patching still trains the same parameters
    assert not torch.equal(model[0].weight, before) and len(kernel_calls) == 2
    assert mt.patch(model).swapped == []  # twice is once
    assert mt.unpatch(model) == ["0", "3.0"]
    assert type(model[0]) is nn.Linear and not hasattr(model[0], "precision")
    kernel_calls.clear()
    model[0](torch.randn(2, 4, device=DEVICE))
    assert kernel_calls == []


def test_mmtune_disable_turns_everything_off(monkeypatch, kernel_calls):
    monkeypatch.setenv("MMTUNE_DISABLE", "1")
    model = nn.Sequential(nn.Linear(4, 3, device=DEVICE))
    summary = mt.patch(model)
    assert summary.swapped == [] and summary.kept == {"0": "MMTUNE_DISABLE is set"}
    layer = mt.Linear(4, 3, device=DEVICE)
    x = torch.randn(2, 4, device=DEVICE)
    assert torch.equal(layer(x), functional.linear(x, layer.weight, layer.bias))
    assert torch.equal(mt.matmul(x, layer.weight.t()), x @ layer.weight.t())
    assert kernel_calls == []


def test_autocast_defers_to_f_linear(kernel_calls):
    layer = mt.Linear(8, 4, device=DEVICE)
    x = torch.randn(3, 8, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        got = layer(x)
        want = functional.linear(x, layer.weight, layer.bias)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert kernel_calls == []


def test_torch_settings_choose_precision_and_determinism(monkeypatch):
    seen = []
    monkeypatch.setattr(ops, "_computed", lambda a, b, bias, deterministic, precision: seen.append(
        {"deterministic": deterministic, "precision": precision}) or a @ b)
    a, b = torch.randn(3, 4, device=DEVICE), torch.randn(4, 2, device=DEVICE)
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        mt.matmul(a, b)
        mt.matmul(a.double(), b.double())
        torch.set_float32_matmul_precision("highest")
        with _deterministic():
            mt.matmul(a, b)
        mt.matmul(a, b, precision="tf32x3")
    finally:
        torch.set_float32_matmul_precision(previous)
    assert seen == [{"deterministic": False, "precision": "tf32x3"}, {"deterministic": False, "precision": "ieee"},
                    {"deterministic": True, "precision": "ieee"}, {"deterministic": False, "precision": "tf32x3"}]


class _deterministic:
    def __enter__(self):
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(False)


@pytest.mark.skipif(ON_GPU, reason="CPU tensors without the simulator")
def test_cpu_tensors_without_the_simulator_use_torch_once_noted(monkeypatch):
    monkeypatch.setattr(ops.backends, "simulated", lambda: False)
    monkeypatch.setattr(ops, "_simulated", None)  # mmtune's kernels are not called
    monkeypatch.setattr(ops, "_noted_cpu", [])
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = mt.matmul(a, b), mt.matmul(a, b)
    assert torch.equal(first, a @ b) and torch.equal(second, a @ b)
    assert len(caught) == 1 and "CPU tensors use torch's own matmul" in str(caught[0].message)


def test_bad_operands_say_what_is_wrong():
    a = torch.randn(3, 4, device=DEVICE)
    with pytest.raises(ValueError, match=r"B of \(K, N\)"):
        mt.matmul(a, torch.randn(2, 4, 5, device=DEVICE))
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        mt.matmul(a, torch.randn(4, 5, device=DEVICE), torch.randn(4, device=DEVICE))


def test_linear_refuses_what_f_linear_refuses_with_its_words(kernel_calls):
    layer = mt.Linear(4, 3, device=DEVICE)
    for x in (torch.randn(2, 5, device=DEVICE), torch.randn(2, 4, device=DEVICE, dtype=torch.float64)):
        with pytest.raises(RuntimeError) as ours:
            layer(x)
        with pytest.raises(RuntimeError) as theirs:
            functional.linear(x, layer.weight, layer.bias)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError, match="size of the tensor"):
        mt.linear(torch.randn(2, 4, device=DEVICE), layer.weight, torch.randn(2, device=DEVICE))
    assert kernel_calls == []


def test_torch_func_transforms_reach_the_op_not_the_eager_shortcut():
    """The eager path applies its autograd Function without the wrapper that checks for torch.func
    transforms; under one, the op runs instead and torch says what it lacks (without this, an
    internal assert of functorch's)."""
    W = torch.randn(5, 4, device=DEVICE)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: mt.matmul(x, W).sum())(torch.randn(3, 5, device=DEVICE))


@pytest.mark.skipif(not ON_GPU, reason="20 training steps: a GPU run (the simulator takes seconds a product)")
def test_training_with_patch_follows_nn_linear():
    torch.manual_seed(1)
    model = _mlp((64, 256, 256, 256, 10))
    twin = _twin(model)
    x = torch.randn(512, 64)
    x, target = x.to(DEVICE), torch.relu(x[:, :10]).to(DEVICE)
    losses = []
    for net in (model, twin):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0)
        trace = []
        for _ in range(20):
            optimizer.zero_grad()
            loss = functional.mse_loss(net(x), target)
            loss.backward()
            optimizer.step()
            trace.append(loss.item())
        losses.append(trace)
    theirs, ours = losses
    assert ours[-1] <= 0.8 * ours[0]
    assert all(abs(o - t) <= 1e-4 * abs(t) for o, t in zip(ours, theirs)), (ours, theirs)


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs")
def test_cuda_graph_captures_the_forward_pass():
    twin = _twin(_mlp((32, 64, 16)))
    x = torch.randn(8, 32, device=DEVICE)
    with torch.no_grad():
        want = twin(x)  # builds the plans: a capture may not compile
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = twin(x)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        _close(out, twin(x))
        assert not torch.equal(out, want)


@pytest.mark.skipif(not ON_GPU, reason="the profiler's CUDA kernels")
def test_profiler_shows_one_kernel_per_gradient_and_no_copies():
    """And the forward pass with a bias is one kernel: the bias is added in its epilogue."""
    layer = mt.Linear(256, 128, device=DEVICE)
    x = torch.randn(64, 256, device=DEVICE, requires_grad=True)
    layer(x).sum().backward()  # plans built
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        with torch.no_grad():
            layer(x)
        torch.cuda.synchronize()
    names = [event.name for event in profile.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    assert len([name for name in names if name.startswith("kernels::")]) == 1 and len(names) <= 2, names
    assert not [name for name in names if not name.startswith("kernels::") and "Memset" not in name], names
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        y = layer(x)
        y.backward(torch.ones_like(y))
        torch.cuda.synchronize()
    names = [event.name for event in profile.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    ours = [name for name in names if name.startswith("kernels::")]  # the families' names, demangled
    assert len(ours) == 3, names  # forward, dA, dW
    assert not [name for name in names if "gemm" in name.lower()], names  # no cuBLAS
    assert not [name for name in names if "copy" in name.lower() or "Memcpy" in name], names


def test_the_example_trains_and_records(tmp_path, monkeypatch, capsys):
    """docs/examples/train_mlp.py run as a script (under the simulator on the CPU)."""
    import json
    import runpy
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "train_mlp.py"
    products = tmp_path / "products.json"
    monkeypatch.setattr(sys, "argv", [str(example), "--width", "16", "--batch", "8", "--steps", "3", "--record",
                                      str(products)])
    runpy.run_path(str(example), run_name="__main__")
    printed = capsys.readouterr().out
    losses = [float(line.split()[-1]) for line in printed.splitlines() if line.startswith("step ")]
    assert "2 nn.Linear layer(s) swapped" in printed and len(losses) == 3 and losses[-1] < losses[0]
    assert [product["calls"] for product in json.loads(products.read_text())["products"]] == [3] * 5


def test_make_fx_traces_the_op_and_its_backward_without_torch_compile():
    """make_fx (as AOT autograd traces a backward, with is_compiling() false in some torch
    versions) must record the op itself, never run its body on traced tensors."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(3, 4, device=DEVICE, requires_grad=True)
    weight = torch.randn(5, 4, device=DEVICE, requires_grad=True)

    def forward_and_backward(x, weight):
        y = mt.linear(x, weight)
        return torch.autograd.grad(y.sum(), (x, weight))

    graph = make_fx(forward_and_backward)(x, weight)
    calls = [node for node in graph.graph.nodes if node.target == torch.ops.mmtune.matmul.default]
    assert len(calls) == 3  # the product, dX and dW
    for got, want in zip(graph(x, weight), forward_and_backward(x, weight)):
        _close(got, want)
