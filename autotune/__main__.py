"""`python -m autotune ...` is `mmtune ...`, for environments where the script is not installed."""

from autotune.cli import app

app(prog_name="mmtune")
