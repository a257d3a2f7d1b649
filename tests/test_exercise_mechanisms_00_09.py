"""The checks of lessons 03, 06, 07 and 09 watch the mechanism their exercise teaches (issue 36), and every check
has a time limit and speaks to nbgrader.

- ``replicate_parameters``: every replica's tensors have their own storage (the audit's M3a shared one list);
- ``reduce_add``: the oracle computes on its own copies before the learner's function runs, so an in-place
  answer with the right sums passes (M6b);
- ``train_on_devices``: ``dpcourse.trace()`` must see one forward on n replicas and one reduce-add per step into
  the given model (M7a trained on one device, M7b used torch's DataParallel, a pass-through on a CPU machine);
- ``bytes_per_step``: a dict is compared by keys and values, not by the order of its keys (M9a).

The audit's mutants are those of ``../shared/reviews/2026-12-06/truth_00_10.md``, section "Mutants run through
dpcourse.exercises.check"; the others are planted mistakes a learner could make.
"""

import copy
import dataclasses
import time

import pytest
import torch
from IPython.core.formatters import DisplayFormatter

import dpcourse
from dpcourse import examples, exercises
from dpcourse.exercises import registry
from dpcourse.exercises.check import FAILED, PASSED, first_difference, run
from tests.lesson_solutions import lesson_solutions

SOLUTIONS, _ = lesson_solutions()


def _failures(report: exercises.Report) -> list[str]:
    return [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]


def _rejected_with(name: str, answer, message: str) -> None:
    report = exercises.check(name, answer)
    assert report.status == FAILED, repr(report)
    assert any(message in detail for detail in _failures(report)), repr(report)


# ---- lesson 03: replicate_parameters -----------------------------------------------------------------------

def _views_of_one_clone(params, n):
    shared = [p.clone() for p in params]
    return [list(params)] + [[c.view_as(c) for c in shared] for _ in range(n - 1)]


def _replica_1s_copies_reused(params, n):
    copies = [p.clone() for p in params]
    return [list(params)] + [list(copies) for _ in range(n - 1)]


def _later_replicas_view_replica_1(params, n):
    first = [p.clone() for p in params]
    return [list(params), first] + [[c[...] for c in first] for _ in range(n - 2)]


REPLICATE_PARAMETERS_MISTAKES = {
    "M3a: one cloned list multiplied for replicas 1..n-1": (
        lambda params, n: [list(params)] + [[p.clone() for p in params]] * (n - 1),
        "replica 2, tensor 0 shares its memory with replica 1's tensor 0"),
    "views of one clone for every replica": (
        _views_of_one_clone, "replica 2, tensor 0 shares its memory with replica 1"),
    "replica 1's copies in a new list for each replica": (
        _replica_1s_copies_reused, "replica 2, tensor 0 shares its memory with replica 1"),
    "replicas 2.. slice replica 1's copies": (
        _later_replicas_view_replica_1, "replica 2, tensor 0 shares its memory with replica 1"),
    "the last replica is a view of the originals": (
        lambda params, n: [list(params)] + [[p.clone() for p in params] for _ in range(n - 2)]
        + [[p[...] for p in params]] * (n > 1),
        "shares the original's memory"),
}


@pytest.mark.parametrize("mistake", REPLICATE_PARAMETERS_MISTAKES)
def test_replicate_parameters_rejects_replicas_that_share_memory(mistake: str) -> None:
    _rejected_with("replicate_parameters", *REPLICATE_PARAMETERS_MISTAKES[mistake])


def test_replicate_parameters_accepts_one_flat_buffer_per_replica() -> None:
    """Tensors of one replica may share a storage, as broadcast_coalesced's flat buffer per device does."""
    def flat_per_replica(params, n):
        replicas = [list(params)]
        for _ in range(n - 1):
            flat = torch.cat([p.reshape(-1) for p in params])
            replicas.append([piece.view_as(p) for piece, p in zip(flat.split([p.numel() for p in params]), params,
                                                                   strict=True)])
        return replicas

    assert exercises.check("replicate_parameters", flat_per_replica).passed


# ---- lesson 06: reduce_add ---------------------------------------------------------------------------------

