"""Lesson 24's checks watch what each rank holds after resume, not only the final weights.

The plausible mistakes with snapshot and resume, each on real ranks with rank 1 killed, must fail with a message
that names what is wrong: Adam's state forgotten, a generator forgotten, rank 0's generators given to every rank,
the epoch restarted from its first batch, a resume that finds nothing and trains from step 0 (the right weights,
by training everything again), a position one batch too far. ``resume_point``'s plausible slips fail too.
"""

import ast
import linecache
import os
import random
from pathlib import Path

import jupytext
import pytest
import torch
import torch.distributed as dist

from dpcourse import exercises
from dpcourse.exercises.check import FAILED, PASSED
from tests.capstone_pieces import NOTEBOOKS, without_solutions

pytestmark = pytest.mark.lesson24


def _snapshot(directory, model, optimizer, epoch, done):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "python_rng": random.getstate(), "position": (epoch, done)}
    path = Path(directory) / f"rank-{dist.get_rank()}.pt"
    torch.save(state, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)


def _resume(directory, model, optimizer, parts=("model", "optimizer", "torch_rng", "python_rng"), rank=None):
    path = Path(directory) / f"rank-{dist.get_rank() if rank is None else rank}.pt"
    if not path.exists():
        return None
    state = torch.load(path)
    if "model" in parts:
        model.load_state_dict(state["model"])
    if "optimizer" in parts:
        optimizer.load_state_dict(state["optimizer"])
    if "torch_rng" in parts:
        torch.set_rng_state(state["torch_rng"])
    if "python_rng" in parts:
        random.setstate(state["python_rng"])
    return state["position"]


def resume_without_adam(directory, model, optimizer):
    return _resume(directory, model, optimizer, ("model", "torch_rng", "python_rng"))


def resume_without_torch_rng(directory, model, optimizer):
    return _resume(directory, model, optimizer, ("model", "optimizer", "python_rng"))


def resume_without_python_rng(directory, model, optimizer):
    return _resume(directory, model, optimizer, ("model", "optimizer", "torch_rng"))


def resume_from_rank_0s_file(directory, model, optimizer):
    return _resume(directory, model, optimizer, rank=0)


def resume_at_the_epochs_start(directory, model, optimizer):
    position = _resume(directory, model, optimizer)
    return None if position is None else (position[0], 0)


def resume_that_finds_nothing(directory, model, optimizer):
    return None


def snapshot_one_batch_ahead(directory, model, optimizer, epoch, done):
    _snapshot(directory, model, optimizer, epoch, done + 1)


PAIR_MISTAKES = {
    "Adam's state forgotten": ((_snapshot, resume_without_adam), "Adam state"),
    "torch's generator forgotten": ((_snapshot, resume_without_torch_rng), "torch generator"),
    "Python's generator forgotten": ((_snapshot, resume_without_python_rng), "Python generator"),
    "rank 0's generators for every rank": ((_snapshot, resume_from_rank_0s_file), "rank 1's torch generator"),
    "the epoch restarted from its start": ((_snapshot, resume_at_the_epochs_start), "start of epoch 1"),
    "no snapshot found, trained from step 0": ((_snapshot, resume_that_finds_nothing), "returned None"),
    "the position one batch too far": ((snapshot_one_batch_ahead, _resume), "after 3 of its batches"),
}


def test_the_right_pair_passes():
    report = exercises.check("snapshot_and_resume", (_snapshot, _resume))
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize("mistake", PAIR_MISTAKES)
def test_a_mistaken_snapshot_or_resume_fails_and_says_why(mistake):
    functions, words = PAIR_MISTAKES[mistake]
    report = exercises.check("snapshot_and_resume", functions)
    assert report.status == FAILED, repr(report)
    assert words in report.outcomes[0].detail, report.outcomes[0].detail
    assert "Traceback" not in repr(report)


def test_a_learners_exception_in_a_rank_is_shown_as_theirs():
    def resume(directory, model, optimizer):
        raise KeyError("no such snapshot")

    report = exercises.check("snapshot_and_resume", (_snapshot, resume))
    assert report.status == FAILED
    assert "KeyError" in report.outcomes[0].detail


def test_one_function_instead_of_the_pair_is_refused_with_a_sentence():
    report = exercises.check("snapshot_and_resume", _snapshot)
    assert "the pair (snapshot, resume)" in report.outcomes[0].detail


POINTS = {
    "the killed step counted as finished": lambda k, e, s: (*divmod(k // e * e, s), k - k // e * e),
    "the lost steps counting the killed one": lambda k, e, s: (*divmod((k - 1) // e * e, s), k - (k - 1) // e * e),
    "epochs counted from 1": lambda k, e, s: ((k - 1) // e * e // s + 1, (k - 1) // e * e % s,
                                              k - 1 - (k - 1) // e * e),
}


@pytest.mark.parametrize("mistake", POINTS)
def test_a_mistaken_resume_point_fails(mistake):
    assert exercises.check("resume_point", POINTS[mistake]).status == FAILED


# The planted mistakes, by exercise (tests/test_exercises.py counts them).
MISTAKES = {"snapshot_and_resume": list(PAIR_MISTAKES), "resume_point": list(POINTS)}


# The capstone's Part IV: the same judge, on the capstone's own solution cell.
def capstone_pair(student: bool = False) -> tuple:
    """The capstone's (snapshot, resume), with the lesson's imports, kept where inspect.getsource finds them (the
    ranks get them as source); with ``student``, the student edition's stubs."""
    cells = [cell.source for cell in jupytext.read(NOTEBOOKS / "src" / "12_capstone.py").cells
             if cell.cell_type == "code"]
    cell = next(cell for cell in cells if "def snapshot(" in cell)
    imports = "\n".join(ast.unparse(node) for cell in cells for node in ast.parse(cell).body
                        if isinstance(node, ast.Import | ast.ImportFrom))
    code, filename = imports + "\n" + (without_solutions(cell) if student else cell), "<12_capstone: snapshot>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(code, filename, "exec"), namespace)
    return namespace["snapshot"], namespace["resume"]


def test_the_capstones_snapshot_and_resume_pass():
    report = exercises.check("capstone_resume", capstone_pair())
    assert report.status == PASSED, repr(report)


def test_the_capstones_stubs_are_not_attempted_yet():
    report = exercises.check("capstone_resume", capstone_pair(student=True))
    assert report.status == "not attempted yet", repr(report)


@pytest.mark.parametrize("mistake", ["Adam's state forgotten", "rank 0's generators for every rank",
                                     "the epoch restarted from its start"])
def test_a_mistake_fails_the_capstone_too(mistake):
    functions, words = PAIR_MISTAKES[mistake]
    report = exercises.check("capstone_resume", functions)
    assert report.status == FAILED and words in report.outcomes[0].detail, repr(report)
