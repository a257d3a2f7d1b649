"""Lesson 04's exercises: one thread per replica, passing the caller's grad mode into a thread, a module that
finds its device the way a replica can, and which replica an error names."""

import itertools
import re
import threading

import torch

from ..data_parallel import DataParallel
from ..devices import devices
from ..examples import seeded_randn
from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference

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



def _with_and_without_data_parallel(module_class: type, n: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DataParallel's output, and what FindsItsDevice means to compute: its linear layer on x, on one device."""
    module = module_class().to(devices(n)[0])
    x = seeded_randn(rows, 8, seed=rows).to(devices(n)[0])
    return DataParallel(module, devices=devices(n))(x), module.linear(x)


def _same_output_judge(case: Case, answer) -> str | None:
    parallel, alone = answer
    # up to rounding: a GPU may sum a chunk's products in another order
    difference = first_difference(alone.detach(), parallel.detach(), "DataParallel's output", atol=1e-5)
    return difference and f"{difference} (expected self.linear(x), as the module computes it alone)"


USES_ITS_WEIGHTS_DEVICE = Exercise(
    name="UsesItsWeightsDevice",
    task="Write UsesItsWeightsDevice, a FindsItsDevice whose forward works under DataParallel: the same output "
         "with and without it.",
    cases=lambda: [
        Case("10 rows on 2 devices", (2, 10), "a replica's parameters() yields nothing: what does it hold?"),
        Case("7 rows on 3 devices", (3, 7)),
        Case("6 rows on 1 device", (1, 6)),
    ],
    judge=_same_output_judge,
    call=lambda module_class, case: _with_and_without_data_parallel(module_class, *case.args),
)


class _Picky(torch.nn.Module):
    """Raises on a chunk holding a negative value, as the lesson's ``Picky`` does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x < 0).any():
            raise ValueError(f"a negative value in this chunk of {len(x)} rows")
        return x


def _reported_replica(batch: int, n: int, bad_rows: list[int]) -> int:
    """The replica number that DataParallel's own error message names."""
    values = torch.ones(batch, 1, device=devices(n)[0])
    values[bad_rows] = -1.0
    try:
        DataParallel(_Picky(), devices=devices(n))(values)
    except ValueError as error:
        return int(re.search(r"in replica (\d+)", str(error))[1])
    raise AssertionError(f"no replica raised for rows {bad_rows}")


def _bad_rows_on_2_to_4_devices() -> list[Case]:
    return [Case(f"rows {list(bad)} of {batch} bad, {plural(n, 'device')}", (batch, n, list(bad)))
            for batch in range(2, 9) for n in range(2, 5) for bad in itertools.combinations(range(batch), 2)]


REPORTED_REPLICA = Exercise(
    name="reported_replica",
    task="Write reported_replica(batch, n, bad_rows): the replica number in DataParallel's error message when the "
         "rows bad_rows of a batch of `batch` rows on n devices make the module raise.",
    cases=lambda: [
        Case("row 9 of 10 on 4 devices", (10, 4, [9]), "torch.chunk gives chunks of ceil(batch / n) rows"),
        Case("rows 8 and 5 of 10 on 4 devices", (10, 4, [8, 5]),
             "several replicas raise: the message names the lowest-numbered one"),
        Case("row 5 of 6 on 4 devices", (6, 4, [5]), "6 rows on 4 devices make chunks of 2 rows"),
        Case("rows 6 and 3 of 7 on 3 devices", (7, 3, [6, 3])),
    ],
    judge=equals(_reported_replica),
    generated=_bad_rows_on_2_to_4_devices,
)

EXERCISES = (RUN_REPLICAS, IN_CALLERS_GRAD_MODE, USES_ITS_WEIGHTS_DEVICE, REPORTED_REPLICA)
