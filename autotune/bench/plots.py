"""mmtune plot: a study's optimization history and parameter importances (Optuna's matplotlib
visualizations, headless), and the chart of a bench result."""

from __future__ import annotations

import json
import lzma
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import optuna

from autotune.bench.figures import save_png
from autotune.bench.suite import chart
from autotune.tune.storage import open_storage


def plot_studies(spec: str, out_dir: Path, study: str | None = None) -> list[Path]:
    """PNG files of every study in the storage `spec` (or just `study`): <name>-history.png and,
    with at least two completed trials, <name>-importance.png. A journal file may be xz-compressed
    (name ending .xz), as studies/ keeps them."""
    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as optuna_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with _journal(spec) as plain, warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = open_storage(plain, heartbeat=False)
        names = [study] if study else optuna.get_all_study_names(storage)
        for name in names:
            loaded = optuna.load_study(study_name=name, storage=storage)
            done = loaded.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            plots = [("history", optuna_plots.plot_optimization_history)]
            if len(done) >= 2:
                plots.append(("importance", optuna_plots.plot_param_importances))
            for kind, plot in plots if done else []:
                axes = plot(loaded)
                axes.figure.suptitle(name, fontsize=9)  # under it, Optuna's own title
                path = out_dir / f"{_file_name(name)}-{kind}.png"
                axes.figure.tight_layout()
                save_png(axes.figure, path, dpi=110)
                written.append(path)
    return written


@contextmanager
def _journal(spec: str):
    """The storage spec to open: an .xz journal file decompressed into a temporary file (Optuna
    reads journals by path), anything else as given."""
    if "://" in spec or not spec.endswith(".xz"):
        yield spec
        return
    with tempfile.TemporaryDirectory() as directory:
        plain = Path(directory) / Path(spec).name.removesuffix(".xz")
        try:
            with lzma.open(spec) as packed, plain.open("wb") as unpacked:
                shutil.copyfileobj(packed, unpacked)
        except lzma.LZMAError as error:
            raise ValueError(f"{spec}: {error}") from None
        yield str(plain)


def plot_bench(bench_json: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.png"
    chart(json.loads(bench_json.read_text()), path)
    return path


def _file_name(study_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", study_name).strip("_")
