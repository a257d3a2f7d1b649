"""Lesson 00's quiz experiments (``quizzes/00_start_here.toml``): torch's DataParallel on a laptop, and the
four steps of one forward in the order they run.
"""

import contextlib
from unittest import mock

import torch
from torch import nn

from dpcourse import viz
from dpcourse.trace import trace

from ..lab import data_parallel_over, error_summary, raised_by, seeded_module, seeded_randn
from ..outcome import Outcome, only_true


def laptop_passthrough() -> Outcome:
    """``torch.nn.DataParallel`` where torch finds no accelerator: ``device_ids == []`` and forward is the module's."""
    model = seeded_module(lambda: nn.Linear(4, 2)).cpu()
    x = seeded_randn(8, 4).cpu()
    has_gpu = torch.cuda.is_available()
    # On a GPU machine, hide the GPU while wrapping: __init__ is where torch looks for one.
    hidden = mock.patch.object(torch.cuda, "is_available", return_value=False) if has_gpu else contextlib.nullcontext()
    wrapping: list[torch.nn.Module] = []
    with hidden:
        error = raised_by(lambda: wrapping.append(torch.nn.DataParallel(model)))
    if not wrapping:
        text = f"torch.nn.DataParallel(nn.Linear(4, 2)) with no GPU -> {error_summary(error)}"
        return Outcome(text, only_true({"It raises an error: DataParallel needs a GPU": error is not None}))
    wrapped = wrapping[0]
    passthrough = wrapped.device_ids == [] and wrapped.module is model and torch.equal(wrapped(x), model(x))
    text = (
        ("This machine has a CUDA GPU; it was hidden from DataParallel to show the laptop case.\n" if has_gpu else "")
        + "wrapped = torch.nn.DataParallel(nn.Linear(4, 2)) with no GPU:\n"
        f"  wrapped.device_ids         = {wrapped.device_ids}\n"
        f"  wrapped.module is model    = {wrapped.module is model}\n"
        f"  wrapped(x) equals model(x) = {torch.equal(wrapped(x), model(x))}  (no scatter, no replicas, no threads)\n"
        f"  state_dict keys            = {list(wrapped.state_dict())}  (the `module.` prefix is still added)"
    )
    value = only_true(
        {
            "It calls `model(x)` unchanged: a pass-through with `device_ids == []`": passthrough,
            "It raises an error: DataParallel needs a GPU": error is not None,
            "It splits `x` over the CPU cores": bool(wrapped.device_ids),
        }
    )
    return Outcome(text, value)


def four_steps_in_order() -> Outcome:
    """Trace one forward on 2 devices and list the steps in the order they started."""
    dp = data_parallel_over(seeded_module(lambda: nn.Linear(4, 2)), 2)
    with trace() as recorded:
        dp(seeded_randn(8, 4))
    names = {"forward": "parallel_apply"}  # the trace calls each replica's part of parallel_apply "forward"
    order = list(dict.fromkeys(names.get(span.step, span.step) for span in recorded.spans))
    lines = [f"  {s.start * 1e3:7.3f} ms  {s.step:<9} replica={s.replica} thread={s.thread}" for s in recorded.spans]
    text = "Spans recorded by dpcourse.trace() during dp(x), 8 rows on 2 devices:\n" + "\n".join(lines)
    return Outcome(text, " → ".join(order), viz.timeline(recorded))


EXPERIMENTS = (
    laptop_passthrough,
    four_steps_in_order,
)
