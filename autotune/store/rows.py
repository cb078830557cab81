"""What a row is: one verified best config for one problem, as the cache holds it, the shipped
records ship it and the export format carries it, and the one rule for which of two rows stays.

A row's data is a `Row`; JSON (the export format, the records files) and SQLite hold its `as_dict()`
with params as an object or as JSON text. `Row.of` reads either, filling what older rows lack: the
layout (NN) and the precision (its family's, autotune.space.precision.of_row).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from autotune.errors import RecordsError
from autotune.space.precision import PRECISIONS, of_row
from autotune.space.problem import Problem
from kernels import DTYPE_NAMES, Config
from kernels.rules import LAYOUTS

#: rows written before layouts existed, and records files without the field, are NN
DEFAULT_LAYOUT = "NN"
#: the column types of a row, in its column order (the cache's table and the records files)
COLUMNS = {
    "device": str, "dtype": str, "m": int, "n": int, "k": int,
    "family": str, "params": str, "gflops": float, "median_ms": float, "spread": float,
    "trials": int, "cc": str, "driver": str, "numba": str, "numba_cuda": str,
    "source_hash": str, "created": str, "study": str, "sm_count": int, "layout": str, "precision": str,
}
KEY = ("device", "dtype", "m", "n", "k", "layout", "precision")
REQUIRED = ("device", "dtype", "m", "n", "k", "family", "params", "gflops")


@dataclass(frozen=True)
class Row:
    """A verified best config: the problem it was tuned for, the config and how fast it ran, and
    where (GPU, toolchain, kernel code). Frozen, but `params` is a dict: rows are compared, not
    hashed, and a changed row is a new one (dataclasses.replace)."""

    device: str
    dtype: str
    m: int
    n: int
    k: int
    family: str
    params: dict
    gflops: float
    median_ms: float | None = None
    spread: float | None = None
    trials: int | None = None
    cc: str | None = None
    driver: str | None = None
    numba: str | None = None
    numba_cuda: str | None = None
    source_hash: str | None = None
    created: str | None = None
    study: str | None = None
    sm_count: int | None = None
    layout: str = DEFAULT_LAYOUT
    #: "" (unrecorded) reads as what its family computed before rows recorded it (of_row)
    precision: str = ""

    def __post_init__(self) -> None:
        missing = [c for c in REQUIRED if getattr(self, c) is None]
        if missing:
            raise RecordsError(f"a row lacks {', '.join(missing)}")
        if not self.layout:
            object.__setattr__(self, "layout", DEFAULT_LAYOUT)
        if not self.precision:
            object.__setattr__(self, "precision", of_row({"family": self.family}))

    @classmethod
    def of(cls, data) -> "Row":
        """A row from its dict (JSON, SQLite or `as_dict`), params as an object or as JSON text;
        a Row as it is."""
        if isinstance(data, Row):
            return data
        values = {c: data.get(c) for c in COLUMNS if data.get(c) is not None}
        if isinstance(values.get("params"), str):
            values["params"] = json.loads(values["params"])
        missing = [c for c in REQUIRED if c not in values]
        if missing:
            raise RecordsError(f"a row lacks {', '.join(missing)}")
        values["precision"] = of_row(data)
        if values.get("family") in GAINED and isinstance(values.get("params"), dict):
            values["params"] = {**GAINED[values["family"]], **values["params"]}
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    @property
    def config(self) -> Config:
        return Config.of(self.family, self.params)

    @property
    def problem(self) -> Problem:
        return Problem(device=self.device, dtype=self.dtype, m=self.m, n=self.n, k=self.k, layout=self.layout,
                       precision=self.precision)

    @property
    def key(self) -> tuple:
        """The row's KEY: one row per key in the cache and in a records file."""
        return tuple(getattr(self, c) for c in KEY)


assert [f.name for f in fields(Row)] == list(COLUMNS), "Row's fields are the cache's columns"


