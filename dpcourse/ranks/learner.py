"""Run a learner's all-reduce, written in a notebook cell, on real ranks, next to ``dist.all_reduce``.

``run_on_ranks(function, inputs)`` starts ``len(inputs)`` ranks. Rank ``r`` gets a copy of ``inputs[r]`` and

1. all-reduces one copy with ``dist.all_reduce``: the expected answer;
2. calls ``function(tensor)`` on another, counting the bytes it sends and receives and the collectives it
   calls (``traffic.counted``), and fails if it returned with a ``dist.isend`` nobody waited for;
3. returns both tensors and the counts.

The function travels to the ranks as its source (``by_source``), since a rank cannot import a notebook cell.
If it raises in any rank, the others are stopped and ``run_on_ranks`` raises *the learner's exception*,
type and message, not a ``RankError`` with a traceback: the exercise check shows it as one line, which ends
with the rank and the learner's own line (``placed``). Ranks that
wait for each other forever (every rank in a blocking ``send``, say) are stopped after ``TIMEOUT`` seconds.
``launch_keeping_errors`` is that way of failing, for any function that runs a learner's code on ranks
(``training.train_on_ranks`` too).
"""

import pickle
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from .by_source import SourceFunction, own_line
from .launcher import RankError, checked_timeout, device, launch
from .traffic import counted

TIMEOUT = 20.0  # seconds; a right answer on 4 ranks takes well under one


def _learners_function(function: SourceFunction, inputs: list[torch.Tensor], errors: str) -> dict:
    rank = dist.get_rank()
    expected = inputs[rank].to(device(), copy=True)
    dist.all_reduce(expected)
    tensor = inputs[rank].to(device(), copy=True)
    try:
        with counted() as traffic:
            function.rebuild()(tensor)
        if traffic.unwaited:
            raise RuntimeError(_unwaited_message(traffic.unwaited))
    except Exception as error:
        keep_error(error, errors)
        raise
    return {"result": tensor.cpu(), "expected": expected.cpu(), "sent": traffic.sent, "received": traffic.received,
            "collectives": traffic.collectives}


def _unwaited_message(unwaited: int) -> str:
    """Why a rank that returned with sends nobody waited for fails at once. gloo may drop such a send when its
    request is freed, and then the rank meant to receive it waits until the timeout: failing here names the
    cause, on every run, instead of a hang on some runs."""
    return (f"rank {dist.get_rank()} returned with {unwaited} dist.isend request(s) never waited for: until "
            "request.wait() returns, the tensor may not have been sent yet, and changing it (or returning) can "
            "send something else, or nothing. Call .wait() on each request before you reuse the tensor or return")


def placed(error: Exception) -> Exception:
    """The learner's exception, its first line ending with where it was raised: `` (rank 1, line 7 of train: ...)``.

    In the notebook the exception arrives pickled, without its traceback, so the check could not say where the
    learner's code raised (as it does for code run in the kernel, ``exercises.check._own_line``); this says it in
    the message, which travels. Only a rank's own frames know the line: call it in the rank. Nothing is added
    where no learner code sent by source raised (the library's own checks name their cause), or twice, or to
    an exception whose message is not its argument's text (``KeyError``'s is its repr).
    """
    line = own_line(error)
    where = f" (rank {dist.get_rank()}, {line})"
    message = str(error)
    if not line or where in message:
        return error
    first, newline, rest = message.partition("\n")
    placed_message, args = (first + where).lstrip() + newline + rest, error.args
    error.args = (placed_message,)
    if str(error) != placed_message:  # KeyError's message is its argument's repr, ImportError's its own
        error.args = args
    return error


def keep_error(error: Exception, errors: str) -> None:
    """In a rank: save the learner's exception in the folder ``errors``, for ``kept_error`` in the notebook, with
    the rank and the learner's line in its message (``placed``)."""
    placed(error)
    try:
        note = pickle.dumps(error)
        pickle.loads(note)  # an exception class of the learner's own may not be rebuilt from its one message
    except Exception:  # or not pickled at all
        note = pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))
    Path(errors, f"rank-{dist.get_rank()}.pickle").write_bytes(note)


def kept_error(failure: RankError, errors: str) -> Exception | None:
    """In the notebook: the exception the failed rank saved with ``keep_error``, or ``None`` if it saved none."""
    note = Path(errors, f"rank-{failure.rank}.pickle")
    return pickle.loads(note.read_bytes()) if note.exists() else None


def _died(failure: RankError) -> RankError:
    """Why a rank stopped without raising, in the learner's terms, where the launcher's words are not enough."""
    if "SIGABRT" in str(failure):
        return RankError(f"rank {failure.rank} was aborted inside torch.distributed. gloo aborts a rank whose recv "
                         "gets a message of another size than its tensor: does every rank receive into a piece of "
                         "the size its neighbour sends?", failure.rank, failure.pids)
    return failure


def launch_keeping_errors(worker, world_size: int, args: tuple, timeout: float | None) -> list:
    """``launch(worker, world_size, (*args, errors), timeout=timeout)``, where ``worker`` saves a learner's exception
    with ``keep_error(error, errors)``: that exception is raised here, as the learner wrote it; any other failure
    as the launcher's ``RankError``, which names the rank, how it ended, and its traceback."""
    with tempfile.TemporaryDirectory(prefix="dpcourse-learner-") as errors:
        try:
            return launch(worker, world_size, (*args, errors), timeout=timeout)
        except RankError as failure:
            raise (kept_error(failure, errors) or _died(failure)) from None


def run_on_ranks(function, inputs: list[torch.Tensor], timeout: float | None = TIMEOUT) -> list[dict]:
    """Call ``function(tensor)`` on ``len(inputs)`` ranks; per rank its ``result``, the ``expected`` all-reduce,
    the bytes it ``sent`` and ``received`` point to point, and the ``collectives`` it called.

    Raises the learner's own exception if ``function`` raised in a rank, ``TypeError`` if its source cannot be
    found, and ``TimeoutError`` if the ranks are still running after ``timeout`` seconds (``None``: no limit).
    """
    timeout = checked_timeout(timeout)
    shipped = SourceFunction.of(function)
    try:
        return launch_keeping_errors(_learners_function, len(inputs), (shipped, list(inputs)), timeout)
    except TimeoutError as error:
        raise TimeoutError(f"{error} A blocking dist.send on every rank at once never returns: start sends "
                           "with dist.isend.") from None
