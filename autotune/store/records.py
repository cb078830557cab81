"""The data mmtune ships inside the package: tuned records and measured tables per GPU model, and
the bench suites.

autotune/data/records/<gpu>.json holds a GPU model's records in the export format (a JSON list
of cache rows, as `mmtune export` writes); autotune/data/measured/<gpu>.json.xz its measured table
(autotune.select.neighbours); autotune/data/suites.json names the bench suites. They are read through
importlib.resources, so an installed wheel finds them just as a checkout does.
`promote` merges tuned rows into a GPU's records file: the one command that changes them.

Rows also travel between caches in the export format (`export`, `import_file`), and a row that
cannot be a measurement (`implausible`: faster than its GPU's peak, an unknown family, params its
family cannot take) is refused on the way in and reported by `check_file` (`mmtune cache check`).
"""

from __future__ import annotations

import json
import lzma
import os
import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from autotune.backends import Device
from autotune.errors import CacheError, OutputError, PromoteError, RecordsError, advice
from autotune.store.cache import Cache
from autotune.store.paths import write_atomically
from autotune.store.rows import DEFAULT_LAYOUT, Row, read_records, replaces, stale, validate_records
from kernels.rules import Arch

DATA = resources.files("autotune") / "data"
SIMULATOR = "simulator"  # the device name of rows measured under Numba's CUDA simulator


def slug(device: str) -> str:
    """The records file name of a GPU model: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def shipped_rows(device: str | None = None, dtype: str | None = None) -> list[Row]:
    """The shipped records of `device` (all GPU models if None) and `dtype` (all if None)."""
    rows = []
    for entry in sorted(DATA.joinpath("records").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            found = validate_records(json.loads(entry.read_text()))
        except (ValueError, RecordsError) as error:
            raise RecordsError(f"shipped records {entry.name}: {error}") from None
        rows += [r for r in found if device in (None, r.device) and dtype in (None, r.dtype)]
    return rows


def measured_tables() -> list[dict]:
    """The shipped measured tables (autotune.select.neighbours), one per GPU model."""
    tables = sorted(DATA.joinpath("measured").iterdir(), key=lambda entry: entry.name)
    return [json.loads(lzma.decompress(entry.read_bytes())) for entry in tables if entry.name.endswith(".json.xz")]


#: how closely the GPU a row or table was measured on matches this one, best first (gpu_rank);
#: a row of another architecture is never served, a measured table may be (closest_table)
GPU_MATCHES = ("this GPU model", "same compute capability and SM count", "same compute capability",
               "another architecture")
ANOTHER_ARCHITECTURE = GPU_MATCHES.index("another architecture")


def gpu_rank(measured: Device, device: Device) -> int | None:
    """How closely the GPU a row or table was `measured` on matches `device` (an index into
    GPU_MATCHES), or None for another architecture."""
    if measured.name == device.name:
        return 0
    if not device.cc or measured.cc != device.cc:
        return None
    return 1 if measured.sm_count == device.sm_count else 2


def measured_on(data: Row | dict) -> Device:
    """The GPU a row or a measured table was measured on."""
    if isinstance(data, Row):
        return Device(data.device, data.cc or "", data.sm_count or 0)
    return Device(data["device"], data.get("cc") or "", data.get("sm_count") or 0)


def closest_table(tables: list[dict], dtype: str, device: Device) -> tuple[int, dict] | None:
    """The measured table of `dtype` (of `tables`, as measured_tables reads them) from the GPU
    closest to this one, and how close (an index into GPU_MATCHES): by gpu_rank within this
    architecture, else the nearest other architecture (same major version first, then the
    nearest minor one); None where none ships or this GPU's architecture is unknown."""
    ranked = []
    for table in tables:
        rank = gpu_rank(measured_on(table), device)
        if rank is None and device.cc and table.get("cc"):
            rank = ANOTHER_ARCHITECTURE
        if table["dtype"] == dtype and rank is not None:
            ranked.append(((rank, _cc_distance(table["cc"], device.cc), table["device"]), rank, table))
    if not ranked:
        return None
    _, rank, table = min(ranked, key=lambda entry: entry[0])
    return rank, table


def _cc_distance(one: str, other: str) -> tuple[int, int]:
    (major, minor), (other_major, other_minor) = (Arch.of(cc).pair for cc in (one, other or one))
    return abs(major - other_major), abs(minor - other_minor)


def suites() -> dict[str, list[str]]:
    """The bench suites: name -> shapes like '1024x1024x1024'."""
    return json.loads(DATA.joinpath("suites.json").read_text())


@dataclass(frozen=True)
class Peak:
    """The most a GPU model computes of a dtype in a precision, in TFLOPS (TOPS for int32)."""

    gpu: str  # a part of the device's name, as `mmtune best` shows it
    dtype: str
    precision: str
    tflops: float