def validate_records(rows) -> list[Row]:
    """Rows of the export format (a JSON list of cache rows), checked; RecordsError if malformed."""
    if not isinstance(rows, list):
        raise RecordsError("expected a JSON list of cache rows")
    for i, row in enumerate(rows):
        row = row.as_dict() if isinstance(row, Row) else row
        if not isinstance(row, dict):
            raise RecordsError(f"row {i}: not an object")
        for column in REQUIRED:
            value = row.get(column)
            kind = COLUMNS[column]
            if column == "params":
                ok = isinstance(value, dict)
            elif kind is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            else:
                ok = isinstance(value, str) and value != ""
            if not ok:
                raise RecordsError(f"row {i}: {column} is missing or invalid ({value!r})")
        if row["dtype"] not in DTYPE_NAMES:
            raise RecordsError(f"row {i}: dtype is invalid ({row['dtype']!r}); known: {', '.join(DTYPE_NAMES)}")
        if row.get("layout") not in (None, *LAYOUTS):
            raise RecordsError(f"row {i}: layout is invalid ({row['layout']!r}); known: {', '.join(LAYOUTS)}")
        if row.get("precision") not in (None, *PRECISIONS):
            raise RecordsError(f"row {i}: precision is invalid ({row['precision']!r}); "
                               f"known: {', '.join(PRECISIONS)}")
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise RecordsError(f"row {i}: unknown fields {sorted(unknown)}")
    return [Row.of(row) for row in rows]


def read_records(path: Path) -> list[Row]:
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise RecordsError(f"{path}: {error}") from None
    try:
        return validate_records(rows)
    except RecordsError as error:
        raise RecordsError(f"{path}: {error}") from None


def shape_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """Distance between two shapes on a log2 scale: sqrt(sum(log2(a_i / b_i)^2)).
    Doubling one dimension is distance 1; 1024^3 to 2048^3 is sqrt(3) = 1.73. An empty dimension
    counts as 1 (an empty product still looks up a kernel)."""
    return math.sqrt(sum(math.log2(max(x, 1) / max(y, 1)) ** 2 for x, y in zip(a, b)))


def nearest_rows(rows: list[Row], shape: tuple[int, int, int], count: int = 1) -> list[tuple[float, Row]]:
    ranked = sorted(rows, key=lambda r: shape_distance(shape, r.shape))
    return [(shape_distance(shape, r.shape), r) for r in ranked[:count]]


