"""The `mmtune` command line: each command parses its options and calls one library function;
errors reach the user in one place (autotune.cli.app), as one line and exit status 2.

  autotune.cli.app      the Typer apps and the one error path
  autotune.cli.options  the options several commands share, and their parsers
  autotune.cli.tuning   tune, lookup, best, warm, check
  autotune.cli.recorded what tune prints, and the lines of tune --recorded and warm --recorded
  autotune.cli.timing   bench, sweep, plot
  autotune.cli.rows     export, import, promote, pull, cache check, cache reset
"""

from __future__ import annotations

# each declares its commands on the app, which lists them in this order
from autotune.cli import rows, timing, tuning  # noqa: F401, I001
from autotune.cli.app import app

__all__ = ["app"]
