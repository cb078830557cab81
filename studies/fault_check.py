"""On a GPU: a real illegal-address fault in an isolated measurement fails that call only; the next
call gets a fresh process and measures normally.  python studies/fault_check.py"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import faults  # noqa: E402

import kernels  # noqa: E402
from autotune.isolation import Isolated, MeasureFailed  # noqa: E402
from autotune.measure import measure  # noqa: E402

def main() -> None:
    kernel = kernels.build("vector", kernels.vector.DEFAULT, "float32")
    rng = np.random.default_rng(0)
    faulty = Isolated(faults.illegal_address_measure, timeout_s=60)
    try:
        faulty(kernel, 1024, 1024, 1024, rng)
    except MeasureFailed as error:
        print("fault reported:", error)
    faulty.close()
    healthy = Isolated(measure, timeout_s=120)
    result = healthy(kernel, 1024, 1024, 1024, rng)
    print(f"next measurement in a fresh process: verified={result.verification.ok} {result.gflops:,.0f} GFLOPS")
    healthy.close()


if __name__ == "__main__":  # the measuring children re-import this module
    main()