#: a family's source hash -> today's, for code that compiles to the same PTX: the kernels package
#: was split into modules (docs/performance.md, step 36), its records built with keywords (step
#: 37), `Arch` given arch-specific targets (step 38), the split a scale to take (step 39),
#: wgmma a producer warpgroup, off by default (step 43), every family a bias, omitted by default
#: (step 45), wgmma two producer warpgroups (step 47), the intrinsics a copy of whole 16-byte
#: words (step 48), dmma's copies and fragments, for every other family (step 51), gemv's
#: few-rows rule taking float64 (step 53), and gemv's streamed B and A read as vectors, off by
#: default (step 54; the rows of its builds on the way, of the same PTX), and wgmma's tiles of
#: any 8 columns and swapped operands with the families' contract's fit (step 55), without
#: changing a kernel, so rows measured before are as current as rows measured after, and tf32x3's
#: when dmma's float64 came to read one element a load (step 59), and dmma's and tf32x3's when a lane
#: could write C's pairs as one store, off by default (step 60), and every family's when the contract
#: gained a skinny tile and dmma's and tf32x3's space 16-wide tiles (step 61), a small tile
#: (step 62), small tiles in tiers (step 63), a long-K tile (step 64) and its small tiers' squarest first,
#: dmma's space a third min_blocks (step 65). dmma's rows from before step 59 are
#: stale: its float64 tiles stored "k" or "memory" are read otherwise (its "mn" rows, whose PTX is the
#: same, were relabelled in the shipped records), and tf32x3's from before step 58. Step 48
#: changed one kind of build: wgmma's with two producers for rows that are not 16-byte aligned,
#: which now move them as whole words; rows timed on those keep their configs, whose speeds they
#: understate
SAME_CODE = {
    **dict.fromkeys(("e8e27951728ebace", "8af2fb2881a043cb", "8273f1e13ceb6d08", "0278b16e092374b3",
                     "c619098a8d401800", "fd77e1f36f3b7999", "d561113cb568f1ce",
                     "db1c495f88784108",
                     "35a78fb2ace70b4c",
                     "54138ac45e38c6eb", "1052facd9bed1128", "6110b77a99cde2fd",
                     "f637b2e099d30efc"), "49b6fc177a7af637"),  # tf32x3
    **dict.fromkeys(("48d1a5b11a2678d0", "2a033be0faca54e6", "5c3623a96b94edce",
                     "3db4fb618fd5ee86", "528114de565d751e", "c2a99e011a342f91",
                     "545593142d1aa8b0",
                     "d503bdfe1ed4d626", "8c6cf53d1241612a", "6deec0ffc2ab5f47"), "ce100286837b6c2f"),  # dmma
    **dict.fromkeys(("e861213c0d10400a", "46c18dbcbf6be0a5", "8bfff77fd2b69181",
                     "a8f0260fda7b91dd", "518e63140bddc879", "abb96c882b71735b",
                     "26a0bc50e0850d9e", "975e277a70850b48", "77e0429cdab60417",
                     "94afdc7630da6806", "9ae10155ab33c358", "bf14f04d3b40e22e",
                     "b974038d346de1af", "6b2c0a86f00ce72e",
                     "b4b2d2d11d07b906",
                     "3a9dae586457a3bb"), "f3ee3f4e2c9bfdce"),  # vector
    **dict.fromkeys(("024e9be007ffe58e", "6ed1b233e63c12f5", "a33334a5730dbff2",
                     "e3c48b5f41d0c25a", "2f9dd882e04ed428", "a442adfb92bd043d",
                     "1991a8c9bca3ce1a", "82d63ba512d0e0f3", "d54f13f15138e3eb",
                     "07522f42dc95dbde", "83de2adf75f8bbfe", "6fabef57523ae9d7",
                     "d374d9a51f569c4c", "70ec55f514a19c95",
                     "2239d6279e7bc903",
                     "a9080eb56c388047"), "29f113a7377ecda7"),  # splitk
    **dict.fromkeys(("9faa27bb94ff2549", "33b95ce9173d3f11", "beff4388ac50a64f",
                     "b9a5ca207651b4ed", "4b329f6b390083f9", "cf77fcbacf092de1",
                     "ef4894be68330e68", "933e693c2dd6d661", "65fa8e91531a2b21",
                     "8ab9c4edaa8c3f8d", "1d4ed3a436b1a015", "6a4296fba5167234",
                     "0a619d535b58022b", "df9ac795566cacac",
                     "cd2de505cf804aa9",
                     "94ec1a90b9f9bf62"), "64ab185389650bcc"),  # register
    **dict.fromkeys(("1a82cd700f036fbe", "5f8a8fd988161645", "1f51d55730bc962d",
                     "cc0f3336ceccad32", "622bc048752f2d54", "cf27d3ac6d20223b",
                     "763fc9a2f2b8382e", "fbf9937219dee21f", "822c2cf5beb8e475",
                     "4ecc2d572cfa44ff", "fdc1a9af51bfff50", "45b22ad810259906",
                     "ad0fb720ca43244e", "7aa4ad57fcc7934c",
                     "68786abf67aca3f2",
                     "e61315e953adbe82"), "5411a5b6251db512"),  # streamk
    **dict.fromkeys(("687c37588c4a272d", "9494a3693ddb1d38", "6593e5ba1481ebdf",
                     "8187517e9da20247", "7e9f1641240c02b3", "49fd31de069f0440",
                     "eee9fce37798d5e2", "24908dc3ac1866c5", "74bea3c8429871a1",
                     "548000f0693bc65a", "3f4d94121278760b", "29222c835d63aa02",
                     "63a08d9c42096786",
                     "1045b03661cd8580",
                     "4a85093d5177ae0e"), "89f4721dd538cd44"),  # shared
    **dict.fromkeys(("12e0e5b192388d20", "2e3511c1db883466", "39bd8c44bbf5af2b",
                     "b7f52dc48ea6adfc", "6e54c3819cd57181", "60ac60522e8f4f00",
                     "e548680c9445bcc0", "7b728afa945ddbf7", "ffe5d25c102762ce",
                     "f7142e0728087c0a", "dc99bee5c05df9ed", "a65097b6941e4f5f",
                     "78b4fa5987d38256",
                     "b66f90742fc4c0af",
                     "45df995a2013ab62"), "44e0e861f796aa73"),  # naive
    **dict.fromkeys(("af5a4f573c8c0324", "4309187d0a165526", "466212c4e24018b6",
                     "9c5bb28d8cec5346", "79025522fd3373a6", "f1f15da7ff85553a",
                     "cb9d2a7c451f3b79", "bee80c995fa8a277", "9128497dce6ff119",
                     "87f6f673163940c2", "a8f3edd40f01b9b8", "795d2611daf6bfd7", "2a3f5120fecb88b9",
                     "a18bdd1a6fdb9f37", "5ce8a37ef6db3ad1", "145b2f58c86dbc6b",
                     "e8ac55794b4d8383", "1ca7fe33dcc67d7b", "31c3357d82082f90",
                     "63af3d1c0cd9b0ba",
                     "332842da1932e91a"), "76a1b3dc648f2a48"),  # gemv
    **dict.fromkeys(("c363ca80fa7b1065", "cfa194878a0bd632", "b3bf49dceafe423b",
                     "c80c3d083a86b7ce", "c43413822251788d", "37b5840ad9871f44",
                     "a2f68dde27f49157", "947e1f409052d61d", "1d99f6ede78de43f",
                     "88a644be67767efd", "df101b90070127a6", "e199b22cceab5fa3",
                     "15495fcc158b3ea5", "b7055580850b186a", "a083a2cb904e1bb5",
                     "ec99d11908c72954",
                     "abd5fc6489aef83c"), "5d8351c062e45c00"),  # wgmma
}


