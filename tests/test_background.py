"""No first-call stall: kernels built in a process of their own (autotune.store.background), the
stored kernels that stand in meanwhile, and the driver call path serving a stand-in and then
switching to the chosen kernel (autotune.call.front, with fake operands and launches: launching
needs a GPU, tests/test_gpu_calls.py)."""

import types
from dataclasses import replace

import pytest

import autotune
from autotune.backends import launch
from autotune.call import front
from autotune.errors import OperandError
from autotune.store import background, cubins
from kernels import Config
from kernels.rules import Arch

NAIVE = Config.of("naive", {"block_x": 16, "block_y": 16})


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTUNE_KERNELS", str(tmp_path / "kernels"))
    monkeypatch.setattr(background, "_builds", {})
    return tmp_path / "kernels"


def key_of(config: Config, layout: str = "NN", shape=(96, 80, 64)) -> cubins.BuildKey:
    return cubins.BuildKey.of(config, "float32", shape, layout, Arch(9, 0))


def test_a_kernel_builds_in_a_child_process_and_stands_in_for_other_configs(root, monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM")  # the child compiles for sm_90a (NVVM, nvJitLink: no GPU)
    build = background.start(key_of(NAIVE))
    assert background.start(key_of(NAIVE)) is build  # one build per kernel in a process
    assert build.process.wait(timeout=600) == 0 and build.done()
    entry = build.entry()
    assert entry is not None and entry.key == cubins.read(cubins.key_parts(key_of(NAIVE))).key
    other = key_of(Config.of("register", {"bm": 64, "bn": 64, "bk": 8, "tm": 4, "tn": 4}))
    assert [found.key for found in background.stand_ins(other, (96, 80))] == [entry.key]
    assert background.config_of(entry) == NAIVE
    # another layout, unaligned rows, a bias
    for product in (key_of(NAIVE, layout="NT"), key_of(NAIVE, shape=(96, 80, 66)), replace(key_of(NAIVE), bias=True)):
        found = background.stand_ins(product, (96, 80))
        assert entry.key not in [e.key for e in found]  # computes another product: only the shipped kernel stands in
        assert [(e.header["parts"]["layout"], e.header["parts"]["unaligned"], e.bias) for e in found] == [
            (product.layout, product.unaligned, product.bias)]
    (root / "junk.cubin").write_bytes(b"not an entry")
    assert len(background.stand_ins(other, (96, 80))) == 1


def test_a_failed_build_is_not_retried_in_the_same_process(root):
    broken = key_of(Config.of("naive", {"block_x": 0, "block_y": 16}))
    build = background.start(broken)
    build.process.wait(timeout=600)
    assert build.done() and build.failed and build.entry() is None
    assert background.start(broken) is build


def test_stand_ins_are_ranked_by_family_then_by_the_padding_of_their_tiles():
    def entry(family, tile):
        return cubins.Entry(family + str(tile), {"parts": {"family": family}, "tile": list(tile)}, b"")

    ranked = sorted([entry("vector", (128, 128)), entry("register", (64, 64)), entry("vector", (64, 32))],
                    key=background.rank(Config.of("vector", {}), (96, 80)))
    assert [e.key for e in ranked] == ["vector(64, 32)", "vector(128, 128)", "register(64, 64)"]


# The call path -----------------------------------------------------------------------------

class FakeBuild:
    def __init__(self):
        self.finished = False
        self.waited = False
        self.result = None

    def done(self):
        return self.finished

    def wait(self):
        self.waited = self.finished = True

    def entry(self):
        return self.result if self.finished else None

    @property
    def failed(self):
        return self.finished and self.result is None


@pytest.fixture
def driver(monkeypatch):
    """front's driver path with fakes below find_entry: a store holding only `stored`, stand-ins,
    builds and launch plans that say which entry they launch."""
    from test_launch import FakeTensor, fake_modules

    fake_modules(monkeypatch)
    autotune.clear()
    state = types.SimpleNamespace(stored={}, stand_ins=[], builds=[], launched=[], capturing=False)
    chosen = Config.of("vector", {"bm": 128})
    monkeypatch.setattr(front, "backend", lambda: "driver")
    monkeypatch.setattr(front, "_identity", lambda device: front.backends.Device("NVIDIA H200", "9.0", 132))
    monkeypatch.setattr(launch, "device", lambda ordinal: types.SimpleNamespace(enter=lambda: None,
                                                                               leave=lambda previous: None))
    monkeypatch.setattr(launch, "capturing", lambda stream: state.capturing)
    monkeypatch.setattr(front.shapes, "recall", lambda problem: chosen)
    monkeypatch.setattr(front.cubins, "stored", lambda key: state.stored.get(key.config))
    monkeypatch.setattr(front.cubins, "get", lambda key: state.stored.setdefault(key.config, _entry(key.config)))
    monkeypatch.setattr(background, "stand_ins", lambda key, shape: list(state.stand_ins))

    def start(key):
        build = FakeBuild()
        build.key = key
        state.builds.append(build)
        return build

    monkeypatch.setattr(background, "start", start)
    monkeypatch.setattr(front, "entry_plan", lambda device, entry, shape, dtype, layout="NN": types.SimpleNamespace(
        launch=lambda a, b, c, stream, bias: state.launched.append(entry.key + " with a bias" * bool(bias))))
    monkeypatch.setattr(front, "peeled_rows", lambda m, params, layout: 0)
    monkeypatch.delenv(front.WAIT_ENV, raising=False)
    state.operands = (FakeTensor((96, 64), device=0, pointer=1), FakeTensor((64, 80), device=0, pointer=2),
                      FakeTensor((96, 80), device=0, pointer=3))
    state.chosen = chosen
    yield state
    autotune.clear()


def _entry(config: Config) -> cubins.Entry:
    return cubins.Entry(f"{config.family}-kernel", {"parts": {"family": config.family, "config": config.params_json},
                                                    "tile": [64, 64]}, b"")


def test_a_first_call_is_served_by_a_stand_in_then_switches_to_the_chosen_kernel(driver):
    A, B, C = driver.operands
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    front.matmul(A, B, out=C)
    front.matmul(A, B, out=C)
    assert driver.launched == ["register-kernel", "register-kernel"] and len(driver.builds) == 1
    build = driver.builds[0]
    assert build.key.config == driver.chosen
    build.result = driver.stored[driver.chosen] = _entry(driver.chosen)
    driver.capturing = True  # no switch while a CUDA graph is captured: it would load a module
    build.finished = True
    front.matmul(A, B, out=C)
    driver.capturing = False
    front.matmul(A, B, out=C)
    front.matmul(A, B, out=C)
    assert driver.launched[2:] == ["register-kernel", "vector-kernel", "vector-kernel"]


def test_a_call_with_a_bias_is_served_by_kernels_built_with_one(driver):
    """The bias rides on the plan's launch; the build (and the store key) is the chosen config's with
    a bias, which its stand-ins share (stand_ins filters on the key)."""
    from test_launch import FakeTensor

    A, B, C = driver.operands
    bias = FakeTensor((80,), device=0, pointer=4)
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    front.matmul(A, B, out=C, bias=bias)
    front.matmul(A, B, out=C)
    assert driver.launched == ["register-kernel with a bias", "register-kernel"]
    assert [build.key.bias for build in driver.builds] == [True, False]
    with pytest.raises(OperandError, match=r"bias must have shape \(80,\)"):
        front.matmul(A, B, out=C, bias=FakeTensor((96,), device=0, pointer=4))


def test_with_nothing_to_stand_in_the_call_builds_as_before(driver):
    A, B, C = driver.operands
    front.matmul(A, B, out=C)
    assert driver.launched == ["vector-kernel"] and driver.builds == []


@pytest.mark.parametrize("how", ["wait", "env", "deterministic"])
def test_wait_mmtune_wait_and_deterministic_calls_never_take_a_stand_in(driver, monkeypatch, how):
    A, B, C = driver.operands
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    if how == "env":
        monkeypatch.setenv(front.WAIT_ENV, "1")
    front.matmul(A, B, out=C, wait=how == "wait", deterministic=how == "deterministic")
    assert driver.launched == ["vector-kernel"] and driver.builds == []


def test_a_waiting_call_finishes_a_build_under_way(driver):
    A, B, C = driver.operands
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    front.matmul(A, B, out=C)
    build = driver.builds[0]
    build.result = driver.stored[driver.chosen] = _entry(driver.chosen)
    front.matmul(A, B, out=C, wait=True)
    assert build.waited and driver.launched == ["register-kernel", "vector-kernel"]


def test_a_failed_build_keeps_the_stand_in_and_says_so_once(driver):
    A, B, C = driver.operands
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    front.matmul(A, B, out=C)
    driver.builds[0].finished = True  # and no entry: it failed
    with pytest.warns(UserWarning, match="could not build"):
        front.matmul(A, B, out=C)
    front.matmul(A, B, out=C)
    assert driver.launched == ["register-kernel"] * 3 and len(driver.builds) == 1


def test_a_stand_in_the_driver_cannot_load_gives_way_to_the_chosen_kernel(driver, monkeypatch):
    """A shipped cubin an older driver refuses (autotune.store.prebuilt): the call compiles instead."""
    A, B, C = driver.operands
    driver.stand_ins = [_entry(Config.of("register", {"bm": 64}))]
    planned = front.entry_plan

    def entry_plan(device, entry, shape, dtype, layout="NN"):
        if entry.key == "register-kernel":
            raise front.LaunchError("cuLibraryLoadData failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        return planned(device, entry, shape, dtype, layout)

    monkeypatch.setattr(front, "entry_plan", entry_plan)
    with pytest.warns(UserWarning, match="a stand-in kernel does not load"):
        front.matmul(A, B, out=C)
    front.matmul(A, B, out=C)
    assert driver.launched == ["vector-kernel"] * 2 and driver.builds[0].waited  # the build under way, not another
