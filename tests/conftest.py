"""Tests run on the CPU under Numba's CUDA simulator; it must be on before numba is imported.

Set MMTUNE_TEST_GPU=1 to run the same tests on a real GPU instead (larger shapes there).
"""

import os
import zlib

ON_GPU = os.environ.get("MMTUNE_TEST_GPU") == "1"
if not ON_GPU:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if not ON_GPU:
    import autotune.backends.simulator  # noqa: E402,F401  its barriers, for kernels launched without the backend


def on(limits, sm_count: int, cc: str | None = None):
    """A GPU as the shape rules see it (autotune.space.configs.GpuLimits): `limits`, with SMs, of
    compute capability `cc` (default: the one `limits` carry, if any)."""
    from autotune.space.configs import GpuLimits

    return GpuLimits.of(limits, getattr(limits, "cc", "") if cc is None else cc, sm_count)


@pytest.fixture
def rng(request):
    """A generator seeded per test, so a failure reproduces."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own MMTUNE_CACHE (and so its own study journal), kernel store and fresh
    lookups."""
    path = tmp_path / "cache" / "cache.db"
    monkeypatch.setenv("MMTUNE_CACHE", str(path))
    monkeypatch.setenv("MMTUNE_KERNELS", str(tmp_path / "kernels"))
    import autotune

    autotune.clear()
    yield path
    autotune.clear()
