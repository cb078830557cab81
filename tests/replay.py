"""A measuring backend that replays recorded GFLOPS instead of running kernels, so the search
logic (samplers, warm start, failures, resume, finalists) is tested without a GPU or simulator."""

from __future__ import annotations

import json

from autotune.measure import Measurement, Timing, Verification


def config_key(family: str, config: dict) -> str:
    return f"{family}:{json.dumps(config, sort_keys=True)}"


class Replay:
    """measure(kernel, m, n, k, rng, repeat=...) from a table {config_key: gflops}.

    Configs missing from the table score `default`; those in `crash` raise as a bad launch
    would; those in `wrong` fail verification."""

    def __init__(self, table=None, default=1.0, crash=(), wrong=()):
        self.table = dict(table or {})
        self.default = default
        self.crash, self.wrong = crash, wrong  # containers of config keys
        self.calls: list[str] = []

    def __call__(self, kernel, m, n, k, rng, warmup=3, repeat=20, lock=None) -> Measurement:
        key = config_key(kernel.family, kernel.config)
        self.calls.append(key)
        if key in self.crash:
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS (replayed)")
        if key in self.wrong:
            return Measurement(Verification(False, 0.5, 1e-5), None, 0.0)
        gflops = self.table.get(key, self.default)
        ms = 2.0 * m * n * k / (gflops * 1e9) * 1e3
        return Measurement(Verification(True, 1e-7, 1e-5), Timing(ms, ms * 0.99, ms * 1.01, repeat, 1), gflops, 0.5)
