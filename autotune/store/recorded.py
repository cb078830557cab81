"""The file of recorded calls: each distinct product a program called through `matmul`, how
lookup served it, and how many times. `autotune.record` (autotune.call.recording) writes it;
`mmtune tune --recorded` and `mmtune warm --recorded` read it. Its one definition lives here, in
the store, the earliest stage those three share.

    {"mmtune_recorded": 1, "products": [{"device": "NVIDIA H200", "cc": "9.0", "sm_count": 132,
     "dtype": "float32", "precision": "ieee", "m": 256, "n": 256, "k": 256, "layout": "NT",
     "deterministic": false, "bias": true, "family": "vector", "config": {...}, "source": "exact",
     "calls": 1200}]}

`bias` (whether the calls added one, kernels.Kernel.with_bias) came after format 1's first
files: a product without it reads as having none. Products are listed most called first. Writing into a file that exists merges: the calls of one
product add up, so two runs of a program accumulate, and the newer run says how it was served.
Writers of one file take turns under a lock file beside it (`.NAME.lock`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from autotune.backends import Device
from autotune.errors import RecordedError, advice
from autotune.space.precision import PRECISIONS
from autotune.space.problem import Problem
from autotune.store.paths import exclusive, write_atomically
from kernels.contract import Config
from kernels.rules import DTYPE_NAMES, LAYOUTS

FORMAT = 1  # the value of the file's "mmtune_recorded" key
#: Recorded.source when the kernel store remembered the shape's config (autotune.store.shapes),
#: so lookup was not asked in that process
FROM_STORE = "store"


@dataclass(frozen=True)
class Recorded:
    """One product a program called: on which GPU, what it multiplied, the config that served it
    and where lookup found it, and how many calls."""

    device: str  # the GPU model as the cache names it; "simulator" under the simulator
    cc: str  # its compute capability, "9.0"; "" under the simulator
    sm_count: int
    dtype: str
    precision: str  # as the call asked for it, resolved (autotune.space.precision)
    m: int
    n: int
    k: int
    layout: str = "NN"
    deterministic: bool = False
    bias: bool = False  # the calls added a bias: their kernels are built with one
    family: str = ""
    config: dict = field(default_factory=dict)
    source: str = ""  # lookup's (exact, measured, model, ...), or FROM_STORE
    calls: int = 0

    @classmethod
    def served(cls, problem: Problem, gpu: Device, config: Config, source: str,
               deterministic: bool = False) -> Recorded:
        """A product as a call path plans it (no calls yet)."""
        return cls(device=gpu.name, cc=gpu.cc, sm_count=gpu.sm_count, dtype=problem.dtype,
                   precision=problem.precision, m=problem.m, n=problem.n, k=problem.k, layout=problem.layout,
                   deterministic=deterministic, family=config.family, config=config.params, source=source)

    @property
    def problem(self) -> Problem:
        return Problem(device=self.device, dtype=self.dtype, m=self.m, n=self.n, k=self.k, layout=self.layout,
                       precision=self.precision)

    @property
    def gpu(self) -> Device:
        return Device(self.device, self.cc, self.sm_count)


def _identity(product: Recorded) -> tuple:
    """What makes two records one product (their calls add up): all but how it was served."""
    return (product.device, product.cc, product.dtype, product.precision, product.m, product.n, product.k,
            product.layout, product.deterministic, product.bias)


def merge(older: list[Recorded], newer: list[Recorded]) -> list[Recorded]:
    """One record per product, most called first: the calls added up, served as the newer says."""
    merged: dict[tuple, Recorded] = {}
    for product in [*older, *newer]:
        key = _identity(product)
        before = merged.get(key)
        merged[key] = product if before is None else replace(product, calls=before.calls + product.calls)
    return sorted(merged.values(), key=lambda p: (-p.calls, _identity(p)))


def encode(products: list[Recorded]) -> bytes:
    """The file's text: one product a line, so that a reader (or a diff) sees one product at once."""
    lines = ",\n".join(json.dumps(asdict(p)) for p in products)
    return f'{{"mmtune_recorded": {FORMAT}, "products": [\n{lines}\n]}}\n'.encode()


def read(path: Path | str) -> list[Recorded]:
    """The products in a file of recorded calls, most called first; RecordedError if it is
    missing or malformed."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RecordedError(f"{path}: no such file; record one with autotune.record({str(path)!r}) or "
                            f"MMTUNE_RECORD={path}") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = advice(error) if isinstance(error, OSError) else "not a text file"
        raise RecordedError(f"{path}: {reason}") from None
    return parse(text, str(path))


def parse(text: str, where: str = "recorded calls") -> list[Recorded]:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise RecordedError(f"{where}: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("mmtune_recorded") != FORMAT or not isinstance(
            data.get("products"), list):
        raise RecordedError(f'{where}: not a file of recorded calls (a JSON object with "mmtune_recorded": '
                            f'{FORMAT} and a list "products"); autotune.record writes one')
    return merge([], [_product(entry, f"{where}: product {index + 1}") for index, entry in
                      enumerate(data["products"])])


_TYPES = {"str": str, "int": int, "bool": bool, "dict": dict}
_CHOICES = {"dtype": DTYPE_NAMES, "layout": LAYOUTS, "precision": PRECISIONS}
_LEAST = {"sm_count": 0, "m": 1, "n": 1, "k": 1, "calls": 1}
_LATER = {"bias"}  # fields files written before them lack


def _product(entry: object, where: str) -> Recorded:
    """One product of the file, every field checked; unknown keys are ignored."""
    if not isinstance(entry, dict):
        raise RecordedError(f"{where} is not a JSON object")
    values = {}
    for f in fields(Recorded):
        if f.name not in entry and f.name in _LATER:
            continue
        if f.name not in entry:
            raise RecordedError(f"{where} lacks {f.name!r}")
        value, kind = entry[f.name], _TYPES[f.type]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RecordedError(f"{where}: {f.name!r} must be a JSON {kind.__name__}, got {value!r}")
        if f.name in _CHOICES and value not in _CHOICES[f.name]:
            raise RecordedError(f"{where}: {f.name} {value!r} is none of {', '.join(_CHOICES[f.name])}")
        if f.name in _LEAST and value < _LEAST[f.name]:
            raise RecordedError(f"{where}: {f.name!r} must be at least {_LEAST[f.name]}, got {value}")
        values[f.name] = value
    return Recorded(**values)


def _locked(path: Path):
    """Writers of `path` one at a time: an exclusive lock on a file beside it."""
    return exclusive(path.with_name(f".{path.name}.lock"))


def add(path: Path | str, products: list[Recorded]) -> list[Recorded]:
    """Merge `products` into the file at `path` (created if missing) and return what it holds
    now; a file there that is not one of recorded calls is left as it was (RecordedError)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        older = read(path) if path.exists() else None
        if older is not None and not products:  # nothing to add: the file stays as it is
            return older
        merged = merge(older or [], products)
        write_atomically(path, encode(merged))
    return merged
