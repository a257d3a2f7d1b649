"""Lesson 18, ZeRO-1: the shared runner (``ranks``), the teaching implementation (``sharded.zero1``) on
2, 3 and 4 real ranks against one-device Adam, the quiz's experiments in planted worlds, the exercises' planted
mistakes, and the shard figure's layout."""

import ast
import functools
import linecache
import math
import re
import runpy
from pathlib import Path

import jupytext
import pytest
import torch

from dpcourse import exercises, ranks
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.quiz import run_experiment
from dpcourse.quiz.bank import load_lesson
from dpcourse.sharded import zero1, zero1_wire
from dpcourse.viz.shards import shard_layout
from tests import zero1_programs as programs
from tests.figure_checks import problems

pytestmark = pytest.mark.lesson18

QUESTIONS = {question.id: question for question in load_lesson("18_zero1")}
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = NOTEBOOKS / "src"
without_solutions = runpy.run_path(str(NOTEBOOKS / "build.py"))["without_solutions"]
EXPECTED = ranks.one_device()


# The runner and the teaching implementation, on real ranks.

@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ddp_and_three_zero1s_train_as_one_device_adam_and_the_zero1s_keep_a_shard_of_the_state(world_size):
    results = ranks.train_on_ranks(zero1_wire.every_program, world_size)
    assert ranks.first_difference(results, EXPECTED) is None
    for name in zero1_wire.PROGRAMS:
        assert ranks.first_difference([result["runs"][name] for result in results], EXPECTED) is None, name
    numel = ranks.parameter_count()
    runs = [result["runs"] for result in results]
    for name in ("ZeRO-1, all-reduce", "ZeRO-1, reduce-scatter"):
        assert [run[name]["state_bytes"] for run in runs] == [
            zero1.adam_state_bytes(numel, rank, world_size) for rank in range(world_size)]
    assert {run["DDP"]["state_bytes"] for run in runs} == {zero1.one_device_state_bytes()}
    # torch's optimizer owns whole parameters (lesson 21): every rank less than DDP's state, together all of it
    owned = [run["ZeroRedundancyOptimizer"]["state_bytes"] for run in runs]
    assert max(owned) < zero1.one_device_state_bytes() and sum(owned) - 4 * 6 == 8 * numel
    padded = math.ceil(numel / world_size) * world_size * 4
    assert [run["calls"] for run in runs[0].values()] == [
        {"all_reduce": (1, numel * 4)},
        {"all_reduce": (1, numel * 4), "all_gather": (1, padded)},
        {"reduce_scatter": (1, padded), "all_gather": (1, padded)},
        {"all_reduce": (1, numel * 4), "broadcast": (6, numel * 4)},
    ]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_as_rings_the_papers_zero1_sends_ddps_bytes_and_the_other_two_half_as_many_again(world_size):
    def share(name):  # of DDP's bytes, every rank a ring, from the sizes the course model's run records
        numel, padded = ranks.parameter_count() * 4, math.ceil(ranks.parameter_count() / world_size) * world_size * 4
        calls = {"DDP": {"all_reduce": (1, numel)}, "AR": {"all_reduce": (1, numel), "all_gather": (1, padded)},
                 "RS": {"reduce_scatter": (1, padded), "all_gather": (1, padded)},
                 "ZRO": {"all_reduce": (1, numel), "broadcast": (6, numel)}}
        return zero1_wire.ring_bytes(calls[name], world_size) / zero1_wire.ring_bytes(calls["DDP"], world_size)

    assert 1 < share("RS") < 1.01
    assert abs(share("AR") - 1.5) < 0.01 and share("ZRO") == 1.5


def test_ring_bytes_and_per_step_refuse_what_they_cannot_count():
    with pytest.raises(ValueError, match=r"ring_bytes knows .*, not \['all_to_all'\]"):
        zero1_wire.ring_bytes({"all_to_all": (1, 8)}, 2)
    with pytest.raises(ValueError, match="did not all call the same collectives"):
        zero1_wire.per_step([("all_reduce", 8), ("all_reduce", 8), ("broadcast", 4)], 2)


def test_the_course_model_cannot_be_split_evenly_over_2_3_or_4_ranks():
    assert [ranks.parameter_count() % n for n in (2, 3, 4)] == [1, 1, 3]


def test_adam_keeps_a_step_counter_for_an_empty_shard_as_adam_state_bytes_says():
    from dpcourse.memory.accounting import state_tensors, storage_bytes

    empty = torch.zeros(0, requires_grad=True)
    optimizer = torch.optim.Adam([empty])
    empty.grad = torch.zeros(0)
    optimizer.step()
    assert storage_bytes(state_tensors(optimizer)) == 4 == zero1.adam_state_bytes(2, 3, 4)


def test_a_collective_that_calls_another_inside_torch_is_recorded_once():
    results = ranks.train_on_ranks(programs.gathers_into_one_tensor, 2)
    assert results[0]["collectives"] == [("all_gather_into_tensor", 16)]


