"""CPU devices: a DataParallel training step on 1, 2, 4 CPU "devices" against the plain single-device step.

The devices are always ``[cpu] * n`` (not ``dpcourse.devices(n)``), so this part measures the same thing
on a GPU machine. Every replica runs in a thread of its own, started for the call, and gets an equal share of
the intra-op threads (``dpcourse/parallel_apply.py``); backward on the CPU runs in the calling thread, replica
after replica.
"""

import statistics

import torch

import dpcourse
from dpcourse.models_to_time import ModelToTime
from dpcourse.timing import wall_time

from .models import batch_size, dp_step, models, tracing_cost, training_step
from .rounds import watched

BREAKDOWN = ("scatter", "replicate", "forward", "gather", "gather-backward", "backward", "reduce-add")
CPU = torch.device("cpu")


def scaling(workload: ModelToTime, batch: int, counts: tuple[int, ...], rounds: int, warmup: int) -> dict:
    """Step times on every device count, interleaved with the plain step, and each one's paired ratio to it."""
    model = workload.mlp.build()
    steps = {"single": training_step(model, model, workload, batch, CPU)}
    steps |= {f"dp{n}": dp_step(workload, batch, model, [CPU] * n) for n in counts}
    measured = watched({name: wall_time(step) for name, step in steps.items()}, rounds, warmup)
    report = measured.report("single", "vs_single")
    return {**report, "samples_s": measured.samples, "others_cores_per_round": measured.others}


def breakdown(workload: ModelToTime, batch: int, n: int, traced_steps: int, warmup: int) -> dict[str, float]:
    """Median milliseconds of each DataParallel step on ``n`` CPU devices, read from traces.

    A step's time runs from its first span's start to its last span's end, over all replicas. ``wake`` is
    replicate's end to the first forward's start (handing the replicas to their threads), ``stagger`` the
    first forward's start to the last one's, ``other`` what no span covers (loss, optimizer, Python glue).
    """
    step = wall_time(dp_step(workload, batch, workload.mlp.build(), [CPU] * n))
    parts: dict[str, list[float]] = {name: [] for name in ("total", *BREAKDOWN, "wake", "stagger", "other")}
    for i in range(warmup + traced_steps):
        with dpcourse.trace() as t:
            total = step()
        if i < warmup:
            continue
        spans = {name: t.steps(name) for name in BREAKDOWN}
        for name, found in spans.items():
            parts[name].append(max(s.end for s in found) - min(s.start for s in found) if found else 0.0)
        starts = sorted(s.start for s in spans["forward"])
        parts["wake"].append(starts[0] - spans["replicate"][0].end)
        parts["stagger"].append(starts[-1] - starts[0])
        parts["total"].append(total)
        parts["other"].append(total - sum(parts[name][-1] for name in BREAKDOWN))
    return {name: statistics.median(seconds) * 1e3 for name, seconds in parts.items()}


def run(quick: bool, rounds: int, warmup: int) -> dict:
    """Every CPU measurement, by workload: scaling, the per-step breakdown and the cost of tracing."""
    counts, batch = ((1, 2) if quick else (1, 2, 4)), batch_size(quick)
    results = {}
    for workload in models(quick):
        print(f"cpu: {workload.describe()}, batch {batch}", flush=True)
        results[workload.label] = {
            "model": {"layers": list(workload.mlp.widths), "batch": batch},
            "scaling": scaling(workload, batch, counts, rounds, warmup),
            "breakdown": {str(n): breakdown(workload, batch, n, rounds, warmup) for n in counts if n > 1},
            "tracing": tracing_cost(workload, batch, [CPU] * 2, rounds, warmup),
        }
    return results
