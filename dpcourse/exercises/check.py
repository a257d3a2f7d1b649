"""Run a learner's function against an oracle on several cases, and say per case what passed and what did not.

    report = exercises.check("chunk_sizes", chunk_sizes)

A check never raises and never shows a traceback: a case that raises is a failed case, with the exception's
type, its first line and the learner's own line that raised it; a case that runs over its time limit (a loop
that never ends) is a failed case too. (Under nbgrader's autograder a check that did not pass raises, so that
its cell scores 0: see ``_graded``.) If the learner has not written the function yet (it still raises the
stub's ``NotImplementedError``), the report says "not attempted yet" and nothing fails, so "Run All" on an
untouched student notebook completes.
"""

import contextlib
import copy
import dataclasses
import html
import math
import os
import signal
import site
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..trace import trace
from ..ui.words import plural

NOT_ATTEMPTED, PASSED, FAILED = "not attempted yet", "passed", "failed"


@dataclasses.dataclass
class Case:
    """One call of the learner's function: ``function(*args)``, described in words, with a hint for a failure.

    ``context`` holds what the judge needs besides the arguments: a reference model, a record of threads, or an
    answer worked out when the case was made, for a judge that cannot compute it later (the learner's function
    may change the arguments, e.g. train the model it is given).
    """

    description: str
    args: tuple
    hint: str = ""
    context: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Exercise:
    """What the learner writes (``task``), the cases to try, and how to judge an answer.

    ``judge(case, answer)`` returns ``None`` for a right answer, else a sentence naming the first thing that
    differs. ``cases`` is a function, so that every check starts from fresh tensors. ``call(function, case)``
    says how to call the learner's function when ``function(*case.args)`` is not enough (in a thread, under
    a grad mode, once per chunk); its result is the answer the judge sees. ``generated`` makes more cases (an
    exhaustive grid, or hypothesis with a fixed seed) that a plausible wrong answer cannot pass by luck. ``slow``
    says what a check that takes seconds is doing and how long it may take: printed before each case starts.
    ``time_limit`` is how many seconds one case (the learner's call and its judging) may take before it fails
    as "ran over its time limit": the default is three times the slowest right answer on ranks (about 20 s).
    """

    name: str
    task: str
    cases: Callable[[], list[Case]]
    judge: Callable[[Case, Any], str | None]
    call: Callable[[Callable, Case], Any] | None = None
    generated: Callable[[], list[Case]] | None = None
    slow: str = ""
    time_limit: float = 60.0


@dataclasses.dataclass
class CaseResult:
    """How one case went: ``verdict`` PASSED or FAILED, and ``detail``, the first difference or the error."""

    case: Case
    verdict: str  # PASSED or FAILED
    detail: str = ""


