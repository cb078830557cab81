"""A measuring function with planted faults, for the isolation tests (it must live in a module the
measuring child process can import)."""

import os
import time

from autotune.measure.measurement import Measurement, Timing, Verification

CRASH = {"tpb": 8, "pad": 0}  # the process dies, as on a segfault or abort
HANG = {"tpb": 8, "pad": 1}  # never returns, as a kernel in an endless loop
POISON = {"tpb": 8, "pad": 2}  # raises as a launch after an illegal address does


def faulty_measure(kernel, shape, rng, warmup=3, repeat=20, lock=None):
    if kernel.config == CRASH:
        os._exit(3)
    if kernel.config == HANG:
        time.sleep(3600)
    if kernel.config == POISON:
        raise RuntimeError("[700] Call to cuLaunchKernel results in CUDA_ERROR_ILLEGAL_ADDRESS")
    gflops = float(kernel.config["tpb"] + kernel.config["pad"])
    return Measurement(Verification(True, 1e-7, 1e-5), Timing(median_ms=1.0, q25_ms=0.99, q75_ms=1.01, samples=repeat, launches_per_sample=1), gflops, 0.1)

