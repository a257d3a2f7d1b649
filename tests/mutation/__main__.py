"""``python -m tests.mutation [NN ...] [--quick] [--json PATH]``: mutate the exercises' solutions, run the checks.

With lesson numbers (or exercise names), only their exercises run, and their entries replace theirs in the
report. ``--quick`` runs
the checks that stay in the kernel (no ranks), a bounded number of mutants each, and writes a report only where
``--json`` says. The lessons' environment (``notebooks/conftest.py``: CPU devices, a progress file of the tests')
is set first, as for nbval.
"""

import argparse
import json
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

from .exercises import ROOT


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*",
                        help="lesson numbers, e.g. 02 05, or exercise names (default: every lesson)")
    parser.add_argument("--quick", action="store_true", help="in-kernel checks only, a few mutants each")
    parser.add_argument("--json", type=Path, help="where to write the report (default: "
                        "docs/benchmark_results/mutation.json, or none with --quick)")
    args = parser.parse_args(argv)
    runpy.run_path(str(ROOT / "notebooks" / "conftest.py"))  # sets the lessons' environment variables
    os.environ["DPCOURSE_PROGRESS"] = str(Path(tempfile.gettempdir()) / "dpcourse-mutation" / "progress.json")

    from dpcourse.exercises import EXERCISES

    from . import exercises, report, score

    started = time.monotonic()
    target = args.json or (None if args.quick else report.REPORT)
    command = " ".join(["python -m tests.mutation", *argv])
    entries, failures = {}, []
    for exercise in exercises.find(args.lessons):
        if args.quick and EXERCISES[exercise.name].slow:
            continue
        print(f"{exercise.lesson} {exercise.name}", flush=True)
        try:
            entries[exercise.name] = score.evaluate(exercise, quick=args.quick,
                                                    progress=lambda line: print(line, flush=True))
        except score.ReferenceFailed as error:
            failures.append(str(error))
            continue
        if target:  # after each exercise: a run stopped half-way keeps what it measured
            report.write(target, entries, time.monotonic() - started, command)
    print(report.table(entries))
    print(f"{len(entries)} exercises in {time.monotonic() - started:.0f} s", *failures, sep="\n")
    if target:
        print(f"written {target}: {json.loads(target.read_text())['totals']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
