"""`mmtune tune --recorded FILE`: tune the products a program called (autotune.record), most
called first, in one run.

Only products recorded on this GPU model are tuned; of those, the `top` most called (products
that differ only in `deterministic` or in a bias count as one). A product with an exact current row is
skipped: a cached or shipped row of this GPU model for its dtype, shape and layout, of a
precision its own allows, measured on today's kernel code. Each tune is `mmtune tune`'s own
(autotune.tune.tuner.tune), with the options given once for all: its study is named by the
product and resumed, so a rerun skips the products tuned since and resumes the one it stopped in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import kernels
from autotune import backends
from autotune.errors import MmtuneError, TuneError
from autotune.measure.isolation import Isolated
from autotune.space.precision import allows
from autotune.store import recorded
from autotune.store.cache import Cache
from autotune.store.recorded import Recorded
from autotune.store.records import shipped_rows
from autotune.store.rows import stale
from autotune.tune.tuner import TuneRequest, TuneResult, isolated_measurer, placement, tune
from autotune.tune.workers import Workers


@dataclass(frozen=True)
class RecordedTuning:
    """What `mmtune tune --recorded` asks: the file, how many products, and how to tune each."""

    path: Path | str
    #: the options of every product's tune; each product gives its shape, dtype, layout and precision
    how: TuneRequest
    top: int | None = None  # the most called products to tune; None: all


@dataclass(frozen=True)
class Outcome:
    """What became of one product: "tuning" (about to start), "tuned", "skipped" or "failed"; or
    "elsewhere": recorded on another GPU model, so not tuned here (index 0)."""

    product: Recorded
    index: int  # 1-based, among the products selected
    total: int
    status: str
    result: TuneResult | None = None
    reason: str = ""


def select(asked: RecordedTuning, device: str) -> tuple[list[Recorded], list[Recorded]]:
    """The products of the file recorded on GPU model `device`, one per tune (the calls of those
    that differ only in `deterministic` added up), most called first, the `top` first ones; and
    those recorded on other GPU models."""
    if asked.top is not None and asked.top < 1:
        raise TuneError(f"--top must be at least 1, got {asked.top}")
    products = recorded.merge([], [replace(p, deterministic=False, bias=False) for p in recorded.read(asked.path)])
    return [p for p in products if p.device == device][:asked.top], [p for p in products if p.device != device]


def request_for(how: TuneRequest, product: Recorded) -> TuneRequest:
    return replace(how, m=product.m, n=product.n, k=product.k, dtype=product.dtype, layout=product.layout,
                   precision=product.precision)


def has_exact_row(product: Recorded, cache: Cache) -> bool:
    """Whether a current row of this GPU model serves the product exactly (see the module's doc)."""
    hashes = kernels.source_hashes()
    rows = cache.rows(product.device, product.dtype, (product.m, product.n, product.k), product.layout)
    rows += [r for r in shipped_rows(product.device, product.dtype)
             if r.shape == (product.m, product.n, product.k) and r.layout == product.layout]
    return any(allows(product.precision, r.precision, product.k) and not stale(r, hashes) for r in rows)


def tune_recorded(asked: RecordedTuning, show_progress: bool = True) -> Iterator[Outcome]:
    """Tune the selected products one after the other, yielding each one's Outcome as it starts
    and as it ends. Bad options and a bad file are refused before any tune starts; a product
    whose tune fails is reported and the next one tuned."""
    backends.require_gpu()
    device = backends.current().device().name
    products, elsewhere = select(asked, device)
    for product in products:
        request_for(asked.how, product).check()
    for product in elsewhere:
        yield Outcome(product, 0, len(products), "elsewhere", reason=f"recorded on {product.device}, not on this "
                                                                    f"{device}: not tuned here")
    cache = Cache()
    try:
        yield from _tune_each(asked, products, cache, show_progress)
    finally:
        cache.close()


def _tune_each(asked: RecordedTuning, products: list[Recorded], cache: Cache, show_progress: bool) -> Iterator[Outcome]:
    """One set of worker processes and one measurer serve every product's tune: they start once,
    and keep their CUDA contexts and measuring children from one product to the next."""
    measurer = isolated_measurer(asked.how)
    try:
        with Workers(placement(asked.how), cache.path.parent) as workers:
            yield from _tune_with(asked, products, cache, Tuning(measurer, workers, show_progress))
    finally:
        measurer.close()


@dataclass(frozen=True)
class Tuning:
    """What every product's tune shares."""

    measurer: Isolated
    workers: Workers
    show_progress: bool


def _tune_with(asked: RecordedTuning, products: list[Recorded], cache: Cache, tuning: Tuning) -> Iterator[Outcome]:
    total = len(products)
    for index, product in enumerate(products, 1):
        if has_exact_row(product, cache):
            yield Outcome(product, index, total, "skipped", reason="an exact current row serves it")
            continue
        yield Outcome(product, index, total, "tuning")
        try:
            result = tune(request_for(asked.how, product), tuning.measurer, show_progress=tuning.show_progress,
                          workers=tuning.workers)
        except MmtuneError as error:
            yield Outcome(product, index, total, "failed", reason=str(error))
            continue
        if result.row is None:
            yield Outcome(product, index, total, "failed", result=result, reason=(
                f"no config verified in {result.trials} trials ({result.failed} failed); their errors are in "
                f"study {result.study_name!r}"))
        else:
            yield Outcome(product, index, total, "tuned", result=result)
