"""A family from outside the kernels package, registered through MMTUNE_FAMILIES (the contract:
kernels/base.py), is tuned, looked up and called as the shipped ones are, with nothing else in
the tree edited or patched."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the smallest family: one thread per element of C (as kernels/naive.py), one parameter
TOY_FAMILY = '''
from numba import cuda

from kernels.base import DeviceLimits, Family, Kernel, numba_type, product_shape, tile_origin

SPACE = {"side": [4, 8]}
DEFAULT = {"side": 8}


def restrict(config: dict, dtype: str, limits: DeviceLimits) -> str | None:
    threads = config["side"] ** 2
    return f"{threads} threads > {limits.max_threads_per_block}" if threads > limits.max_threads_per_block else None


def build(config: dict, dtype: str, layout: str = "NN", offset_bits: int = 32, unaligned: str = "") -> Kernel:
    side, acc_t = config["side"], numba_type(dtype)
    A_T, B_T = layout[0] == "T", layout[1] == "T"
    origin, dims = tile_origin(side, side), product_shape(layout)

    def toy_matmul(A, B, C):
        M, N, K = dims(A, B)
        row0, col0 = origin(M, N)
        row, col = row0 + cuda.threadIdx.y, col0 + cuda.threadIdx.x
        if row < M and col < N:
            acc = acc_t(0)
            for i in range(K):
                acc += (A[i, row] if A_T else A[row, i]) * (B[col, i] if B_T else B[i, col])
            C[row, col] = acc

    return Kernel("toy", dict(config), dtype, toy_matmul, block=(side, side), tile=(side, side), layout=layout,
                  offset_bits=offset_bits)


FAMILY = Family("toy", SPACE, DEFAULT, restrict, build, first_guess=9)
'''

#: run with the toy family registered: lookup names it, matmul computes with it
CHECK = '''
import json
import numpy as np
import autotune, kernels

choice = autotune.lookup(9, 7, 5)
rng = np.random.default_rng(0)
A, B = rng.standard_normal((9, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
C = autotune.matmul(A, B)
print(json.dumps({"families": list(kernels.FAMILIES), "family": choice.family, "source": choice.source,
                  "error": float(np.abs(C - A @ B).max())}))
'''


def run(code: list[str], tmp_path: Path, families: str = "toyfam.toy") -> subprocess.CompletedProcess:
    """Python with `code`, the families' modules registered, on the simulator pretending to be an H200,
    with a cache and a kernel store in tmp_path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "NUMBA_ENABLE_CUDASIM": "1",
           "MMTUNE_PRETEND_GPU": "NVIDIA H200;9.0;132", "MMTUNE_FAMILIES": families,
           "MMTUNE_CACHE": str(tmp_path / "cache" / "cache.db"), "MMTUNE_KERNELS": str(tmp_path / "kernels")}
    return subprocess.run([sys.executable, *code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)


def test_a_family_outside_the_package_is_tuned_looked_up_and_called(tmp_path):
    package = tmp_path / "toyfam"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(textwrap.dedent(TOY_FAMILY))

    tuned = run(["-m", "autotune", "tune", "--m", "9", "--n", "7", "--k", "5", "--family", "toy", "--trials", "2",
                 "--jobs", "1", "--simulate"], tmp_path)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    assert "toy" in tuned.stdout

    checked = run(["-c", CHECK], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    assert "toy" in found["families"] and "register" in found["families"]
    assert (found["family"], found["source"]) == ("toy", "exact")
    assert found["error"] < 1e-4


def test_a_registered_module_must_define_a_family_of_a_new_name(tmp_path):
    package = tmp_path / "toyfam"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "empty.py").write_text("")
    (package / "twin.py").write_text("import dataclasses\nfrom kernels import naive\nFAMILY = dataclasses.replace(naive.FAMILY)\n")
    for module, error in (("toyfam.empty", "MMTUNE_FAMILIES names toyfam.empty, which defines no FAMILY"),
                          ("toyfam.twin", "more than one family is named 'naive'")):
        found = run(["-c", "import kernels; kernels.FAMILIES"], tmp_path, module)
        assert found.returncode != 0 and error in found.stderr, found.stderr
