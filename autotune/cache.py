"""The SQLite cache of verified best configs: one row per (device, dtype, m, n, k, layout, precision).

Knows nothing of Numba: a row is plain data. Writes are single statements that keep the faster
row, so concurrent tuners writing one file never lose the best (SQLite serializes them; WAL lets
readers go on meanwhile).
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

from autotune.precision import PRECISIONS, UNRECORDED, of_row
from autotune.paths import cache_file as default_path

TABLE = "best"
KEY = ("device", "dtype", "m", "n", "k", "layout", "precision")
COLUMNS = {
    "device": str, "dtype": str, "m": int, "n": int, "k": int,
    "family": str, "params": str, "gflops": float, "median_ms": float, "spread": float,
    "trials": int, "cc": str, "driver": str, "numba": str, "numba_cuda": str,
    "source_hash": str, "created": str, "study": str, "sm_count": int, "layout": str, "precision": str,
}
REQUIRED = ("device", "dtype", "m", "n", "k", "family", "params", "gflops")
#: the operands' layout a row was tuned for (kernels.LAYOUTS, not imported: it imports numba);
#: rows written before layouts existed, and records files without the field, are NN
LAYOUTS = ("NN", "NT", "TN", "TT")
DEFAULT_LAYOUT = "NN"
#: columns that join the key of a cache written by an older mmtune, with what its rows hold there
#: (a row's precision: what its family computes, autotune.precision.of_row)
ADDED_KEYS = {"layout": DEFAULT_LAYOUT, "precision": "ieee"}
BUSY_TIMEOUT_MS = 30_000


class CacheError(Exception):
    """The cache file cannot be used as it is."""


class RecordsError(ValueError):
    """A records file (the export format) is malformed."""


def shape_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """Distance between two shapes on a log2 scale: sqrt(sum(log2(a_i / b_i)^2)).
    Doubling one dimension is distance 1; 1024^3 to 2048^3 is sqrt(3) = 1.73. An empty dimension
    counts as 1 (an empty product still looks up a kernel)."""
    return math.sqrt(sum(math.log2(max(x, 1) / max(y, 1)) ** 2 for x, y in zip(a, b)))


class Cache:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self.db = sqlite_utils.Database(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000))
                self.table = self.db.table(TABLE)
                self._prepare()
                return
            except sqlite3.OperationalError as error:
                # Switching to WAL or creating the table while other processes do the same can
                # fail at once with "locked" (SQLite returns BUSY without waiting to avoid a
                # deadlock): try again shortly.
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise CacheError(f"{self.path} is not a usable mmtune cache ({error})") from None
                time.sleep(random.uniform(0.01, 0.1))
            except CacheError:
                raise
            except sqlite3.DatabaseError as error:  # not a database, corrupt
                raise CacheError(f"{self.path} is not a usable mmtune cache ({error})") from None

    def _prepare(self) -> None:
        others = self.db.table_names()
        if others and TABLE not in others:
            raise CacheError(f"{self.path} holds other tables ({', '.join(others)}): not an mmtune cache")
        self.db.enable_wal()
        self.table.create(COLUMNS, pk=KEY, not_null=set(REQUIRED) | set(ADDED_KEYS), defaults=ADDED_KEYS,
                          if_not_exists=True)
        for column in set(COLUMNS) - set(self.table.columns_dict):  # a cache written by an older mmtune
            self.table.add_column(column, COLUMNS[column], not_null_default=ADDED_KEYS.get(column))
            if column == "precision":
                for family, computed in UNRECORDED.items():
                    self.db.execute(f"UPDATE {TABLE} SET precision = ? WHERE family = ?", [computed, family])
        if tuple(self.table.pks) != KEY:  # its rows are NN rows of their family's precision
            self.table.transform(pk=KEY)

    def close(self) -> None:
        self.db.close()

    def record(self, row: dict, source_hashes: dict[str, str] | None = None) -> bool:
        """Insert `row`, or replace the row of its key by the rule of `replaces` (given today's
        `source_hashes`, family -> hash: the current row of the two, else the faster; without
        them, the faster). True if it was written."""
        missing = [c for c in REQUIRED if row.get(c) is None]
        if missing:
            raise ValueError(f"cache row lacks {', '.join(missing)}")
        written = self._upsert(row, source_hashes)
        self.db.conn.commit()
        return written

    def _upsert(self, row: dict, source_hashes: dict[str, str] | None = None) -> bool:
        row = {c: row.get(c) for c in COLUMNS}
        row["layout"] = row["layout"] or DEFAULT_LAYOUT
        row["precision"] = of_row(row)
        if not isinstance(row["params"], str):
            row["params"] = json.dumps(row["params"], sort_keys=True)
        row["created"] = row["created"] or datetime.now(timezone.utc).isoformat(timespec="seconds")
        names = ", ".join(COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in KEY)
        self.db.conn.create_function("mmtune_replaces", 7, _replaces_sql, deterministic=True)
        cursor = self.db.execute(
            f"INSERT INTO {TABLE} ({names}) VALUES ({', '.join('?' * len(COLUMNS))}) "
            f"ON CONFLICT ({', '.join(KEY)}) DO UPDATE SET {updates} WHERE mmtune_replaces("
            f"excluded.family, excluded.source_hash, excluded.gflops, {TABLE}.family, {TABLE}.source_hash, "
            f"{TABLE}.gflops, ?)",
            [row[c] for c in COLUMNS] + [json.dumps(source_hashes or {})],
        )
        return cursor.rowcount > 0

    def rows(self, device: str | None = None, dtype: str | None = None, shape=None, layout: str | None = None,
             precision: str | None = None) -> list[dict]:
        where, args = [], []
        for column, value in (("device", device), ("dtype", dtype), ("layout", layout), ("precision", precision)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if shape is not None:
            where.append("m = ? AND n = ? AND k = ?")
            args.extend(shape)
        found = self.table.rows_where(" AND ".join(where) or None, args, order_by="device, dtype, m, n, k, layout")
        return [decode(row) for row in found]

    def merge(self, rows: list[dict], source_hashes: dict[str, str] | None = None) -> int:
        """Import validated rows, keeping per key the row `replaces` prefers; returns how many were
        written. Validation happens first, so a malformed file changes nothing."""
        validate_records(rows)
        with self.db.conn:
            return sum(self._upsert(row, source_hashes) for row in rows)

    def get(self, device: str, dtype: str, m: int, n: int, k: int, layout: str = DEFAULT_LAYOUT,
            precision: str = "ieee") -> dict | None:
        rows = self.rows(device, dtype, (m, n, k), layout, precision)
        return rows[0] if rows else None

    def nearest(self, device: str, dtype: str, m: int, n: int, k: int, count: int = 1) -> list[tuple[float, dict]]:
        """The `count` tuned shapes closest to (m, n, k) by `shape_distance`, nearest first."""
        return nearest_rows(self.rows(device, dtype), (m, n, k), count)


def validate_records(rows) -> list[dict]:
    """Rows of the export format (a JSON list of cache rows), checked; RecordsError if malformed."""
    if not isinstance(rows, list):
        raise RecordsError("expected a JSON list of cache rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise RecordsError(f"row {i}: not an object")
        for column in REQUIRED:
            value = row.get(column)
            kind = COLUMNS[column]
            if column == "params":
                ok = isinstance(value, dict)
            elif kind is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            else:
                ok = isinstance(value, str) and value != ""
            if not ok:
                raise RecordsError(f"row {i}: {column} is missing or invalid ({value!r})")
        if row.get("layout") not in (None, *LAYOUTS):
            raise RecordsError(f"row {i}: layout is invalid ({row['layout']!r}); known: {', '.join(LAYOUTS)}")
        if row.get("precision") not in (None, *PRECISIONS):
            raise RecordsError(f"row {i}: precision is invalid ({row['precision']!r}); "
                               f"known: {', '.join(PRECISIONS)}")
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise RecordsError(f"row {i}: unknown fields {sorted(unknown)}")
    return rows


def read_records(path: Path) -> list[dict]:
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise RecordsError(f"{path}: {error}") from None
    try:
        return validate_records(rows)
    except RecordsError as error:
        raise RecordsError(f"{path}: {error}") from None


def check_file(path: Path) -> list[str]:
    """What is wrong with the cache file at `path`; an empty list if nothing is."""
    if not path.exists():
        return []
    try:
        cache = Cache(path)
        result = [row[0] for row in cache.db.execute("PRAGMA integrity_check").fetchall()]
    except (CacheError, sqlite3.DatabaseError) as error:
        return [str(error)]
    problems = [] if result == ["ok"] else [f"integrity check: {line}" for line in result]
    for row in cache.table.rows:
        try:
            json.loads(row["params"])
        except (TypeError, ValueError):
            problems.append(f"row {row['device']} {row['dtype']} {row['m']}x{row['n']}x{row['k']}: params are not JSON")
    cache.close()
    return problems


def set_aside(path: Path) -> Path | None:
    """Rename a damaged cache file (and its WAL files) to <name>.bad-<time>, so the next use
    starts a fresh one and nothing is deleted. Returns the new name, or None if there was no file."""
    if not path.exists():
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.bad-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = path.with_name(path.name + suffix)
        if source.exists():
            source.rename(target.with_name(target.name + suffix))
    return target


def nearest_rows(rows: list[dict], shape: tuple[int, int, int], count: int = 1) -> list[tuple[float, dict]]:
    ranked = sorted(rows, key=lambda r: shape_distance(shape, (r["m"], r["n"], r["k"])))
    return [(shape_distance(shape, (r["m"], r["n"], r["k"])), r) for r in ranked[:count]]


def stale(row: dict, source_hashes: dict[str, str]) -> bool:
    """Whether `row` was measured on other kernel code than today's (`kernels.source_hashes()`)."""
    return row.get("source_hash") != source_hashes.get(row["family"])


