"""Run lessons top to bottom as a learner's "Restart & Run All" does, and count the cells that fail.

    python -m tests.run_lessons                        # both editions, here, errors counted, not fatal
    python -m tests.run_lessons --edition student --json out.json --fail-on-error

Unlike nbval, nothing is compared with the stored outputs: each lesson runs in a fresh kernel with errors
allowed, so that every failing cell is counted, and the run records per notebook its seconds, its error
cells and the first error. ``tests/benchmarks/on_gpu.sh`` runs it on a GPU machine (``DPCOURSE_DEVICES``
unset, so ``dpcourse.devices(n)`` is ``[cuda:0, ...]``), and CI runs the student edition with the oldest and
the newest torch the course supports (``.ci/run``). The environment is this process's: whatever
``DPCOURSE_DEVICES`` and ``IPYTHONDIR`` say here, the kernels see.
"""

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
EDITIONS = {"instructor": ROOT / "notebooks", "student": ROOT / "notebooks" / "student"}


def lessons(edition: str) -> list[Path]:
    folders = list(EDITIONS.values()) if edition == "both" else [EDITIONS[edition]]
    return [path for folder in folders for path in sorted(folder.glob("[0-9][0-9]_*.ipynb"))]


def run(path: Path, timeout: int = 600) -> dict:
    """Execute one notebook in a fresh kernel, errors allowed; its seconds, error cells and first error."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True).execute(cwd=str(path.parent))
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.output_type == "error"]
    first = f"{errors[0].ename}: {errors[0].evalue}"[:300] if errors else ""
    return {"path": str(path.relative_to(ROOT)), "seconds": round(time.perf_counter() - start, 1),
            "error_cells": len(errors), "first_error": first}


def machine() -> dict:
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"gpus": gpus, "torch": torch.__version__, "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat()}


def commit() -> str:
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def write_report(path: Path, results: list[dict]) -> None:
    """Write the report; rows of an earlier run of the same commit are kept where this run has none, so that a
    GPU machine's time limit per call can split the lessons over several calls."""
    report = {"machine": machine(), "commit": commit(), "notebooks": results}
    if path.exists():
        earlier = json.loads(path.read_text())
        if earlier.get("commit") == report["commit"]:
            ran = {row["path"] for row in results}
            kept = [row for row in earlier["notebooks"] if row["path"] not in ran]
            report["notebooks"] = sorted(kept + results, key=lambda row: row["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edition", choices=["both", *EDITIONS], default="both")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--fail-on-error", action="store_true", help="exit 1 when any cell failed")
    parser.add_argument("names", nargs="*", help="only lessons whose file name starts with one of these")
    args = parser.parse_args()
    results = []
    for path in lessons(args.edition):
        if args.names and not path.name.startswith(tuple(args.names)):
            continue
        results.append(run(path))
        row = results[-1]
        print(f"{row['path']:45} {row['seconds']:6.1f} s  {row['error_cells']} error cells  {row['first_error']}",
              flush=True)
    failed = sum(row["error_cells"] for row in results)
    print(f"{len(results)} notebooks, {failed} error cells")
    if args.json:
        write_report(args.json, results)
    return 1 if failed and args.fail_on_error else 0


if __name__ == "__main__":
    sys.exit(main())
