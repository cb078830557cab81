"""The SQLite cache of verified best configs: one row per (device, dtype, m, n, k, layout, precision).

Knows nothing of Numba: a row is plain data. Writes are single statements that keep the faster
row, so concurrent tuners writing one file never lose the best (SQLite serializes them; WAL lets
readers go on meanwhile).

The file carries mmtune's mark (PRAGMA application_id, and the schema in user_version), so a
foreign SQLite database is recognised and never written; a cache of an mmtune from before the
mark (its one table holds mmtune's columns) is adopted and marked. A cache this process may not
write (a read-only file or directory) is opened read-only: its rows are read, and writing says so.
Whether a row could be a measurement at all is autotune.store.records' question (implausible).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import sqlite_utils

from autotune.errors import CacheError, RecordsError, advice
from autotune.space.precision import UNRECORDED
from autotune.space.problem import Problem
from autotune.store.paths import cache_file as default_path
from autotune.store.rows import COLUMNS, DEFAULT_LAYOUT, KEY, REQUIRED, Row, nearest_rows, replaces

TABLE = "best"
#: columns that join the key of a cache written by an older mmtune, with what its rows hold there
#: (a row's precision: what its family computes, autotune.space.precision.of_row)
ADDED_KEYS = {"layout": DEFAULT_LAYOUT, "precision": "ieee"}
BUSY_TIMEOUT_MS = 30_000
#: what to do about a cache file SQLite cannot use
DAMAGED = "; `mmtune cache check` says more, `mmtune cache reset` sets the file aside"
#: PRAGMA application_id of an mmtune cache: "mmtn" in ASCII
APPLICATION_ID = 0x6D6D746E
#: PRAGMA user_version of a cache whose table has COLUMNS keyed by KEY
SCHEMA_VERSION = 1


class Cache:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_path()
        self.read_only = not _writable(self.path)
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self.db = sqlite_utils.Database(self._connect())
                self.table = self.db.table(TABLE)
                self._prepare()
                return
            except sqlite3.OperationalError as error:
                # Switching to WAL or creating the table while other processes do the same can
                # fail at once with "locked" (SQLite returns BUSY without waiting to avoid a
                # deadlock): try again shortly.
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise CacheError(f"{self.path} is not a usable mmtune cache ({error}){DAMAGED}") from None
                time.sleep(random.uniform(0.01, 0.1))
            except CacheError:
                raise
            except sqlite3.DatabaseError as error:  # not a database, corrupt
                raise CacheError(f"{self.path} is not a usable mmtune cache ({error}){DAMAGED}") from None

    def _connect(self) -> sqlite3.Connection:
        """A connection that writes, or where this process may not write, one that only reads: in
        a read-only directory, where SQLite cannot make WAL's shared-memory file, as immutable."""
        timeout = BUSY_TIMEOUT_MS / 1000
        if not self.read_only:
            return sqlite3.connect(self.path, timeout=timeout)
        uri = f"file:{quote(str(self.path.absolute()))}"
        connection = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return connection
        except sqlite3.OperationalError:
            connection.close()
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout)

    def _prepare(self) -> None:
        """Recognise the file (ours, an older mmtune's to adopt, new, or foreign) before writing
        anything to it; then, where it may be written, bring its table up to today's columns."""
        marked = self.db.execute("PRAGMA application_id").fetchone()[0]
        tables = [name for name in self.db.table_names() if not name.startswith("sqlite_")]
        if marked not in (0, APPLICATION_ID):
            raise CacheError(f"{self.path} is another application's SQLite database (application_id {marked:#x}), "
                             "not an mmtune cache; set MMTUNE_CACHE to another file")
        if tables and tables != [TABLE]:
            raise CacheError(f"{self.path} holds other tables ({', '.join(tables)}): not an mmtune cache; "
                             "set MMTUNE_CACHE to another file")
        missing = [c for c in REQUIRED if tables and c not in self.table.columns_dict]
        if marked != APPLICATION_ID and missing:
            raise CacheError(f"{self.path} has a table {TABLE!r} without mmtune's columns ({', '.join(missing)}): "
                             "not an mmtune cache; set MMTUNE_CACHE to another file")
        if self.read_only:
            return
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
        if marked != APPLICATION_ID or self.db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.db.conn.commit()

    def check_writable(self) -> None:
        """CacheError unless rows can be written here (before work whose end is a write)."""
        if self.read_only:
            raise CacheError(f"{self.path} is read-only: its rows are read, but nothing can be written to it; "
                             "make it (and its directory) writable, or set MMTUNE_CACHE to a writable file")

    def close(self) -> None:
        self.db.close()

    def record(self, row: Row, source_hashes: dict[str, str] | None = None) -> bool:
        """Insert `row`, or replace the row of its key by the rule of `replaces` (given today's
        `source_hashes`, family -> hash: the current row of the two, else the faster; without
        them, the faster). True if it was written."""
        self.check_writable()
        with self._writing():
            written = self._upsert(row, source_hashes)
            self.db.conn.commit()
        return written

    @contextmanager
    def _writing(self):
        """SQLite's refusal to write (the file made read-only meanwhile) as the CacheError saying so."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if "readonly" not in str(error).replace("-", ""):
                raise
            self.read_only = True
            self.check_writable()

    def _upsert(self, row: Row, source_hashes: dict[str, str] | None = None) -> bool:
        values = row.as_dict()
        values["params"] = json.dumps(row.params, sort_keys=True)
        values["created"] = row.created or datetime.now(timezone.utc).isoformat(timespec="seconds")
        names = ", ".join(COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in KEY)
        self.db.conn.create_function("mmtune_replaces", 5, _replaces_sql, deterministic=True)
        cursor = self.db.execute(
            f"INSERT INTO {TABLE} ({names}) VALUES ({', '.join('?' * len(COLUMNS))}) "
            f"ON CONFLICT ({', '.join(KEY)}) DO UPDATE SET {updates} WHERE mmtune_replaces("
            f"json_array(excluded.family, excluded.source_hash), excluded.gflops, "
            f"json_array({TABLE}.family, {TABLE}.source_hash), {TABLE}.gflops, ?)",
            [values[c] for c in COLUMNS] + [json.dumps(source_hashes or {})],
        )
        return cursor.rowcount > 0

    def rows(self, device: str | None = None, dtype: str | None = None, shape=None, layout: str | None = None,
             precision: str | None = None) -> list[Row]:
        where, args = [], []
        for column, value in (("device", device), ("dtype", dtype), ("layout", layout), ("precision", precision)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if shape is not None:
            where.append("m = ? AND n = ? AND k = ?")
            args.extend(shape)
        if not self.table.exists():  # a new file this process may not write
            return []
        order = ", ".join(c for c in ("device", "dtype", "m", "n", "k", "layout") if c in self.table.columns_dict)
        found = self.table.rows_where(" AND ".join(where) or None, args, order_by=order)
        try:
            return [Row.of(row) for row in found]
        except RecordsError as error:
            raise CacheError(f"{self.path} holds a row mmtune cannot read ({error}){DAMAGED}") from None

    def merge(self, rows: list[Row], source_hashes: dict[str, str] | None = None) -> int:
        """Import rows (validate_records' output), keeping per key the row `replaces` prefers;
        returns how many were written, all or none."""
        self.check_writable()
        with self._writing(), self.db.conn:
            return sum(self._upsert(row, source_hashes) for row in rows)

    def get(self, problem: Problem) -> Row | None:
        """The row of `problem`, if the cache holds one."""
        rows = self.rows(problem.device, problem.dtype, problem.shape, problem.layout, problem.precision)
        return rows[0] if rows else None

    def nearest(self, device: str, dtype: str, shape: tuple[int, int, int], count: int = 1) -> list[tuple[float, Row]]:
        """The `count` tuned shapes closest to `shape` by `shape_distance`, nearest first."""
        return nearest_rows(self.rows(device, dtype), shape, count)


def _writable(path: Path) -> bool:
    """Whether this process may write the cache at `path` (and the WAL files beside it). A missing
    file's directory is made first; CacheError where no cache can be made there."""
    if path.is_dir():
        raise CacheError(f"the cache {path} is a directory; set MMTUNE_CACHE to a file")
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CacheError(f"cannot make the cache {path}: a part of {path.parent} is a file, not a directory; "
                         "set MMTUNE_CACHE to a file in a directory") from None
    except OSError as error:
        raise CacheError(f"cannot make the cache {path}: {advice(error)}") from None
    if not os.access(path.parent, os.W_OK):
        raise CacheError(f"cannot make the cache {path}: {path.parent} is read-only; "
                         "set MMTUNE_CACHE to a file in a writable directory")
    return True


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
            try:
                source.rename(target.with_name(target.name + suffix))
            except OSError as error:
                raise CacheError(f"cannot set {source} aside ({error.strerror}): make {path.parent} writable, or "
                                 "set MMTUNE_CACHE to a file elsewhere to start afresh there") from None
    return target


def _replaces_sql(new: str, new_gflops: float, old: str, old_gflops: float, hashes: str) -> bool:
    """`replaces` for SQLite: each row's (family, source hash) as JSON and its GFLOPS, and today's
    hashes as JSON."""
    return replaces(_compared(new, new_gflops), _compared(old, old_gflops), json.loads(hashes))


def _compared(code: str, gflops: float) -> Row:
    """A row holding what `replaces` compares, and nothing else."""
    family, source_hash = json.loads(code)
    return Row(device="-", dtype="-", m=0, n=0, k=0, family=family, params={}, gflops=gflops, source_hash=source_hash)
