"""Time one training step of dpcourse.DataParallel against torch's own DataParallel code, on 2 CPU devices.

    python -m tests.benchmarks.core_vs_torch --rounds 30 --json out/core_vs_torch.json   # from the repository root

Both wrap the same model on the same CPU devices: dpcourse with ``devices=dpcourse.devices(2)``, torch
with ``device_ids=[0, 1]`` inside ``torch_on_cpu()`` (its real Python code; see torch_on_cpu.py). A step is
forward, cross-entropy, backward and a written-out SGD update. The variants run in interleaved rounds
that rotate who goes first, the warm-up rounds are dropped, and the ratio dpcourse / torch is taken per
round (paired), so drift on this shared machine lands on both. The plain model on one device is timed
too, for scale. Rounds where other processes kept a quarter core or more busy are also reported apart.

Intra-op threads (``--threads``, default 1): dpcourse gives each CPU replica an equal share of the caller's
threads; torch's parallel_apply, written for GPUs, lets each replica thread use them all, so with 2 threads
2 replicas run 4 busy threads on 2 cores, and small operators then wait on each other's barriers (tens of
times slower when another process holds a core). With 1 thread both run one thread per replica, and the
comparison is of the Python code of the four steps, which is what it is for. ``--threads 2`` shows the other.
"""

import argparse
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import dpcourse
from dpcourse.models_to_time import ModelToTime
from dpcourse.timing import wall_time

from .models import batch_size, models, training_step
from .rounds import watched
from .torch_on_cpu import torch_on_cpu

MODELS = {model.label: model for model in models(quick=False)}
BATCH = batch_size(quick=False)


def training_steps(forward: nn.Module, model: nn.Module, workload: ModelToTime, steps: int) -> Callable[[], None]:
    """``steps`` training steps of ``forward`` (the model or a wrapper of it) on one fixed batch."""
    step = training_step(forward, model, workload, BATCH, torch.device("cpu"))

    def run() -> None:
        for _ in range(steps):
            step()

    return run


def measure(workload: ModelToTime, rounds: int, warmup: int, steps: int) -> dict:
    """Interleaved rounds of dpcourse, torch and one device; per-step seconds and the paired ratios."""
    models = {name: workload.mlp.build() for name in ("dpcourse", "torch", "one device")}
    wrappers = {
        "dpcourse": dpcourse.DataParallel(models["dpcourse"], devices=dpcourse.devices(2)),
        "torch": nn.DataParallel(models["torch"], device_ids=[0, 1]),  # inside torch_on_cpu(): see main()
        "one device": models["one device"],
    }
    assert wrappers["torch"].device_ids == [0, 1], "torch's DataParallel must be built inside torch_on_cpu()"
    variants = {name: wall_time(training_steps(wrappers[name], models[name], workload, steps)) for name in models}
    measured = watched(variants, rounds, warmup)
    measured.samples = {name: [s / steps for s in seconds] for name, seconds in measured.samples.items()}
    return measured.report(baseline="torch", ratio_key="ratio_to_torch")


def table(results: dict[str, dict]) -> str:
    lines = [
        f"{'model':<13} {'variant':<11} {'median ms':>10} {'q1 ms':>8} {'q3 ms':>8}   ratio to torch (q1-q3)",
    ]
    for model, result in results.items():
        for variant, step in result["steps"].items():
            ratio = result["ratio_to_torch"].get(variant)
            paired = f"{ratio['median']:.3f} ({ratio['q1']:.3f}-{ratio['q3']:.3f})" if ratio else "1"
            lines.append(
                f"{model:<13} {variant:<11} {step['median_ms']:>10.2f} {step['q1_ms']:>8.2f} {step['q3_ms']:>8.2f}"
                f"   {paired}"
            )
        quiet = result.get("quiet", {}).get("ratio_to_torch", {}).get("dpcourse")
        note = f"; dpcourse/torch over those {quiet['median']:.3f}" if quiet else ""
        lines.append(f"{'':<13} quiet rounds: {result['quiet_rounds']} of {result['steps']['torch']['n']}{note}")
    return "\n".join(lines)


def _commit() -> str:
    """The checkout's commit, with "+changes" when files differ from it: which dpcourse was measured."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="rounds run first and dropped (default 5)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per variant per round (default 3)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, see above)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    # dpcourse never imports torch.nn.parallel, so holding torch's patches for the whole run leaves it alone.
    with torch_on_cpu():
        results = {name: measure(MODELS[name], args.rounds, args.warmup, args.steps) for name in args.models}
    setup = {
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "intra_op_threads": torch.get_num_threads(),
        "batch": BATCH,
        "devices": 2,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "steps_per_round": args.steps,
    }
    print(", ".join(f"{k} {v}" for k, v in setup.items()))
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"setup": setup, "models": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
