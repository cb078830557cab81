import sqlite3

import pytest

from autotune.errors import RecordsError
from autotune.store.cache import Cache, CacheError, default_path
from autotune.store.rows import Row, shape_distance
from autotune.space.problem import Problem

ROW = dict(device="GPU", dtype="float32", m=64, n=64, k=64, family="shared", params={"tpb": 16, "pad": 1}, gflops=100.0,
           median_ms=0.1, spread=0.01, trials=10)


def row(**change):
    return Row(**{**ROW, **change})


def test_default_path_follows_mmtune_cache(isolated_cache):
    assert default_path() == isolated_cache
    assert Cache().path == isolated_cache


def test_record_and_read_back_with_params_as_an_object():
    cache = Cache()
    assert cache.record(row())
    got = cache.get(Problem("GPU", "float32", 64, 64, 64))
    assert got.params == {"tpb": 16, "pad": 1} and got.gflops == 100.0 and got.created


def test_upsert_keeps_the_faster_row():
    cache = Cache()
    cache.record(row())
    assert not cache.record(row(gflops=90.0, family="naive", params={"block_x": 8, "block_y": 8}))
    assert cache.get(Problem("GPU", "float32", 64, 64, 64)).family == "shared"
    assert cache.record(row(gflops=120.0, family="naive", params={"block_x": 8, "block_y": 8}))
    got = cache.get(Problem("GPU", "float32", 64, 64, 64))
    assert (got.family, got.gflops) == ("naive", 120.0)
    assert len(cache.rows()) == 1


def test_rows_filter_by_device_dtype_and_shape():
    cache = Cache()
    cache.record(row())
    cache.record(row(dtype="float64"))
    cache.record(row(m=128))
    cache.record(row(device="Other"))
    assert len(cache.rows()) == 4
    assert len(cache.rows(device="GPU", dtype="float32")) == 2
    assert [r.m for r in cache.rows(shape=(128, 64, 64))] == [128]


def test_nearest_ranks_by_log_distance():
    cache = Cache()
    for m in (32, 256, 1024):
        cache.record(row(m=m, n=m, k=m))
    (d1, first), (d2, second) = cache.nearest("GPU", "float32", (200, 200, 200), count=2)
    assert (first.m, second.m) == (256, 1024)
    assert d1 == pytest.approx(shape_distance((200,) * 3, (256,) * 3)) and d1 < d2
    assert shape_distance((1024, 1024, 1024), (2048, 1024, 1024)) == 1.0
    assert shape_distance((0, 1024, 1024), (1, 1024, 1024)) == 0.0  # an empty product looks up a kernel too


def test_rows_lacking_required_fields_are_refused():
    with pytest.raises(RecordsError, match="a row lacks gflops"):
        row(gflops=None)
    with pytest.raises(RecordsError, match="a row lacks family, params"):
        Row.of({k: v for k, v in ROW.items() if k not in ("family", "params")})


def test_uses_wal(isolated_cache):
    Cache()
    assert sqlite3.connect(isolated_cache).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_foreign_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE invoices (id INTEGER)").connection.commit()
    before = path.read_bytes()
    with pytest.raises(CacheError, match="holds other tables \\(invoices\\): not an mmtune cache"):
        Cache(path)
    assert path.read_bytes() == before


def test_a_corrupt_file_is_refused(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CacheError, match="is not a usable mmtune cache"):
        Cache(path)


def test_a_cache_of_an_older_mmtune_is_adopted_and_marked(tmp_path):
    """A cache written before the mark (and before layouts and precisions) opens, and gets them."""
    from autotune.store.cache import APPLICATION_ID, SCHEMA_VERSION

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE best (device TEXT, dtype TEXT, m INTEGER, n INTEGER, k INTEGER, family TEXT, "
               "params TEXT, gflops FLOAT, PRIMARY KEY (device, dtype, m, n, k))")
    db.execute("INSERT INTO best VALUES ('GPU', 'float32', 64, 64, 64, 'shared', '{\"tpb\": 16, \"pad\": 1}', 100.0)")
    db.commit()
    db.close()
    cache = Cache(path)
    assert cache.get(Problem("GPU", "float32", 64, 64, 64)).params == {"tpb": 16, "pad": 1}
    cache.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_opening_a_marked_cache_writes_nothing(isolated_cache):
    cache = Cache()
    cache.record(row())
    cache.close()
    before = isolated_cache.read_bytes()
    Cache().rows()
    assert isolated_cache.read_bytes() == before


def test_writing_a_cache_this_process_may_not_write_says_read_only(isolated_cache, monkeypatch):
    Cache().record(row())
    monkeypatch.setattr("autotune.store.cache._writable", lambda path: False)
    cache = Cache()
    assert cache.read_only and cache.get(Problem("GPU", "float32", 64, 64, 64)).gflops == 100.0
    with pytest.raises(CacheError, match="is read-only: its rows are read, but nothing can be written"):
        cache.record(row(m=128))


def test_rows_of_code_that_compiles_alike_stay_current(monkeypatch):
    """A row measured on kernel code that a later hash compiles alike (autotune.store.rows.SAME_CODE)
    is as current as one measured on the later code; other hashes stay stale."""
    from autotune.store import rows

    monkeypatch.setattr(rows, "SAME_CODE", {"earlier": "today"})
    hashes = {"vector": "today"}
    assert not rows.stale(row(family="vector", source_hash="earlier"), hashes)
    assert not rows.stale(row(family="vector", source_hash="today"), hashes)
    assert rows.stale(row(family="vector", source_hash="older"), hashes)


def test_code_that_compiles_alike_maps_to_todays_kernels():
    """Each SAME_CODE entry ends at a family's hash of today (re-label, as for the shipped records,
    where a kernel change leaves the PTX the same; drop the entries where it does not)."""
    import kernels
    from autotune.store.rows import SAME_CODE

    assert set(SAME_CODE.values()) <= set(kernels.source_hashes().values())
