"""Lesson 04's exercises: one thread per replica, and passing the caller's grad mode into a thread."""

import threading

import torch

from ..ui.words import plural
from .check import Case, Exercise

_WAIT = 1.0  # seconds a probe waits for the other replicas: only a wrong answer (one at a time) ever waits


class _Probe:
    """A replica's forward that records the thread it ran in, and whether the other replicas ran meanwhile."""

    def __init__(self, barrier: threading.Barrier | None) -> None:
        self.barrier, self.thread, self.together = barrier, None, True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.thread = threading.current_thread()
        if self.barrier is not None:
            try:
                self.barrier.wait(_WAIT)
            except threading.BrokenBarrierError:
                self.together = False
        return x * 2


def _probes(n: int, inputs: list) -> tuple[list[_Probe], list]:
    barrier = threading.Barrier(n) if n > 1 else None
    return [_Probe(barrier) for _ in range(n)], inputs


def _call_watching_threads(function, case: Case) -> tuple:
    """Call the learner's function; note every exception that a thread it started let escape.

    ``threading.excepthook`` only prints such an exception, so a thread that fails (an extra thread indexing past
    the last replica, say) would go unseen: here it is kept for the judge instead.
    """
    before, escaped = set(threading.enumerate()), []

    def keep(hooked: threading.ExceptHookArgs) -> None:
        if hooked.thread not in before:
            escaped.append(hooked.exc_value)

    hook, threading.excepthook = threading.excepthook, keep
    try:
        return function(*case.args), escaped
    finally:
        threading.excepthook = hook


def _threads_judge(case: Case, answered: tuple) -> str | None:
    probes, inputs = case.args
    answer, escaped = answered
    if not isinstance(answer, (list, tuple)) or len(answer) != len(inputs):
        found = plural(len(answer), "output") if isinstance(answer, (list, tuple)) else type(answer).__name__
        return f"expected {plural(len(inputs), 'output')}, one per replica in order, got {found}"
    for i, (x, out) in enumerate(zip(inputs, answer, strict=True)):
        if not isinstance(out, torch.Tensor) or not torch.equal(out, x * 2):
            return f"output {i} is not functions[{i}](inputs[{i}]): keep the outputs in replica order"
    if escaped:
        error = escaped[0]
        return (f"a thread the function started raised {type(error).__name__}: {error}. Start exactly one thread "
                "per replica, for i in range(len(functions)), and let none of them fail unseen")
    caller = threading.current_thread()
    if len(probes) == 1:
        return None if probes[0].thread is caller else "one replica should run inline, in the caller's thread"
    threads = [p.thread for p in probes]
    if caller in threads:
        return f"replica {threads.index(caller)} ran in the caller's thread: start one new thread per replica"
    if len(set(threads)) != len(threads):
        return "two replicas ran in the same thread: start one new thread per replica"
    alone = [i for i, p in enumerate(probes) if not p.together]
    if alone:
        return f"replica {alone[0]} ran while the others waited: start every thread, then join them all"
    return None


RUN_REPLICAS = Exercise(
    name="run_replicas",
    task="Write run_replicas(functions, inputs): call functions[i](inputs[i]) for every i, each in a new thread, "
         "all at once, and return the outputs in order (a single function runs inline, in the caller's thread).",
    cases=lambda: [
        Case("one replica", _probes(1, [torch.ones(2)]), "with one replica, skip the thread: call it directly"),
        Case("two replicas", _probes(2, [torch.ones(2), torch.arange(3.0)]),
             "threading.Thread(target=...) per replica; store each result by its index"),
        Case("four replicas", _probes(4, [torch.full((2,), float(i)) for i in range(4)]),
             "start all the threads first, then join them all"),
    ],
    judge=_threads_judge,
    call=_call_watching_threads,
)


def _call_in_thread(function, case: Case):
    """Make the wrapper under the case's grad mode, then call it in a new thread under the opposite mode."""
    made_with_grad, weight = case.args
    with torch.set_grad_enabled(made_with_grad):
        wrapper = function(lambda: weight * 2)
    result: dict = {}

    def worker() -> None:
        try:
            with torch.set_grad_enabled(not made_with_grad):
                result["output"] = wrapper()
        except BaseException as error:  # re-raised in the caller, where the check reports it
            result["error"] = error

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["output"]


def _grad_mode_judge(case: Case, answer) -> str | None:
    made_with_grad, _ = case.args
    if not isinstance(answer, torch.Tensor):
        return f"expected the function's output, a tensor, got {type(answer).__name__}"
    if answer.requires_grad != made_with_grad:
        mode = "enabled" if made_with_grad else "disabled"
        return (f"the function ran with grad {'disabled' if made_with_grad else 'enabled'}, but grad was {mode} "
                f"where the wrapper was made")
    return None


IN_CALLERS_GRAD_MODE = Exercise(
    name="in_callers_grad_mode",
    task="Write in_callers_grad_mode(function): a wrapper that, called later in any thread, runs function() "
         "with the grad mode that was on in the thread that made the wrapper.",
    cases=lambda: [
        Case("made under torch.no_grad(), called in a thread with grad on", (False, torch.ones(2, requires_grad=True)),
             "read torch.is_grad_enabled() when the wrapper is made, not when it is called"),
        Case("made with grad on, called in a thread under no_grad", (True, torch.ones(2, requires_grad=True)),
             "inside the wrapper, run function under torch.set_grad_enabled(the mode you read)"),
    ],
    judge=_grad_mode_judge,
    call=_call_in_thread,
)

EXERCISES = (RUN_REPLICAS, IN_CALLERS_GRAD_MODE)