def test_the_programs_own_exception_comes_back_and_a_partial_answer_is_named():
    with pytest.raises(ValueError, match="my own mistake"):
        ranks.train_on_ranks(programs.raises, 2)
    with pytest.raises(ValueError, match=r"parameter 0 .* \(1, 8\), not a tensor of the model's shape \(15, 8\)"):
        ranks.train_on_ranks(programs.returns_shards, 2)


def test_ranks_that_wait_for_each_other_are_stopped_with_advice():
    with pytest.raises(TimeoutError, match="same collectives in the same order"):
        ranks.train_on_ranks(programs.only_rank_0_reduces, 2, timeout=5)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"world_size": 0}, "whole number >= 1"),
    ({"world_size": 5}, "samples=24 per step cannot be split evenly over 5 ranks"),
])
def test_bad_arguments_are_refused_before_any_rank_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ranks.train_on_ranks(zero1.zero1_program, **kwargs)


def test_first_difference_names_the_rank_and_the_parameter():
    moved = [t.clone() for t in EXPECTED]
    moved[3] += 1e-3
    message = ranks.first_difference([{"parameters": EXPECTED}, {"parameters": moved}], EXPECTED)
    assert message.startswith("rank 1's 2.bias (15,) differs from one-device Adam by up to 0.001")


# The quiz: each experiment measures the keyed answer here, and the distractor in a planted world.

@pytest.mark.parametrize("question_id", QUESTIONS)
def test_the_experiment_measures_the_keyed_answer(question_id):
    question = QUESTIONS[question_id]
    assert run_experiment(question.experiment).value == question.answer


def test_the_prompts_numbers_are_the_course_models():
    numel = ranks.parameter_count()
    sizes = [b - a for a, b in (zero1.shard_range(numel, rank, 4) for rank in range(4))]
    prompt = QUESTIONS["18-unpadded-all-gather"].prompt
    assert f"{numel} parameters" in prompt and "{}, {}, {} and {}".format(*sizes) in " ".join(prompt.split())


def test_a_ddp_that_sharded_the_state_would_be_measured_as_a_quarter(monkeypatch):
    monkeypatch.setattr(zero1, "ddp_program", zero1.zero1_program)
    assert run_experiment("ddp_state_per_rank").value == "A quarter on each rank: DDP splits the optimizer state"


def test_a_ddp_that_stepped_on_rank_0_only_would_be_measured_so(monkeypatch):
    monkeypatch.setattr(zero1, "ddp_program", programs.rank_0_steps_and_broadcasts)
    value = run_experiment("ddp_state_per_rank").value
    assert value == "All of it on rank 0, none on the others: only rank 0 steps"


def test_a_backend_that_gathered_uneven_pieces_would_be_measured_as_working(monkeypatch):
    def gathers(world_size=4):
        sizes = [110, 110, 110, 109]
        return [{"sizes": sizes, "error": None, "gathered": torch.zeros(sum(sizes))} for _ in range(world_size)]

    monkeypatch.setattr(zero1, "uneven_all_gather", gathers)
    value = run_experiment("unpadded_all_gather").value
    assert value == "It works: each rank receives pieces of the sizes it asked for"


def test_a_backend_that_hung_on_uneven_pieces_would_be_measured_as_waiting(monkeypatch):
    def hangs(world_size=4):
        raise TimeoutError("DDP ranks [0, 1, 2, 3] were still running after 20 s; all ranks were stopped.")

    monkeypatch.setattr(zero1, "uneven_all_gather", hangs)
    assert run_experiment("unpadded_all_gather").value == "The ranks wait for each other until the timeout"


def test_an_optimizer_whose_step_follows_the_gradients_size_would_be_measured_as_too_far(monkeypatch):
    monkeypatch.setattr(zero1, "zero1_program", programs.sgd_sharded)
    assert run_experiment("sum_instead_of_mean").value == "About 4 times too far: each step is as large as 4 steps"


# The exercises: the lesson's solutions pass; planted mistakes fail, each with a message that says why.

def _solutions(source: Path, student: bool = False) -> dict:
    """The solution functions of a lesson source, run with the lesson's imports and kept where inspect.getsource
    finds them (a rank gets a training program as its source); with ``student``, the student edition's stubs."""
    cells = [cell.source for cell in jupytext.read(source).cells if cell.cell_type == "code"]
    imports = "\n".join(ast.unparse(node) for cell in cells for node in ast.parse(cell).body
                        if isinstance(node, ast.Import | ast.ImportFrom))
    solutions = {}
    for cell in cells:
        if "### BEGIN SOLUTION" in cell and (function := re.search(r"^def (\w+)\(", cell, re.M)):
            name = function.group(1)
            code, filename = imports + "\n" + (without_solutions(cell) if student else cell), f"<{source.stem}: {name}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            namespace: dict = {}
            exec(compile(code, filename, "exec"), namespace)
            solutions[name] = namespace[name]
    return solutions


