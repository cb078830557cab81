"""The records mmtune ships: tuned rows per GPU model, read-only at run time."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.cache import decode

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "studies"


def shipped_rows(device: str | None = None, dtype: str | None = None) -> list[dict]:
    """Shipped rows, of one device model and dtype when given."""
    rows = []
    for path in sorted(SHIPPED_DIR.glob("*/records.json")):
        rows += [decode(r) for r in json.loads(path.read_text())
                 if (device is None or r["device"] == device) and (dtype is None or r["dtype"] == dtype)]
    return rows