def _in_place_into_replica_0(grads):
    """The audit's M6b: sums into replica 0's own tensors, and returns them (right values)."""
    out = list(grads[0])
    for replica in grads[1:]:
        for j, g in enumerate(replica):
            out[j] += g
    return out


def _in_place(replicas_added):
    def reduce_add(grads):
        out = list(grads[0])
        for replica in replicas_added(grads):
            for j, g in enumerate(replica):
                out[j] += g
        return out

    return reduce_add


def test_reduce_add_accepts_a_sum_into_replica_0s_tensors_m6b() -> None:
    report = exercises.check("reduce_add", _in_place_into_replica_0)
    assert report.passed, repr(report)


REDUCE_ADD_MISTAKES = {
    "in place, replica 0 added to itself again": (_in_place(lambda grads: grads), "answer[0]"),
    "in place, the last replica left out (loop bound off by one)": (_in_place(lambda grads: grads[1:-1]),
                                                                     "answer[0]"),
    "M6a: the mean": (lambda grads: [sum(same) / len(same) for same in zip(*grads, strict=True)], "answer[0]"),
    "replicas 1.. summed, replica 0 forgotten": (
        lambda grads: [sum(same[1:], torch.zeros_like(same[0])) for same in zip(*grads, strict=True)], "answer[0]"),
}


@pytest.mark.parametrize("mistake", REDUCE_ADD_MISTAKES)
def test_reduce_add_rejects_wrong_sums_against_an_oracle_that_ran_first(mistake: str) -> None:
    _rejected_with("reduce_add", *REDUCE_ADD_MISTAKES[mistake])


def test_the_expected_answer_comes_from_copies_made_before_the_learners_function_ran() -> None:
    """split_gradient's oracle returns views of its argument: an answer that clears the argument after copying
    its pieces is right, and the expected pieces must not turn to zeros with it."""
    def split_then_clear(grad, sizes):
        pieces = [piece.clone() for piece in grad.split(sizes)]
        grad.zero_()
        return pieces

    assert exercises.check("split_gradient", split_then_clear).passed
    report = exercises.check("split_gradient", lambda grad, sizes: list(grad.zero_().split(sizes)))
    assert report.status == FAILED and "expected" in _failures(report)[0]


# ---- lesson 07: train_on_devices ---------------------------------------------------------------------------

def _steps(forward, backward_from=None, zero=True, wrap=lambda model, n: model):
    """A training loop: ``forward(model, wrapped, x, n)`` gives the output the loss is taken of."""
    def train_on_devices(model, x, y, n, steps, lr):
        wrapped = wrap(model, n)
        for _ in range(steps):
            if zero:
                model.zero_grad()
            examples.loss_fn(forward(model, wrapped, x, n), y).backward()
            examples.sgd_step(model, lr)
        return model

    return train_on_devices


def _dp(model, n):
    return dpcourse.DataParallel(model, devices=dpcourse.devices(n))


def _a_copy_wrapped(model, x, y, n, steps, lr):
    """Trains a deep copy on n replicas, then loads its weights into the model: the weights come out right."""
    twin = copy.deepcopy(model)
    _steps(lambda m, wrapped, x, n: wrapped(x), wrap=_dp)(twin, x, y, n, steps, lr)
    model.load_state_dict(twin.state_dict())
    return model


def _forward_twice(model, wrapped, x, n):
    with torch.no_grad():
        wrapped(x)  # "to look at the output first"
    return wrapped(x)


def _wasted_wrapper_forward(model, wrapped, x, n):
    wrapped(x)  # the wrapper runs, but the loss comes from the bare model
    return model(x)


def _returns_the_copy(model, x, y, n, steps, lr):
    twin = copy.deepcopy(model)
    return _steps(lambda m, wrapped, x, n: wrapped(x), wrap=_dp)(twin, x, y, n, steps, lr)


