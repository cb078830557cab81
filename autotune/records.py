"""The data mmtune ships inside the package: tuned records and measured tables per GPU model, and
the bench suites.

autotune/data/records/<gpu>.json holds a GPU model's records in the export format (a JSON list
of cache rows, as `mmtune export` writes); autotune/data/measured/<gpu>.json its measured table
(autotune.neighbours); autotune/data/suites.json names the bench suites. They are read through
importlib.resources, so an installed wheel finds them just as a checkout does.
`promote` merges tuned rows into a GPU's records file: the one command that changes them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from autotune.cache import COLUMNS, DEFAULT_LAYOUT, Cache, RecordsError, decode, read_records, replaces, row_key, validate_records
from autotune.paths import write_atomically

DATA = resources.files("autotune") / "data"
SIMULATOR = "simulator"  # the device name of rows measured under Numba's CUDA simulator


class PromoteError(ValueError):
    """Rows that cannot be promoted, or a records file that cannot be written."""


def slug(device: str) -> str:
    """The records file name of a GPU model: 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def shipped_rows(device: str | None = None, dtype: str | None = None) -> list[dict]:
    """The shipped records of `device` (all GPU models if None) and `dtype` (all if None)."""
    rows = []
    for entry in sorted(DATA.joinpath("records").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        try:
            found = validate_records(json.loads(entry.read_text()))
        except (ValueError, RecordsError) as error:
            raise RecordsError(f"shipped records {entry.name}: {error}") from None
        rows += [decode(r) for r in found if device in (None, r["device"]) and dtype in (None, r["dtype"])]
    return rows


def measured_tables() -> list[dict]:
    """The shipped measured tables (autotune.neighbours), one per GPU model."""
    return [json.loads(entry.read_text()) for entry in sorted(DATA.joinpath("measured").iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".json")]


#: how closely the GPU a row or table was measured on matches this one, best first (gpu_rank);
#: a row of another architecture is never served, a measured table may be (closest_table)
GPU_MATCHES = ("this GPU model", "same compute capability and SM count", "same compute capability",
               "another architecture")
ANOTHER_ARCHITECTURE = GPU_MATCHES.index("another architecture")


def gpu_rank(row: dict, device: str, cc: str, sm_count: int) -> int | None:
    """How closely the GPU `row` was measured on matches GPU model `device` of compute capability
    `cc` with `sm_count` SMs (an index into GPU_MATCHES), or None for another architecture."""
    if row["device"] == device:
        return 0
    if not cc or row.get("cc") != cc:
        return None
    return 1 if row.get("sm_count") == sm_count else 2


def closest_table(tables: list[dict], dtype: str, device: str, cc: str, sm_count: int) -> tuple[int, dict] | None:
    """The measured table of `dtype` (of `tables`, as measured_tables reads them) from the GPU
    closest to this one, and how close (an index into GPU_MATCHES): by gpu_rank within this
    architecture, else the nearest other architecture (same major version first, then the
    nearest minor one); None where none ships or this GPU's architecture is unknown."""
    ranked = []
    for table in tables:
        rank = gpu_rank(table, device, cc, sm_count)
        if rank is None and cc and table.get("cc"):
            rank = ANOTHER_ARCHITECTURE
        if table["dtype"] == dtype and rank is not None:
            ranked.append(((rank, _cc_distance(table["cc"], cc), table["device"]), rank, table))
    if not ranked:
        return None
    _, rank, table = min(ranked, key=lambda entry: entry[0])
    return rank, table


def _cc_distance(one: str, other: str) -> tuple[int, int]:
    (major, minor), (other_major, other_minor) = (map(int, cc.split(".")) for cc in (one, other or one))
    return abs(major - other_major), abs(minor - other_minor)


def suites() -> dict[str, list[str]]:
    """The bench suites: name -> shapes like '1024x1024x1024'."""
    return json.loads(DATA.joinpath("suites.json").read_text())


@dataclass(frozen=True)
class Promotion:
    path: Path
    added: int  # rows of shapes the file did not hold
    replaced: int  # rows faster than the file's row of their key
    kept: int  # rows no faster than the file's row, which stays
    total: int  # rows in the file now


def select(source: Path | None = None, device: str | None = None, dtype: str | None = None, shape=None) -> list[dict]:
    """Rows to promote: from the export file `source`, or else the cache's, filtered. Without
    `device`, rows measured under the simulator are left out: their timings mean nothing."""
    rows = read_records(source) if source is not None else Cache().rows()
    rows = [decode(r) for r in rows]
    chosen = [
        r for r in rows
        if (r["device"] == device if device is not None else r["device"] != SIMULATOR)
        and dtype in (None, r["dtype"]) and (shape is None or (r["m"], r["n"], r["k"]) == tuple(shape))
    ]
    if not chosen:
        where = source if source is not None else f"the cache ({Cache().path})"
        wanted = [f"{name} {value}" for name, value in (("device", device), ("dtype", dtype)) if value is not None]
        wanted += ["shape " + "x".join(map(str, shape))] if shape is not None else []
        hint = "; rows of the simulator are promoted only with --device simulator" if device is None and rows else ""
        raise PromoteError(f"no rows to promote in {where}" + (f" for {', '.join(wanted)}" if wanted else "") + hint)
    return chosen


def promote(rows: list[dict], out: Path | None = None) -> list[Promotion]:
    """Merge `rows` into the records file of each row's GPU model in this source checkout (or
    all into `out`), keeping per (device, dtype, m, n, k, layout, precision) the faster row, or the current one where
    the other was measured on older kernel code; each file is sorted by that key and replaced
    atomically."""
    validate_records(rows)
    if out is None:
        if any(r["device"] == SIMULATOR for r in rows):
            raise PromoteError("rows measured under the simulator do not belong in the shipped records; give --out FILE")
        targets: dict[Path, list[dict]] = {}
        for row in rows:
            targets.setdefault(_checkout_records() / f"{slug(row['device'])}.json", []).append(row)
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


def _merge_into(path: Path, new: list[dict]) -> Promotion:
    try:
        merged = {row_key(r): _canonical(r) for r in (read_records(path) if path.exists() else [])}
    except RecordsError as error:
        raise PromoteError(str(error)) from None
    hashes = _source_hashes()
    added = replaced = kept = 0
    for row in new:
        old = merged.get(row_key(row))
        if old is not None and not replaces(row, old, hashes):
            kept += 1
            continue
        added, replaced = added + (old is None), replaced + (old is not None)
        merged[row_key(row)] = _canonical(row)
    rows = [merged[key] for key in sorted(merged)]
    try:
        write_atomically(path, (json.dumps(rows, indent=2) + "\n").encode())
    except OSError as error:
        raise PromoteError(f"cannot write {path}: {error}") from None
    return Promotion(path, added, replaced, kept, len(rows))


def _source_hashes() -> dict[str, str]:
    import kernels  # imports numba: only promote, a maintainer's command, needs today's hashes

    return kernels.source_hashes()


def _canonical(row: dict) -> dict:
    """The row with every column, in the cache's column order and with params sorted, so the
    file's diffs show what changed and nothing else; the layout only where it is not NN (the
    layout of a row without one), the precision always."""
    row = decode(row)
    return {c: dict(sorted(row["params"].items())) if c == "params" else row.get(c) for c in COLUMNS
            if c != "layout" or row["layout"] != DEFAULT_LAYOUT}