@dataclasses.dataclass
class Report:
    """The result of one check: ``status`` is "passed", "failed" or "not attempted yet"."""

    exercise: Exercise
    outcomes: list[CaseResult]
    status: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __repr__(self) -> str:
        lines = [f"{self.exercise.name}: {self._headline()}"]
        for i, outcome in enumerate(self.outcomes, start=1):
            lines.append(f"  case {i} ({outcome.case.description}): {outcome.verdict}")
            if outcome.verdict == FAILED:
                lines.append(f"      {outcome.detail}")
                if outcome.case.hint:
                    lines.append(f"      hint: {outcome.case.hint}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = {PASSED: "#1a7f37", FAILED: "#C00000", NOT_ATTEMPTED: "#6e7781"}[self.status]
        rows = "".join(_html_row(i, o) for i, o in enumerate(self.outcomes, start=1))
        header = "<tr><th>case</th><th>what</th><th>result</th><th>details</th></tr>"
        table = f"<table>{header}{rows}</table>" if rows else ""
        title = html.escape(f"{self.exercise.name}: {self._headline()}")
        return f'<div><b style="color: {colour}">{title}</b>{table}</div>'

    def _headline(self) -> str:
        if self.status == NOT_ATTEMPTED:
            return f"not attempted yet. {self.exercise.task}"
        passed = sum(o.verdict == PASSED for o in self.outcomes)
        return f"{passed} of {plural(len(self.outcomes), 'case')} passed" + (" ✓" if self.status == PASSED else "")


class GradedReport(Report):
    """What a passing check returns under nbgrader: it shows itself as display data and leaves the cell no
    result.

    nbgrader 0.9's autograder (``nbgrader.utils.determine_grade``) reads a test cell's result as partial credit:
    a number from 0 to the cell's points, and it logs a warning for anything else, such as a report. A cell
    with no result and no error gets all its points, whatever points the instructor gave it; a number could not
    know them. The learner still sees the same table in the feedback.
    """

    def _ipython_display_(self) -> None:
        from IPython.display import display  # IPython is there whenever this is called: it calls it

        display({"text/html": self._repr_html_(), "text/plain": repr(self)}, raw=True)


def _html_row(number: int, outcome: CaseResult) -> str:
    details = html.escape(outcome.detail)
    if outcome.detail and outcome.case.hint:
        details += f"<br><i>hint: {html.escape(outcome.case.hint)}</i>"
    return (f"<tr><td>{number}</td><td>{html.escape(outcome.case.description)}</td>"
            f"<td>{outcome.verdict}</td><td>{details}</td></tr>")


def run(exercise: Exercise, function: Callable) -> Report:
    """Call ``function`` on every case of ``exercise`` and judge each answer; then on the generated cases, if the
    exercise has some, which add one line to the report: the first that failed, or how many passed."""
    try:
        cases = exercise.cases()
        outcomes = []
        for number, case in enumerate(cases, start=1):
            if exercise.slow:
                print(f"case {number} of {len(cases)} ({case.description}): {exercise.slow}", flush=True)
            outcomes.append(_judged(exercise, function, case))
        if exercise.generated:
            outcomes.append(_generated(exercise, function))
    except NotImplementedError:
        return _graded(Report(exercise, [], NOT_ATTEMPTED))
    status = PASSED if all(o.verdict == PASSED for o in outcomes) else FAILED
    return _graded(Report(exercise, outcomes, status))


def _judged(exercise: Exercise, function: Callable, case: Case) -> CaseResult:
    """One case: the learner's answer judged, or the exception it raised (``NotImplementedError`` goes through),
    or the line where it was stopped at the time limit."""
    if isinstance(exercise.judge, Oracle):
        exercise.judge.expect(case)
    try:
        with _time_limit(exercise.time_limit):
            return _answered(exercise, function, case)
    except OverTime as over:
        return CaseResult(case, FAILED, f"this case ran over its time limit of {exercise.time_limit:g} s"
                                        f"{_own_line(over)}: a loop that never ends?")


def _answered(exercise: Exercise, function: Callable, case: Case) -> CaseResult:
    try:
        answer = exercise.call(function, case) if exercise.call else function(*case.args)
    except NotImplementedError:
        raise
    except Exception as error:  # a learner's bug is a failed case, shown as two lines, never a traceback
        first_line = str(error).splitlines()[0] if str(error) else ""
        return CaseResult(case, FAILED, f"raised {type(error).__name__}: {first_line}{_own_line(error)}")
    try:
        difference = exercise.judge(case, answer)
    except Exception as error:
        difference = f"the answer could not be checked ({type(error).__name__}: {error})"
    return CaseResult(case, FAILED, difference) if difference else CaseResult(case, PASSED)


def _generated(exercise: Exercise, function: Callable) -> CaseResult:
    cases = exercise.generated()
    for case in cases:
        outcome = _judged(exercise, function, case)
        if outcome.verdict == FAILED:
            return CaseResult(dataclasses.replace(case, description=f"generated: {case.description}"), FAILED,
                           outcome.detail)
    return CaseResult(Case(plural(len(cases), "generated case"), ()), PASSED)


class OverTime(BaseException):
    """Raised in the learner's code when a case runs over its time limit. A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that a learner's ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise ``OverTime`` in the main thread after ``seconds``, wherever it is then (a learner's ``while`` loop, a
    ``join`` on a thread or on ranks: each lets a Python signal handler run).

    A notebook cell runs in the kernel's main thread, where ``SIGALRM`` works; in another thread, or with no
    ``SIGALRM`` (Windows), the case runs with no limit. A timer already running (pytest-timeout's, say) is
    left to fire first if it is due sooner, and is set going again afterwards.
    """
    main = threading.current_thread() is threading.main_thread()
    outer = signal.getitimer(signal.ITIMER_REAL)[0] if main and hasattr(signal, "setitimer") else 0.0
    if not main or not hasattr(signal, "setitimer") or 0 < outer <= seconds:
        yield
        return

    def over(signum: int, frame: Any) -> None:
        raise OverTime

    previous = signal.signal(signal.SIGALRM, over)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


def _graded(report: Report) -> Report:
    """Under nbgrader (``nbgrader autograde`` or ``validate`` set ``NBGRADER_EXECUTION``), a check that did not
    pass raises, with the whole report (each case, its first difference and hint) as the message, so that the
    check cell, an autograded test cell, scores 0 and the feedback says why; a check that passed leaves the
    cell no result to misread (``GradedReport``). In a lesson it never raises."""
    if not os.environ.get("NBGRADER_EXECUTION"):
        return report
    if not report.passed:
        raise AssertionError(repr(report))
    return GradedReport(report.exercise, report.outcomes, report.status)


def _own_line(error: BaseException) -> str:
    """Where the learner's own code raised: `` (line 3 of chunk_sizes: return batch // n)``, from the last frame
    of the traceback that is neither dpcourse's nor an installed package's (a notebook cell is neither)."""
    library = (str(Path(__file__).resolve().parents[1]), *site.getsitepackages(), sysconfig.get_paths()["stdlib"])
    own = [frame for frame in traceback.extract_tb(error.__traceback__)
           if not str(Path(frame.filename).resolve()).startswith(library)]
    if not own or not own[-1].line:
        return ""
    frame = own[-1]
    return f" (line {frame.lineno} of {frame.name}: {frame.line.strip()})"


def first_difference(expected: Any, got: Any, where: str = "answer", atol: float = 1e-6) -> str | None:
    """``None`` if ``got`` equals ``expected`` (tensors within ``atol``), else where and how they first differ."""
    if isinstance(expected, torch.Tensor):
        return _tensor_difference(expected, got, where, atol)
    if isinstance(expected, dict):  # compared by keys and values: no task asks for an order of keys
        if not isinstance(got, dict) or set(got) != set(expected):
            found = list(got) if isinstance(got, dict) else type(got).__name__
            return f"{where}: expected keys {list(expected)}, got {found}"
        differences = (first_difference(expected[k], got[k], f"{where}[{k!r}]", atol) for k in expected)
        return next((d for d in differences if d), None)
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            found = plural(len(got), "item") if isinstance(got, (list, tuple)) else type(got).__name__
            return f"{where}: expected {plural(len(expected), 'item')}, got {found}"
        pairs = enumerate(zip(expected, got, strict=True))
        differences = (first_difference(e, g, f"{where}[{i}]", atol) for i, (e, g) in pairs)
        return next((d for d in differences if d), None)
    if isinstance(expected, float) and isinstance(got, (int, float)):
        if math.isclose(expected, got, abs_tol=atol, rel_tol=1e-6):
            return None
        return f"{where}: expected {expected:.6g}, got {got:.6g}"
    return None if got == expected else f"{where}: expected {expected!r}, got {got!r}"


def _tensor_difference(expected: torch.Tensor, got: Any, where: str, atol: float) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"{where}: expected a tensor, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"{where}: expected shape {list(expected.shape)}, got {list(got.shape)}"
    if got.device != expected.device:
        return f"{where}: expected it on {expected.device}, got {got.device}"
    if got.dtype != expected.dtype:
        return f"{where}: expected dtype {expected.dtype}, got {got.dtype}"
    close = torch.isclose(got.double(), expected.double(), atol=atol, rtol=1e-5)
    if bool(close.all()):
        return None
    index = tuple(int(i) for i in (~close).nonzero()[0])
    at = ", ".join(map(str, index))
    return f"{where}[{at}]: expected {expected[index].item():.6g}, got {got[index].item():.6g}"


class Oracle:
    """A judge that compares the answer with ``oracle(*case.args)`` (see ``first_difference``).

    The expected answer is worked out before the learner's function runs (``run`` calls ``expect``), on the
    oracle's own copies of the arguments: a learner's function may change its arguments in place (sum into
    replica 0's gradients and return them), and the oracle must not then compute from the changed ones.

    ``compare(case, answer)`` judges where equal values are not the whole story (which replicas ran, say); it
    finds the expected answer in ``case.context["expected"]``.
    """

    def __init__(self, oracle: Callable, compare: Callable[[Case, Any], str | None] | None = None) -> None:
        self.oracle = oracle
        self.compare = compare

    def expect(self, case: Case) -> None:
        case.context["expected"] = self.oracle(*copy.deepcopy(case.args))

    def __call__(self, case: Case, answer: Any) -> str | None:
        if self.compare:
            return self.compare(case, answer)
        return first_difference(case.context["expected"], answer)


def equals(oracle: Callable) -> Oracle:
    """A judge that compares the answer with ``oracle(*case.args)``, computed beforehand on copies (``Oracle``)."""
    return Oracle(oracle)


def with_replica_forwards(function: Callable, case: Case) -> tuple[Any, int]:
    """An ``Exercise.call`` for a task that must run DataParallel: the answer, and how many replica forwards ran.

    A judge then knows whether the learner's numbers came from the replicas or from a shortcut (the model called
    once on the whole batch gives the same numbers, and teaches nothing). The call runs under a trace
    (``dpcourse.trace``), which counts a ``forward`` span per replica.
    """
    with trace() as recorded:
        answer = function(*case.args)
    return answer, len(recorded.steps("forward"))


def replicas_that_should_run(rows: int, n: int, forwards: int, calls: int = 1) -> str | None:
    """``None`` if ``forwards`` replica forwards is what ``calls`` DataParallel forwards of ``rows`` rows on ``n``
    devices run (one per chunk), else a sentence saying what ran instead. ``n`` is 2 or more: on one device
    DataParallel calls the model itself, and a trace records no replica forward."""
    expected = calls * len(torch.arange(rows).chunk(n))
    if forwards == expected:
        return None
    return (f"{plural(forwards, 'replica forward')} ran, expected {expected}: run the model through "
            f"dpcourse.DataParallel on dpcourse.devices({n}), which runs one replica per chunk of the batch")
