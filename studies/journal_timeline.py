"""Where a run of tunes spent its time, from its Optuna journal: per study (one product), when its
first trial started and its last ended (seconds from `--t0`, a Unix time, or from the first
trial), the trials measured, and how many of them compiled their build (compile_s above a
second) rather than loading it from the kernel store.

    python studies/journal_timeline.py studies.journal [--t0 SECONDS]
"""

from __future__ import annotations

import argparse
import statistics

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

COMPILED_S = 1.0  # a stored build loads in milliseconds; compiling one takes seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("journal")
    parser.add_argument("--t0", type=float, default=None)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = JournalStorage(JournalFileBackend(args.journal))
    studies = [optuna.load_study(study_name=s.study_name, storage=storage) for s in storage.get_all_studies()]
    measured = [[t for t in study.get_trials(deepcopy=False) if t.datetime_complete and "compile_s" in t.user_attrs]
                for study in studies]
    t0 = args.t0 if args.t0 is not None else min(t.datetime_start.timestamp() for ts in measured for t in ts)
    print("product\tfirst start s\tlast end s\ttrials\tcompiled\tloaded\tmedian trial s")
    for study, trials in zip(studies, measured):
        if not trials:
            continue
        compiled = sum(t.user_attrs["compile_s"] > COMPILED_S for t in trials)
        first = min(t.datetime_start.timestamp() for t in trials) - t0
        last = max(t.datetime_complete.timestamp() for t in trials) - t0
        median = statistics.median((t.datetime_complete - t.datetime_start).total_seconds() for t in trials)
        print(f"{study.user_attrs.get('shape')}\t{first:.1f}\t{last:.1f}\t{len(trials)}\t{compiled}\t"
              f"{len(trials) - compiled}\t{median:.2f}")


if __name__ == "__main__":
    main()