#: parameters a family gained after rows were written, at the value that runs the code those rows
#: measured (docs/performance.md, step 43: wgmma's producer warpgroup; step 49: the mma.sync
#: families' stored tiles; step 54: gemv's streamed B and A read as vectors; step 55: wgmma's swap;
#: step 60: the mma.sync families' paired stores of C)
GAINED = {"wgmma": {"producer": 0, "swap": 0}, "dmma": {"stored": "mn", "stores": "elements"},
          "tf32x3": {"stored": "mn", "stores": "elements"},
          "gemv": {"streamed": False, "a_vectors": False}}


def stale(row: Row, source_hashes: dict[str, str]) -> bool:
    """Whether `row` was measured on other kernel code than today's (`kernels.source_hashes()`)."""
    return SAME_CODE.get(row.source_hash, row.source_hash) != source_hashes.get(row.family)


def replaces(new: Row, old: Row, source_hashes: dict[str, str] | None) -> bool:
    """Whether `new` should take `old`'s place (same key): of a current row and a stale one, the
    current one stays; otherwise the faster. Without `source_hashes`, the faster. The one rule
    for the cache, the shipped records and a fleet's study winners."""
    if source_hashes:
        new_stale, old_stale = stale(new, source_hashes), stale(old, source_hashes)
        if new_stale != old_stale:
            return old_stale
    return new.gflops > old.gflops
