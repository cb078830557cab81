"""What a tune shows while it runs: trials measured, last and best GFLOPS, failures, and an ETA
that counts the finalists still to re-time."""

from __future__ import annotations

import time

import optuna
from optuna.trial import TrialState

from autotune.tune.study import MEASURED, measured_trials


class Progress:
    def __init__(self, enabled: bool, done: int, total: int, timeout: float | None, finalists: int):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as Bar

        self.bar = Bar(
            TextColumn("{task.fields[phase]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), disable=not enabled,
        )
        self.started, self.first_done, self.total, self.finalists = time.monotonic(), done, total, finalists
        self.task = self.bar.add_task("tune", total=total + finalists, completed=done, phase="tuning", status="")
        self.deadline = time.monotonic() + timeout if timeout else None
        self.retimed = 0

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def update(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """After each trial of this process."""
        if trial.state in MEASURED and "repeat_of" not in trial.user_attrs:
            self.show(study)

    def show(self, study: optuna.Study) -> None:
        """Read the study (also what worker processes wrote) and redraw."""
        measured = measured_trials(study)
        done = [t for t in measured if t.state == TrialState.COMPLETE]
        best = max((t.value for t in done), default=0.0)
        last = f"{done[-1].value:,.4g}" if done else "-"
        status = f"last {last}  best {best:,.4g} GFLOPS  failed {len(measured) - len(done)}"
        status += f"  {self.eta(len(measured))}"
        self.bar.update(self.task, completed=min(len(measured), self.total), status=status)

    def retiming(self) -> None:
        """One more finalist re-timed."""
        self.retimed += 1
        self.bar.update(self.task, completed=self.total + self.retimed, phase="re-timing finalists")

    def eta(self, measured: int) -> str:
        """Time left at this run's pace; a finalist costs about what a trial does."""
        new = measured - self.first_done
        if new <= 0:
            return "ETA -"
        per_trial = (time.monotonic() - self.started) / new
        left = per_trial * (max(self.total - measured, 0) + self.finalists - self.retimed)
        if self.deadline:
            left = min(left, max(0.0, self.deadline - time.monotonic()) + per_trial * self.finalists)
        return f"ETA {left:.0f} s"
