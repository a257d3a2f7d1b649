"""Lesson 16's exercises: a worker thread that keeps the caller's autocast, and GradScaler's rule for its scale."""

import contextlib
import threading
from collections.abc import Callable
from types import SimpleNamespace

import torch

from .. import examples
from .check import Case, Exercise, first_difference


def _caller_autocast(case: Case) -> contextlib.AbstractContextManager:
    """The caller's autocast block, as the case's ``autocast`` keywords say; with none, no block at all."""
    autocast = case.context["autocast"]
    return contextlib.nullcontext() if autocast is None else torch.autocast("cpu", **autocast)


def _autocast_case(description: str, autocast: dict | None, hint: str = "") -> Case:
    model, (x, _) = examples.make_model(), examples.make_batch(6)
    case = Case(description, (x,), hint, {"model": model, "autocast": autocast})
    with _caller_autocast(case):
        case.context["expected"] = model(x).detach()
    return case


def _call_under_autocast(function: Callable, case: Case) -> tuple:
    """Call the learner's function inside the case's autocast block; note the threads the model ran in."""
    threads: list[threading.Thread] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        threads.append(threading.current_thread())
        return case.context["model"](x)

    with _caller_autocast(case):
        output = function(model, *case.args)
    return output, threads


def _autocast_judge(case: Case, answer: tuple) -> str | None:
    output, threads = answer
    if len(threads) != 1 or threads[0] is threading.current_thread():
        in_caller = threads and threads[0] is threading.current_thread()
        ran = "in the calling thread" if in_caller else f"{len(threads)} times"
        return f"the model ran {ran}: call it once, in a new threading.Thread"
    expected = case.context["expected"]
    if not isinstance(output, torch.Tensor):
        return f"expected the model's output tensor back, got {type(output).__name__}"
    if output.dtype != expected.dtype:
        return (f"the thread computed in {output.dtype}, the caller's autocast in {expected.dtype}: enter "
                f"torch.autocast inside the thread with the caller's enabled flag *and* dtype")
    if output.grad_fn is None:
        return ("the output is cut from the model's graph (it has no grad_fn): return the thread's result itself, "
                "so that backward reaches the model's weights")
    return first_difference(expected, output.detach(), "output", atol=1e-2)


IN_THREAD_WITH_AUTOCAST = Exercise(
    name="in_thread_with_autocast",
    task="Write in_thread_with_autocast(function, x): call function(x) in a new threading.Thread, under the "
         "caller's CPU autocast state (whether it is on, and its dtype), wait for it, and return the result.",
    cases=lambda: [
        _autocast_case("no autocast", None, "read torch.is_autocast_enabled('cpu') in the caller, not in the thread"),
        _autocast_case("torch.autocast('cpu'): bfloat16", {"dtype": torch.bfloat16},
                       "a new thread starts with autocast off: enter it again inside the thread"),
        _autocast_case("torch.autocast('cpu', dtype=torch.float16)", {"dtype": torch.float16},
                       "torch.get_autocast_dtype('cpu') in the caller; a new thread's default dtype is bfloat16"),
        _autocast_case("torch.autocast('cpu', dtype=torch.float16, enabled=False)",
                       {"dtype": torch.float16, "enabled": False},
                       "a block can name a dtype and still be off: pass the caller's enabled flag, not only its dtype"),
    ],
    judge=_autocast_judge,
    call=_call_under_autocast,
)


def _next_scale(scale: float, found_inf: bool, good_steps: int, growth_interval: int) -> tuple[float, int]:
    """The oracle: a real ``torch.amp.GradScaler`` with torch's defaults, put in the case's state, then updated.

    One weight whose gradient is inf (or 1.0) stands in for the model; ``unscale_`` needs only an object with
    ``param_groups``, so no ``torch.optim`` optimizer is built (that would import ``torch._dynamo``: about 2 s).
    """
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict({"scale": scale, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": growth_interval, "_growth_tracker": good_steps})
    weight = torch.zeros(1, requires_grad=True)
    weight.grad = torch.tensor([float("inf") if found_inf else 1.0])
    scaler.scale(torch.zeros(()))
    scaler.unscale_(SimpleNamespace(param_groups=[{"params": [weight]}]))
    scaler.update()
    return scaler.get_scale(), int(scaler.state_dict()["_growth_tracker"])


def _scale_judge(case: Case, answer) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "expected a pair (new_scale, new_good_steps)"
    expected = _next_scale(*case.args)
    return first_difference([float(expected[0]), expected[1]], [float(answer[0]), answer[1]], "(scale, good_steps)")


def _every_scaler_state() -> list[Case]:
    """Overflow or not, every count of good steps below the interval, intervals 1 to 4, three scales."""
    return [Case(f"scale {scale:g}, {'an overflow' if inf else 'a good step'}, {good} of {interval}",
                 (scale, inf, good, interval))
            for scale in (1.0, 1024.0, 2.0**16) for inf in (False, True) for interval in range(1, 5)
            for good in range(interval)]


NEXT_SCALE = Exercise(
    name="next_scale",
    task="Write next_scale(scale, found_inf, good_steps, growth_interval): what GradScaler.update() does with its "
         "defaults (backoff_factor 0.5, growth_factor 2). good_steps counts the steps in a row without an inf or "
         "NaN. Return (new_scale, new_good_steps).",
    cases=lambda: [
        Case("an overflow", (65536.0, True, 5, 2000), "an inf or NaN: halve the scale and start counting again"),
        Case("a good step, the 3rd of 3", (1024.0, False, 2, 3),
             "growth_interval good steps in a row: double the scale, and the count starts again from 0"),
        Case("a good step, the 1st of 3", (1024.0, False, 0, 3), "not yet growth_interval: only count it"),
        Case("an overflow right before growing", (1024.0, True, 2, 3)),
        Case("the 2000th good step", (2.0**16, False, 1999, 2000)),
    ],
    judge=_scale_judge,
    generated=_every_scaler_state,
)

EXERCISES = (IN_THREAD_WITH_AUTOCAST, NEXT_SCALE)