#: what `import` and `cache check` hold a row's GFLOPS to (PEAK_MARGIN above is no measurement);
#: a device not named here is held to the highest peak listed for the dtype and precision
PEAKS = tuple(
    Peak(gpu, dtype, precision, tflops) for gpu in ("H100", "H200") for dtype, precision, tflops in (
        ("float32", "ieee", 67.0),  # FFMA on the CUDA cores (SXM)
        ("float32", "tf32x3", 165.0),  # three TF32 products per float32 one: a third of 495 dense
        ("float64", "ieee", 67.0),  # DMMA on the tensor cores
        ("int32", "ieee", 34.0),  # IMAD, at half the FFMA rate
    )
)
PEAK_MARGIN = 1.1


def peak_tflops(device: str, dtype: str, precision: str) -> float:
    """The peak (PEAKS) a row of `device`, `dtype` and `precision` is held to."""
    rates = [p for p in PEAKS if (p.dtype, p.precision) == (dtype, precision)] or [p for p in PEAKS if p.dtype == dtype]
    named = [p.tflops for p in rates if p.gpu in device]
    return max(named or [p.tflops for p in rates] or [max(p.tflops for p in PEAKS)])


def implausible(row: Row) -> str | None:
    """Why `row` (valid in form, validate_records) cannot be a measurement of today's kernels: a
    rate above PEAK_MARGIN times its GPU's peak, an unknown family, or params its family cannot
    take on a GPU of the row's compute capability; None if it can."""
    from autotune.space.configs import FAMILY_NAMES, GpuLimits, infeasibility  # imports numba

    peak = peak_tflops(row.device, row.dtype, row.precision)
    if row.gflops > PEAK_MARGIN * peak * 1000:
        return (f"gflops {row.gflops:g} is above {PEAK_MARGIN:g}x the {peak:g} TFLOPS peak of "
                f"{row.dtype} {row.precision} on {row.device}: not a measurement")
    if row.family not in FAMILY_NAMES:
        return f"unknown kernel family {row.family!r}; known: {', '.join(FAMILY_NAMES)}"
    try:
        reason = infeasibility(row.family, row.params, row.dtype, GpuLimits.for_cc(row.cc or None))
    except (ValueError, KeyError, TypeError) as error:
        reason = str(error) or type(error).__name__
    if reason:
        return f"{row.family} params {json.dumps(row.params, sort_keys=True)} are impossible: {reason}"
    return None


def check_file(path: Path) -> list[str]:
    """What is wrong with the cache file at `path`: SQLite's integrity, mmtune's mark and table, and
    every row (its params JSON, and whether it could be a measurement: implausible); an empty list
    if nothing is."""
    if not path.exists():
        return []
    try:
        cache = Cache(path)
        result = [row[0] for row in cache.db.execute("PRAGMA integrity_check").fetchall()]
    except (CacheError, sqlite3.DatabaseError) as error:
        return [str(error)]
    problems = [] if result == ["ok"] else [f"integrity check: {line}" for line in result]
    for row in cache.table.rows if cache.table.exists() else []:
        name = f"row {row['device']} {row['dtype']} {row['m']}x{row['n']}x{row['k']}"
        try:
            params = json.loads(row["params"])
        except (TypeError, ValueError):
            problems.append(f"{name}: params are not JSON")
            continue
        try:
            problem = implausible(validate_records([{**row, "params": params}])[0])
        except RecordsError as error:
            problem = str(error).removeprefix("row 0: ")
        if problem:
            problems.append(f"{name}: {problem}")
    cache.close()
    return problems


@dataclass(frozen=True)
class Cached:
    """A cache row, and whether it was measured on older kernel code than today's."""

    row: Row
    stale: bool


def cached(dtype: str | None = None, shape=None, layout: str | None = None,
           precision: str | None = None) -> list[Cached]:
    """The cache's rows (filtered as Cache.rows filters them), each marked stale where it was
    measured on older kernel code than today's: what `mmtune best` shows."""
    rows = Cache().rows(dtype=dtype, shape=shape, layout=layout, precision=precision)
    hashes = _source_hashes() if rows else {}
    return [Cached(row, stale(row, hashes)) for row in rows]


def export(out: Path | None = None, device: str | None = None, dtype: str | None = None) -> str:
    """The cache's rows (of `device` and `dtype`, where given) in the export format; written to
    `out` too, where given (a file replaced whole, or a device such as /dev/stdout written to)."""
    text = json.dumps([row.as_dict() for row in Cache().rows(device=device, dtype=dtype)], indent=1) + "\n"
    if out is not None:
        write_text(Path(out), text)
    return text


