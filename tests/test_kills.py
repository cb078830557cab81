"""kill -9 of `mmtune tune` at any moment loses nothing: a rerun resumes with the completed trials."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna

from autotune.tune.storage import open_storage
from autotune.tune.study import measured_trials, study_name
from autotune.space.problem import Problem

SHAPE = ("6", "5", "4")
TRIALS = 5  # two measured before the kill, one running, two left for the rerun


def command(trials: int) -> list[str]:
    m, n, k = SHAPE
    return [sys.executable, "-m", "autotune", "tune", "--m", m, "--n", n, "--k", k,
            "--trials", str(trials), "--family", "shared", "--simulate", "--jobs", "1"]


def load(journal):
    return optuna.load_study(study_name=study_name(Problem("simulator", "float32", *map(int, SHAPE), precision="ieee"), narrowed=True), storage=open_storage(str(journal)))


def test_kill_9_mid_study_then_rerun_resumes(isolated_cache):
    journal = isolated_cache.parent / "studies.journal"
    tuner = subprocess.Popen(command(TRIALS), env=os.environ, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(0.3)
        if journal.exists():
            try:
                study = load(journal)
            except KeyError:  # the study is being created
                continue
            if len(measured_trials(study)) >= 2 and study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
                break
    os.killpg(tuner.pid, signal.SIGKILL)  # the tuner and its measuring child, mid-trial
    tuner.wait()
    killed = load(journal)
    kept = {t.number for t in measured_trials(killed)}
    assert len(kept) >= 2

    rerun = subprocess.run(command(TRIALS), env=os.environ, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{TRIALS} trials (" in rerun.stdout and "written to the cache" in rerun.stdout
    study = load(journal)
    assert kept <= {t.number for t in measured_trials(study)}  # nothing measured before is lost
    abandoned = [t for t in study.trials if "abandoned" in t.user_attrs]
    assert abandoned and all(t.state == optuna.trial.TrialState.FAIL for t in abandoned)
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert sqlite3.connect(isolated_cache).execute("PRAGMA integrity_check").fetchone() == ("ok",)
