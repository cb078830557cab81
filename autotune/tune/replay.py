"""Replaying recorded results instead of running kernels: a measurer that looks GFLOPS up in a
table (as KernelTuner's simulation runner does), so the search itself (samplers, warm start,
failures, resume, finalists) runs without a GPU, and exhaustive sweeps tell how fast the tuner
gets near their best.
"""

from __future__ import annotations

import json
import lzma
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from autotune.measure.measurement import Measurement, Timing, Verification
from autotune.tune.tuner import TuneRequest, tune


def config_key(family: str, config: dict) -> str:
    return f"{family}:{json.dumps(config, sort_keys=True)}"


class Replay:
    """measure(kernel, shape, rng, repeat=...) from a table {config_key: gflops}.

    Configs missing from the table score `default`; those in `crash` raise as a bad launch
    would; those in `wrong` fail verification."""

    def __init__(self, table=None, default=1.0, crash=(), wrong=()):
        self.table = dict(table or {})
        self.default = default
        self.crash, self.wrong = crash, wrong  # containers of config keys
        self.calls: list[str] = []

    def __call__(self, kernel, shape, rng, warmup=3, repeat=20, lock=None) -> Measurement:
        key = config_key(kernel.family, kernel.config)
        self.calls.append(key)
        if key in self.crash:
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS (replayed)")
        if key in self.wrong:
            return Measurement(Verification(False, 0.5, 1e-5), None, 0.0)
        gflops = self.table.get(key, self.default)
        m, n, k = shape
        ms = 2.0 * m * n * k / (gflops * 1e9) * 1e3
        timing = Timing(median_ms=ms, q25_ms=ms * 0.99, q75_ms=ms * 1.01, samples=repeat, launches_per_sample=1)
        return Measurement(Verification(True, 1e-7, 1e-5), timing, gflops, 0.5)


def read_rows(path: Path | str) -> list[dict]:
    """The rows of a JSON-lines file, xz-compressed if its name ends in .xz (as studies/ keeps
    large ones), e.g. an exhaustive sweep's rows.jsonl.xz."""
    opener = lzma.open if str(path).endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def median_table(rows: list[dict]) -> dict[str, float]:
    """{config_key: GFLOPS} of a sweep's rows ({"family", "config", "gflops"}), the median where a
    config was measured more than once."""
    measured = defaultdict(list)
    for row in rows:
        measured[config_key(row["family"], row["config"])].append(row["gflops"])
    return {key: statistics.median(values) for key, values in measured.items()}


def best_found(table: dict, request: TuneRequest, cache_path: Path | str | None = None) -> float:
    """The GFLOPS of the config `mmtune tune` picks for `request` (one worker) with the table's
    results replayed (configs outside the table score 0)."""
    result = tune(replace(request, jobs=1), Replay(table, default=0.0), cache_path, show_progress=False)
    return result.row.gflops