def write_text(path: Path, text: str) -> None:
    """Write a file the user named, into a directory that exists: a regular file is replaced at
    once (readers see the old one or the new one), anything else (a device, a pipe) written to.
    OutputError, in words that say what to do, where it cannot be."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory; give a file path like {path / 'rows.json'}")
    if not path.parent.is_dir():
        raise OutputError(f"cannot write {path}: the directory {path.parent} does not exist; create it first")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"cannot write {path}: it is read-only; give a writable path")
    try:
        if path.exists() and not path.is_file():
            with path.open("w") as stream:
                stream.write(text)
        else:
            write_atomically(path, text.encode())
    except OSError as error:
        raise OutputError(f"cannot write {path}: {advice(error)}") from None


@dataclass(frozen=True)
class Imported:
    rows: int  # in the file
    written: int  # of them, rows the cache took (new keys, faster or current rows)


def import_file(path: Path) -> Imported:
    """Merge the rows of an export file into the cache, keeping per key the current row of two,
    else the faster (Cache.merge); a file with a malformed or implausible row changes nothing."""
    rows = read_records(path)
    for i, row in enumerate(rows):
        problem = implausible(row)
        if problem:
            raise RecordsError(f"{path}: row {i}: {problem}")
    return Imported(len(rows), Cache().merge(rows, _source_hashes()))


@dataclass(frozen=True)
class Promotion:
    path: Path
    added: int  # rows of shapes the file did not hold
    replaced: int  # rows faster than the file's row of their key
    kept: int  # rows no faster than the file's row, which stays
    total: int  # rows in the file now


def select(source: Path | None = None, device: str | None = None, dtype: str | None = None, shape=None) -> list[Row]:
    """Rows to promote: from the export file `source`, or else the cache's, filtered. Without
    `device`, rows measured under the simulator are left out: their timings mean nothing."""
    rows = read_records(source) if source is not None else Cache().rows()
    chosen = [
        r for r in rows
        if (r.device == device if device is not None else r.device != SIMULATOR)
        and dtype in (None, r.dtype) and (shape is None or r.shape == tuple(shape))
    ]
    if not chosen:
        where = source if source is not None else f"the cache ({Cache().path})"
        wanted = [f"{name} {value}" for name, value in (("device", device), ("dtype", dtype)) if value is not None]
        wanted += ["shape " + "x".join(map(str, shape))] if shape is not None else []
        hint = "; rows of the simulator are promoted only with --device simulator" if device is None and rows else ""
        raise PromoteError(f"no rows to promote in {where}" + (f" for {', '.join(wanted)}" if wanted else "") + hint)
    return chosen


def promote(rows: list[Row], out: Path | None = None) -> list[Promotion]:
    """Merge `rows` into the records file of each row's GPU model in this source checkout (or
    all into `out`), keeping per (device, dtype, m, n, k, layout, precision) the faster row, or the current one where
    the other was measured on older kernel code; each file is sorted by that key and replaced
    atomically."""
    rows = validate_records(rows)
    if out is None:
        if any(r.device == SIMULATOR for r in rows):
            raise PromoteError("rows measured under the simulator do not belong in the shipped records; give --out FILE")
        targets: dict[Path, list[Row]] = {}
        for row in rows:
            targets.setdefault(_checkout_records() / f"{slug(row.device)}.json", []).append(row)
    else:
        targets = {Path(out): rows}
    return [_merge_into(path, new) for path, new in targets.items()]


def _checkout_records() -> Path:
    """The records directory of this source checkout; PromoteError if the package was installed
    (a wheel in site-packages): promoted records belong in the checkout the next release is built from."""
    records = DATA / "records"
    if not isinstance(records, Path):
        raise PromoteError(f"the package data at {records} is not a directory; give --out FILE")
    root = records.parent.parent.parent
    if not (root / "pyproject.toml").is_file():
        raise PromoteError(f"{records} is in an installed package, not a source checkout; "
                           "run mmtune promote from a checkout installed with `pip install -e .`, or give --out FILE")
    if not os.access(records, os.W_OK):
        raise PromoteError(f"{records} is not writable; give --out FILE")
    return records


def _merge_into(path: Path, new: list[Row]) -> Promotion:
    try:
        merged = {r.key: r for r in (read_records(path) if path.exists() else [])}
    except RecordsError as error:
        raise PromoteError(str(error)) from None
    hashes = _source_hashes()
    added = replaced = kept = 0
    for row in new:
        old = merged.get(row.key)
        if old is not None and not replaces(row, old, hashes):
            kept += 1
            continue
        added, replaced = added + (old is None), replaced + (old is not None)
        merged[row.key] = row
    rows = [_canonical(merged[key]) for key in sorted(merged)]
    try:
        lines = ",\n".join(json.dumps(row, separators=(",", ":")) for row in rows)  # a row a line, no spaces
        write_atomically(path, f"[\n{lines}\n]\n".encode())
    except OSError as error:
        raise PromoteError(f"cannot write {path}: {error}") from None
    return Promotion(path=path, added=added, replaced=replaced, kept=kept, total=len(rows))


def _source_hashes() -> dict[str, str]:
    import kernels  # imports numba: only promote, a maintainer's command, needs today's hashes

    return kernels.source_hashes()


def _canonical(row: Row) -> dict:
    """The row with every column, in the cache's column order and with params sorted, so the
    file's diffs show what changed and nothing else; the layout only where it is not NN (the
    layout of a row without one), the precision always."""
    values = {**row.as_dict(), "params": dict(sorted(row.params.items()))}
    return {c: value for c, value in values.items() if c != "layout" or value != DEFAULT_LAYOUT}