def _gradient_divided_by_n(model, x, y, n, steps, lr):
    dp = _dp(model, n)
    for _ in range(steps):
        model.zero_grad()
        examples.loss_fn(dp(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad / n
    return model


TRAIN_ON_DEVICES_MISTAKES = {
    "M7a: plain one-device training, n ignored": (
        _steps(lambda model, wrapped, x, n: model(x)),
        "no step ran on 4 replicas: wrap the model in dpcourse.DataParallel(model, devices="),
    "M7b: torch.nn.DataParallel, a pass-through on a CPU machine": (
        _steps(lambda model, wrapped, x, n: wrapped(x), wrap=lambda model, n: torch.nn.DataParallel(model)),
        "no step ran on 4 replicas: wrap the model in dpcourse.DataParallel(model, devices="),
    "always two devices": (
        _steps(lambda model, wrapped, x, n: wrapped(x), wrap=lambda model, n: _dp(model, 2)),
        "no step ran on 4 replicas (they ran on 2)"),
    "the loss taken from the bare model after a forward through the wrapper": (
        _steps(_wasted_wrapper_forward, wrap=_dp), "the replicas' gradients were summed into the model in 0 of"),
    "a second forward under no_grad in every step": (
        _steps(_forward_twice, wrap=_dp), "expected one forward on 2 replicas in each of the 3 steps"),
    "a deep copy wrapped and trained, its weights loaded back": (
        _a_copy_wrapped, "the model you were given got gradients in 0 of 3 steps"),
    "a deep copy wrapped, trained and returned": (_returns_the_copy, "the model you were given got gradients in 0"),
    "M7c: the gradient divided by n": (_gradient_divided_by_n, "weights[0]"),
    "M7d: no zero_grad": (_steps(lambda model, wrapped, x, n: wrapped(x), zero=False, wrap=_dp), "weights[0]"),
}


@pytest.mark.parametrize("mistake", TRAIN_ON_DEVICES_MISTAKES)
def test_train_on_devices_rejects_a_loop_that_does_not_run_data_parallel_as_taught(mistake: str) -> None:
    _rejected_with("train_on_devices", *TRAIN_ON_DEVICES_MISTAKES[mistake])


def test_train_on_devices_accepts_the_functional_form_and_returning_the_wrapper() -> None:
    def functional(model, x, y, n, steps, lr):
        for _ in range(steps):
            model.zero_grad()
            examples.loss_fn(dpcourse.data_parallel(model, x, devices=dpcourse.devices(n)), y).backward()
            examples.sgd_step(model, lr)
        return model

    assert exercises.check("train_on_devices", functional).passed

    def returns_wrapper(model, x, y, n, steps, lr):
        dp = _dp(model, n)
        _steps(lambda m, wrapped, x, k: dp(x))(model, x, y, n, steps, lr)
        return dp

    assert exercises.check("train_on_devices", returns_wrapper).passed


# ---- lesson 09: bytes_per_step, and dicts compared without an order ------------------------------------------

def test_bytes_per_step_accepts_its_keys_in_either_order_m9a() -> None:
    report = exercises.check("bytes_per_step", lambda p, n: {"reduce-add": (n - 1) * p, "replicate": (n - 1) * p})
    assert report.passed, repr(report)


BYTES_PER_STEP_MISTAKES = {
    "M9b: n copies": (lambda p, n: {"reduce-add": n * p, "replicate": n * p}, "answer['replicate']: expected 0"),
    "M9c: a ring all-reduce's volume for reduce-add": (
        lambda p, n: {"reduce-add": int(2 * (n - 1) / n * p), "replicate": (n - 1) * p}, "answer['reduce-add']"),
    "an extra key for the gather": (
        lambda p, n: {"replicate": (n - 1) * p, "reduce-add": (n - 1) * p, "gather": 0}, "expected keys"),
    "the keys spelt with an underscore": (
        lambda p, n: {"replicate": (n - 1) * p, "reduce_add": (n - 1) * p}, "expected keys"),
    "a pair in place of a dict": (lambda p, n: ((n - 1) * p, (n - 1) * p), "got tuple"),
}


@pytest.mark.parametrize("mistake", BYTES_PER_STEP_MISTAKES)
def test_bytes_per_step_rejects_wrong_counts_and_wrong_keys(mistake: str) -> None:
    answer, message = BYTES_PER_STEP_MISTAKES[mistake]
    report = exercises.check("bytes_per_step", answer)
    assert report.status == FAILED and message in repr(report), repr(report)


def test_first_difference_compares_dicts_by_keys_and_values() -> None:
    assert first_difference({"a": 1, "b": 2.0}, {"b": 2.0, "a": 1}) is None
    assert first_difference({"a": 1, "b": 2}, {"b": 3, "a": 1}) == "answer['b']: expected 2, got 3"
    assert first_difference({"a": 1}, {"a": 1, "c": 0}) == "answer: expected keys ['a'], got ['a', 'c']"


# ---- every check: a time limit per case, and nbgrader --------------------------------------------------------

def _spins_on_two_devices(p, n):
    if n == 2:
        while True:  # a learner's loop that never ends, and swallows every Exception on the way
            try:
                p += 1
            except Exception:
                pass
    return {"replicate": (n - 1) * p, "reduce-add": (n - 1) * p}


def test_a_case_that_runs_over_its_time_limit_fails_and_says_which_and_where() -> None:
    exercise = dataclasses.replace(registry.EXERCISES["bytes_per_step"], time_limit=0.5)
    started = time.monotonic()
    report = run(exercise, _spins_on_two_devices)
    assert time.monotonic() - started < 10
    verdicts = [outcome.verdict for outcome in report.outcomes]
    assert verdicts == [PASSED, FAILED, PASSED, PASSED, FAILED], repr(report)  # generated: 1 byte on 2 devices
    detail = report.outcomes[1].detail
    assert detail.startswith("this case ran over its time limit of 0.5 s (line ") and detail.endswith(
        "): a loop that never ends?")
    first = _spins_on_two_devices.__code__.co_firstlineno
    assert any(f"line {first + k} of _spins_on_two_devices" in detail for k in range(2, 7)), detail
    assert "case 2 (1 MB on 2 devices): failed\n      this case ran over its time limit" in repr(report)


def test_the_time_limit_leaves_an_outer_timer_running() -> None:
    import signal

    fired = []

    def outer(*_):
        fired.append(True)

    previous = signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 300)  # due after the check's 60 s: the check sets its own meanwhile
    try:
        assert exercises.check("bytes_per_step", SOLUTIONS["bytes_per_step"]).passed
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 290 < remaining <= 300 and signal.getsignal(signal.SIGALRM) is outer and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_under_nbgrader_a_failed_check_raises_the_whole_report(monkeypatch) -> None:
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError) as raised:
        exercises.check("reduce_add", REDUCE_ADD_MISTAKES["M6a: the mean"][0])
    message = str(raised.value)
    assert message.startswith("reduce_add: 1 of 4 cases passed\n  case 1 (2 replicas, 2 parameters): failed\n")
    assert "answer[0][0, 0]: expected" in message
    assert "hint: the original's gradient is the sum of the replicas' gradients, not their mean" in message
    assert "case 4 (generated: 2 replicas, 1 parameter): failed" in message

    def stub(grads):
        raise NotImplementedError("Your code here: write this, then run the check below.")

    with pytest.raises(AssertionError, match="^reduce_add: not attempted yet. Write reduce_add"):
        exercises.check("reduce_add", stub)


def test_under_nbgrader_a_passing_check_leaves_its_cell_no_result_to_read_as_partial_credit(monkeypatch) -> None:
    """nbgrader 0.9 reads a test cell's execute_result as partial credit and warns when it is not a number; a
    passing report shows itself as display data instead, and the cell scores its points (determine_grade)."""
    from nbformat.v4 import new_code_cell, new_output
    from nbgrader.utils import determine_grade

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    report = exercises.check("bytes_per_step", SOLUTIONS["bytes_per_step"])
    assert report.passed
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    assert DisplayFormatter().format(report) == ({}, {})  # the displayhook sends no execute_result
    assert shown[0]["text/plain"] == repr(report) and "cases passed ✓" in shown[0]["text/html"]

    cell = new_code_cell('exercises.check("bytes_per_step", bytes_per_step)',
                         outputs=[new_output("display_data", data=shown[0])])
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "points": 3, "grade_id": "check"}
    warnings = []
    assert determine_grade(cell, log=type("Log", (), {"warning": warnings.append})) == (3, 3) and not warnings