def replaces(new: dict, old: dict, source_hashes: dict[str, str] | None) -> bool:
    """Whether `new` should take `old`'s place (same key): of a current row and a stale one, the
    current one stays; otherwise the faster. Without `source_hashes`, the faster. The one rule
    for the cache, the shipped records and a fleet's study winners."""
    if source_hashes:
        new_stale, old_stale = stale(new, source_hashes), stale(old, source_hashes)
        if new_stale != old_stale:
            return old_stale
    return new["gflops"] > old["gflops"]


def _replaces_sql(new_family, new_hash, new_gflops, old_family, old_hash, old_gflops, hashes_json) -> bool:
    hashes = json.loads(hashes_json)
    return replaces({"family": new_family, "source_hash": new_hash, "gflops": new_gflops},
                    {"family": old_family, "source_hash": old_hash, "gflops": old_gflops}, hashes)


def decode(row: dict) -> dict:
    """A row with params as an object, its layout (NN where a records file has none) and its
    precision (its family's, where a records file has none: autotune.precision.of_row)."""
    row = dict(row)
    row["params"] = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
    row["layout"] = row.get("layout") or DEFAULT_LAYOUT
    row["precision"] = of_row(row)
    return row


def row_key(row: dict) -> tuple:
    """A row's key (KEY), its layout and precision filled in as `decode` fills them."""
    filled = {"layout": row.get("layout") or DEFAULT_LAYOUT, "precision": of_row(row)}
    return tuple(filled[c] if c in filled else row[c] for c in KEY)