def _floor_rest_on_last(numel, rank, world_size):
    size = numel // world_size
    return rank * size, numel if rank == world_size - 1 else (rank + 1) * size


def _array_split_rule(numel, rank, world_size):
    size, extra = divmod(numel, world_size)
    start = rank * size + min(rank, extra)
    return start, start + size + (rank < extra)


def _unclamped(numel, rank, world_size):
    size = math.ceil(numel / world_size)
    return rank * size, (rank + 1) * size


def _stop_clamped_only(numel, rank, world_size):
    size = math.ceil(numel / world_size)
    return rank * size, min((rank + 1) * size, numel)


def _size_of(numel, rank, world_size):
    start, stop = zero1.shard_range(numel, rank, world_size)
    return stop - start


def _taking_optimizer_class(program):
    """``program(model, batches, lr)``, which builds ``torch.optim.Adam``, as the exercise's ``zero1_training(model,
    batches, lr, optimizer_class)``: in the rank, ``torch.optim.Adam`` names the class the check passes (it runs
    each answer under Adam and under SGD). ``program`` travels pickled: a module's function, or a partial of one."""
    def zero1_training(model, batches, lr, optimizer_class):
        adam, torch.optim.Adam = torch.optim.Adam, optimizer_class
        try:
            return program(model, batches, lr)
        finally:
            torch.optim.Adam = adam

    return zero1_training


DIFFERS = "differs from one-device"  # Adam or SGD
MISTAKES = {
    "shard_range": {
        "floor division, the rest on the last rank": (_floor_rest_on_last, "every shard holds ceil("),
        "numpy's array_split rule (sizes differ by at most 1)": (_array_split_rule, "every shard holds ceil("),
        "nothing clamped: shards run past the vector": (_unclamped, "every shard holds ceil("),
        "only the stop clamped: an empty shard starts past the end": (_stop_clamped_only, "starts after it stops"),
    },
    "adam_state_bytes": {
        "the step counter forgotten": (lambda numel, rank, n: 8 * _size_of(numel, rank, n), "step counter"),
        "one average, like momentum": (lambda numel, rank, n: 4 * _size_of(numel, rank, n) + 4, "exp_avg_sq"),
        "every rank a full ceil-sized shard": (lambda numel, rank, n: 8 * math.ceil(numel / n) + 4, "expected"),
        "DDP's state, the whole vector on every rank": (lambda numel, rank, n: 8 * numel + 4, "expected"),
    },
    "zero1_training": {
        "Adam over every parameter on every rank, as DDP": (_taking_optimizer_class(programs.ddp_training),
                                                             "Give its Adam only"),
        "no all-gather: the other shards never arrive": (
            _taking_optimizer_class(functools.partial(programs.zero1, all_gather=False)), DIFFERS),
        "no all-reduce: each rank steps with its own gradient": (
            _taking_optimizer_class(functools.partial(programs.zero1, all_reduce=False)), DIFFERS),
        "array_split shards gathered as ceil-sized ones": (
            _taking_optimizer_class(functools.partial(programs.zero1, split="array_split")), DIFFERS),
    },
}


@pytest.mark.parametrize("name", MISTAKES)
def test_the_lessons_solution_passes(name):
    report = exercises.check(name, _solutions(SOURCES / "18_zero1.py")[name])
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message_that_says_why(name, mistake):
    function, says = MISTAKES[name][mistake]
    report = exercises.check(name, function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert any(says in detail for detail in failed), failed


# The capstone's Part III: ZeRO-1 from nothing, on a model lesson 18 did not use.

def test_the_capstones_zero1_solution_passes_and_its_stub_is_not_attempted_yet():
    report = exercises.check("capstone_zero1", _solutions(SOURCES / "12_capstone.py")["zero1"])
    assert report.status == PASSED, repr(report)
    stub = _solutions(SOURCES / "12_capstone.py", student=True)["zero1"]
    assert exercises.check("capstone_zero1", stub).status == "not attempted yet"


@pytest.mark.parametrize("mistake", [m for m in MISTAKES["zero1_training"] if "gather" in m or "DDP" in m])
def test_the_capstones_zero1_rejects_the_lessons_planted_mistakes(mistake):
    function, says = MISTAKES["zero1_training"][mistake]
    report = exercises.check("capstone_zero1", function)
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert report.status == FAILED and any(says in detail for detail in failed), repr(report)


# The figure.

@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_the_shard_figure_has_no_overlapping_text(world_size):
    model = torch.nn.Sequential(torch.nn.Linear(8, 15), torch.nn.ReLU(), torch.nn.Linear(15, 15),
                                torch.nn.ReLU(), torch.nn.Linear(15, 4))
    assert problems(shard_layout([(n, p.numel()) for n, p in model.named_parameters()], world_size)) == []
    assert problems(shard_layout([("tiny", 3)], world_size)) == []
