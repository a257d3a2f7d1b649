"""``python -m tests.benchmarks.torchrun_restarts [--runs 10] [--max-restarts 1] [--json out.json]``: lesson 24's
killed-and-resumed program under real ``torchrun --max-restarts``, run again and again, and how each run ended.

The lesson restarts its ranks with the course's launcher (``dpcourse.faults.restarts``), which has torchrun's
semantics. This measures torchrun itself on CPU gloo ranks: whether every run ends, and ends with the resumed
weights bit-identical to the uninterrupted run's, or attempt 1 fails to connect ("Gloo connectFullMesh failed ...
Connection refused", ../shared/reviews/2026-12-06/part4_feasibility.md) or hangs until the deadline. It is a
measurement, not a test: on a loaded 2-core machine half the runs failed so (docs/benchmarks.md), which a test
in CI could not tell from a regression.
"""

import argparse
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import torch

from dpcourse.faults import resume_runs
from dpcourse.ranks.torchrun import torchrun

NOT_CONNECTED = ("connectFullMesh", "Connection refused")


def one_run(directory: Path, max_restarts: int, timeout: float) -> str:
    """How one torchrun run of lesson 24's program ended: "bit-identical", "different weights",
    "could not connect", "hung" or "failed"."""
    os.environ["PET_MAX_RESTARTS"] = str(max_restarts)  # torch/distributed/run.py reads PET_<option>
    try:
        ran = torchrun("dpcourse.faults.resume_runs", [str(directory)], nproc=2, timeout=timeout)
    except TimeoutError:
        return "hung"
    if ran.returncode != 0:
        return "could not connect" if any(text in ran.stderr for text in NOT_CONNECTED) else "failed"
    results = [torch.load(directory / f"result-rank-{rank}.pt", weights_only=False) for rank in range(2)]
    reference = resume_runs.uninterrupted(directory)
    same = all(torch.equal(a, b) for rank in range(2)
               for a, b in zip(reference[rank]["parameters"], results[rank]["lanes"]["resumed"]["parameters"],
                               strict=True))
    return "bit-identical" if same else "different weights"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.torchrun_restarts")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-restarts", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds before a run counts as hung")
    parser.add_argument("--json", type=Path, default=Path("out/torchrun_restarts.json"))
    args = parser.parse_args(argv)
    endings = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="dpcourse-torchrun-") as directory:
            endings.append(one_run(Path(directory), args.max_restarts, args.timeout))
        print(f"run {run + 1} of {args.runs}: {endings[-1]}", flush=True)
    counts = dict(Counter(endings))
    print(f"--max-restarts {args.max_restarts}, {args.runs} runs: {counts}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    results = {"runs": args.runs, "max_restarts": args.max_restarts, "endings": endings, "counts": counts,
               "cpus": os.cpu_count(), "torch": torch.__version__}
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
