"""Experiments for lesson 14: gradient accumulation on one device, under DataParallel, and under DDP's no_sync().

See ``experiments`` for how an experiment reports its ``Outcome``. The DDP ones start 2 real gloo ranks.
"""

from collections.abc import Callable

import torch

from dpcourse import accumulation, examples
from dpcourse.data_parallel import DataParallel
from dpcourse.ddp.demos.accumulation import compare_schedules
from dpcourse.devices import devices as choose_devices
from dpcourse.trace import trace

from ..outcome import Outcome, only_true


def _accumulated(model: torch.nn.Module, batch: int, micro_batch: int, rule: str) -> tuple[float, float]:
    """Accumulate into ``model`` and return (ratio of its gradient to one device's, max |difference|)."""
    oracle = examples.twin(model)
    x, y = examples.make_batch(batch)
    accumulation.accumulate(model, x, y, micro_batch, rule)
    examples.loss_fn(oracle(x), y).backward()
    got = torch.cat([p.grad.flatten() for p in model.parameters()])
    single = torch.cat([p.grad.flatten() for p in oracle.parameters()])
    return (got @ single / (single @ single)).item(), examples.max_grad_difference(model, oracle)


def accumulate_without_dividing() -> Outcome:
    """3 micro-batches of 8, each mean loss backward as is: the accumulated gradient is 3 times one device's."""
    ratio, difference = _accumulated(examples.make_model(), 24, 8, "none")
    _, divided = _accumulated(examples.make_model(), 24, 8, "1/K")
    text = (f"accumulated gradient / one device's gradient of all 24 samples: {ratio:.4f} "
            f"(max |difference| {difference:.3f})\nwith each loss divided by K = 3: max |difference| {divided:.0e}")
    value = only_true({
        "The same: each mean loss already averages its samples": abs(ratio - 1) < 1e-4,
        "A third of it": abs(ratio - 1 / 3) < 1e-4,
        "3 times as large": abs(ratio - 3) < 1e-4,
    })
    return Outcome(text, value)


def reduce_add_every_micro_step() -> Outcome:
    """Trace DataParallel on 2 devices through 3 micro-steps: one replicate and one reduce-add in each."""
    devices = choose_devices(2)
    dp = DataParallel(examples.make_model().to(devices[0]), devices=devices)
    x, y = examples.make_batch(24, device=devices[0])
    with trace() as recorded:
        accumulation.accumulate(dp, x, y, 8, "1/K")
    counts = {step: len(recorded.steps(step)) for step in ("scatter", "replicate", "reduce-add")}
    text = f"3 micro-steps of 8 rows on 2 devices, traced: {counts}"
    return Outcome(text, counts["reduce-add"])


def _ddp_no_sync(schedule: str, claims: Callable[[int, float], dict[str, bool]]) -> Outcome:
    """4 micro-batches of 4 rows per rank on 2 ranks under ``schedule``; ``claims(all-reduces, max diff)``."""
    (run,) = compare_schedules(2, [(schedule, (4, 4, 4, 4), "1/K")]).runs
    text = (f"all-reduced buckets per micro-step: rank 0 {run.allreduces[0]}, rank 1 {run.allreduces[1]}\n"
            f"final gradient vs one device on all 32 rows: max |difference| {run.max_diff_to_full_batch:.0e}")
    return Outcome(text, only_true(claims(sum(run.allreduces[0]), run.max_diff_to_full_batch)))


def no_sync_allreduces() -> Outcome:
    """2 DDP ranks, 4 micro-steps, the first 3 inside no_sync(): a counting comm hook sees 1 all-reduce per rank."""
    return _ddp_no_sync("no_sync", lambda allreduces, difference: {
        "4: `no_sync()` only postpones them to the end of the block": allreduces == 4,
        "0: after `no_sync()` you must all-reduce the gradients yourself": allreduces == 0,
        "1: only the last backward all-reduces, the sum of all 4": allreduces == 1 and difference < 1e-6,
    })


def no_sync_forward_outside() -> Outcome:
    """The same, with each forward of micro-steps 1-3 outside no_sync(): every backward all-reduces."""
    return _ddp_no_sync("no_sync, forward outside", lambda allreduces, difference: {
        "4: each forward outside `no_sync()` already set up its backward's all-reduce": allreduces == 4,
        "1: the backwards inside `no_sync()` do not all-reduce": allreduces == 1,
        "The gradients of micro-steps 1-3 are lost": difference > 1e-6,
    })


def last_partial_micro_batch() -> Outcome:
    """10 samples in micro-batches of 4, 4, 2, each mean loss divided by 3: the weight of every sample, measured."""
    weights = accumulation.sample_weights(10, 4, "1/K")
    last, first = weights.weights[-1].item(), weights.weights[0].item()
    text = f"weight of each sample's loss (one device: 1/10):\n{weights}"
    value = only_true({
        "1/10 each, like every other sample": abs(last - 0.1) < 1e-6,
        "1/6 each, twice the others' 1/12": abs(last - 1 / 6) < 1e-6 and abs(first - 1 / 12) < 1e-6,
        "1/30 each: a short micro-batch counts less": abs(last - 1 / 30) < 1e-6,
    })
    return Outcome(text, value)


EXPERIMENTS = (
    accumulate_without_dividing,
    reduce_add_every_micro_step,
    no_sync_allreduces,
    no_sync_forward_outside,
    last_partial_micro_batch,
)
