"""Lesson 21, FSDP2 and ZeroRedundancyOptimizer in practice: the tour on real ranks (3, then 2 to resume), the rules
the exercises judge by checked against what torch did there, the quiz's experiments in planted worlds, and the
exercises' planted mistakes."""

import copy

import pytest
import torch

from dpcourse import examples, exercises, ranks
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.exercises.lesson21 import MODEL_SIZES
from dpcourse.quiz import run_experiment
from dpcourse.quiz.bank import load_lesson
from dpcourse.sharded import checkpoint_sharded, practice, zero_optimizer
from dpcourse.sharded.zero1 import shard_range
from tests import fsdp2_mistakes as mistakes
from tests.lesson_solutions import solution

pytestmark = pytest.mark.lesson21

QUESTIONS = {question.id: question for question in load_lesson("21_fsdp2")}


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> tuple:
    """The lesson's runs, once: the tour on 3 ranks, its checkpoint resumed on 2, the mixed-precision step."""
    directory = tmp_path_factory.mktemp("checkpoint")
    results = practice.tour(directory, world_size=3)
    return results, practice.resume(directory, world_size=2), practice.mixed_precision(world_size=2), directory


# The runs themselves.

def test_every_part_of_the_tour_and_the_resumed_run_equal_one_device_adam(tour):
    results, resumed, *_ = tour
    expected = ranks.one_device(steps=practice.STEPS)
    assert ranks.first_difference(results, expected) is None
    for part in ("kept", "one_unit", "ddp", "zero"):
        assert ranks.first_difference(practice.runs(results, part), expected) is None, part
    assert ranks.first_difference(resumed, expected) is None


def test_fsdp2_holds_a_third_of_the_state_and_the_full_model_only_without_reshard(tour):
    results, *_ = tour
    shard = [sum(torch.Size(p["local"]).numel() for p in result["layout"]) * 4 for result in results]
    assert [result["bytes"]["parameters"] for result in results] == shard
    assert [result["bytes"]["optimizer state"] for result in results] == [2 * s + 4 * 6 for s in shard]
    whole = 4 * ranks.parameter_count()
    assert results[0]["step"]["held_after_forward"] == 0 and results[0]["kept"]["step"]["held_after_forward"] == whole
    assert results[0]["one_unit"]["step"]["peak_full_bytes"] == whole > results[0]["step"]["peak_full_bytes"]


# The rules the exercises judge by, against what torch did on the ranks.

def test_greedy_partition_is_zero_redundancy_optimizers(tour):
    results, *_ = tour
    names = [p["name"] for p in results[0]["layout"]]
    owners = zero_optimizer.greedy_partition(MODEL_SIZES, 3)
    assert [result["zero"]["owned"] for result in results] == [
        sorted((n for n, owner in zip(names, owners, strict=True) if owner == rank),
               key=lambda n: -MODEL_SIZES[names.index(n)]) for rank in range(3)]


def test_fsdp2_rows_follow_shard_range_on_3_and_on_2_ranks(tour):
    results, resumed, *_ = tour
    for world, layouts in ((3, [result["layout"] for result in results]), (2, None)):
        for rank in range(world):
            for index, shape in enumerate(p.shape for p in examples.mlp(ranks.WIDTHS).parameters()):
                start, stop = shard_range(shape[0], rank, world)
                local = layouts[rank][index]["local"] if layouts else resumed[rank]["local"][index]
                assert local == (stop - start, *shape[1:])


def test_the_checkpoint_metadata_holds_the_3_rank_rows(tour):
    directory = tour[3]
    assert set(checkpoint_sharded.files(directory)) == {".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"}
    assert checkpoint_sharded.saved_rows(directory, "model.4.weight") == [(0, 2), (2, 4), (4, 4)]
    assert checkpoint_sharded.rows_to_read(4, 3, 1, 2) == [(1, 2, 4)]


def test_greedy_partition_refuses_a_bad_world_size():
    with pytest.raises(ValueError, match="world_size must be a whole number >= 1; got 0"):
        zero_optimizer.greedy_partition([3, 4], 0)


# The quiz: each experiment measures the keyed answer on the real runs, and the distractor in a planted world.

def _planted_tour(monkeypatch, results: list[dict]) -> None:
    monkeypatch.setattr(practice, "tour", lambda directory, world_size=3, steps=practice.STEPS: results)


@pytest.mark.parametrize("question_id", ["21-empty-shard", "21-reshard-gathers", "21-zero-owners"])
def test_the_real_runs_measure_the_keyed_answer(question_id, tour, monkeypatch):
    _planted_tour(monkeypatch, copy.deepcopy(tour[0]))
    question = QUESTIONS[question_id]
    assert run_experiment(question.experiment).value == question.answer


def test_the_real_checkpoint_and_mixed_precision_measure_the_keyed_answers(tour, monkeypatch):
    results, resumed, dtypes, _ = tour
    _planted_tour(monkeypatch, copy.deepcopy(results))
    monkeypatch.setattr(practice, "resume", lambda directory, world_size=2: copy.deepcopy(resumed))
    monkeypatch.setattr(practice, "mixed_precision", lambda world_size=2: dict(dtypes))
    for question_id in ("21-load-elsewhere", "21-mixed-precision"):
        question = QUESTIONS[question_id]
        assert run_experiment(question.experiment).value == question.answer


def test_an_fsdp2_that_split_rows_like_array_split_would_be_measured(tour, monkeypatch):
    results = copy.deepcopy(tour[0])
    for result, rows in zip(results, (2, 1, 1), strict=True):
        result["layout"][4]["local"] = (rows, 15)
    _planted_tour(monkeypatch, results)
    assert run_experiment("last_layer_on_three_ranks").value == "One row, (1, 15): the rows are split 2, 1, 1"


def test_a_backward_that_never_gathered_again_would_be_measured(tour, monkeypatch):
    results = copy.deepcopy(tour[0])
    step = results[0]["step"]
    step["backward"] = [name for name in step["backward"] if not name.startswith("all_gather")]
    _planted_tour(monkeypatch, results)
    assert run_experiment("gathers_per_step").value == (
        "3 with both: the flag only decides when the full parameters are freed")


def test_a_load_that_refused_another_number_of_ranks_would_be_measured(tour, monkeypatch):
    _planted_tour(monkeypatch, copy.deepcopy(tour[0]))

    def refuses(directory, world_size=2):
        raise RuntimeError("the checkpoint was written by 3 ranks")

    monkeypatch.setattr(practice, "resume", refuses)
    assert run_experiment("checkpoint_on_fewer_ranks").value == (
        "`dcp.load` raises: a checkpoint written by 3 ranks needs 3 ranks to read it")


def test_a_load_that_lost_adams_state_would_be_measured(tour, monkeypatch):
    _planted_tour(monkeypatch, copy.deepcopy(tour[0]))
    resumed = copy.deepcopy(tour[1])
    for result in resumed:
        result["parameters"] = [p + 1e-3 for p in result["parameters"]]
    monkeypatch.setattr(practice, "resume", lambda directory, world_size=2: resumed)
    assert run_experiment("checkpoint_on_fewer_ranks").value == (
        "It loads the weights but not Adam's state: step 4 gives other weights")


def test_an_optimizer_that_cut_every_parameter_would_be_measured(tour, monkeypatch):
    results = copy.deepcopy(tour[0])
    for result in results:
        result["zero"]["owned"] = [p["name"] for p in result["layout"]]
    _planted_tour(monkeypatch, results)
    assert run_experiment("zero_redundancy_owners").value == (
        "Every parameter cut into 3 slices, one per rank, as lesson 18's ZeRO-1")


@pytest.mark.parametrize(("planted", "expected"), [
    ({"weight inside the forward": "bfloat16", "stored shard": "bfloat16", "gradient": "bfloat16"},
     "bfloat16 for both: the policy converts the model"),
    (None, "It raises: a mixed-precision policy needs a GPU"),
])
def test_a_policy_that_converted_the_model_or_refused_the_cpu_would_be_measured(planted, expected, monkeypatch):
    def mixed_precision(world_size=2):
        if planted is None:
            raise RuntimeError("bfloat16 all-gather is not supported on gloo")
        return planted

    monkeypatch.setattr(practice, "mixed_precision", mixed_precision)
    assert run_experiment("mixed_precision_dtypes").value == expected


# The exercises: the lesson's solutions pass; planted mistakes fail, each with a message that says why.

def _owners_in_order(sizes, world_size):
    owned, owners = [0] * world_size, []
    for size in sizes:
        rank = owned.index(min(owned))
        owners.append(rank)
        owned[rank] += size
    return owners


def _owners_round_robin(sizes, world_size):
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    owners = [0] * len(sizes)
    for position, index in enumerate(order):
        owners[index] = position % world_size
    return owners


def _owners_ties_to_the_last_rank(sizes, world_size):
    owned, owners = [0] * world_size, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        rank = max(r for r in range(world_size) if owned[r] == min(owned))
        owners[index] = rank
        owned[rank] += sizes[index]
    return owners


def _owners_smallest_first(sizes, world_size):
    owned, owners = [0] * world_size, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        rank = owned.index(min(owned))
        owners[index] = rank
        owned[rank] += sizes[index]
    return owners


def _reads(rule):
    def rows_to_read(rows, saved_ranks, rank, ranks):
        first, end = rule(rows, rank, ranks)
        pieces = []
        for saved_rank in range(saved_ranks):
            saved_first, saved_end = rule(rows, saved_rank, saved_ranks)
            if max(first, saved_first) < min(end, saved_end):
                pieces.append((saved_rank, max(first, saved_first), min(end, saved_end)))
        return pieces

    return rows_to_read


def _array_split(rows, rank, world):
    sizes = [rows // world + (r < rows % world) for r in range(world)]
    return sum(sizes[:rank]), sum(sizes[: rank + 1])


def _own_shard_only(rows, saved_ranks, rank, ranks):
    first, end = shard_range(rows, rank, ranks)
    return [(rank, first, end)] if first < end else []


def _empty_overlaps_kept(rows, saved_ranks, rank, ranks):
    first, end = shard_range(rows, rank, ranks)
    pieces = []
    for saved_rank in range(saved_ranks):
        saved_first, saved_end = shard_range(rows, saved_rank, saved_ranks)
        if max(first, saved_first) <= min(end, saved_end):
            pieces.append((saved_rank, max(first, saved_first), min(end, saved_end)))
    return pieces


MISTAKES = {
    "train_with_fsdp2": {
        "the optimizer built before fully_shard": (mistakes.optimizer_before_fully_shard, "built after fully_shard"),
        "the loss divided by the number of ranks, as if FSDP2 summed": (mistakes.loss_divided_by_ranks, "averages"),
        "the local shards returned": (mistakes.returns_local_shards, "gather the full parameters"),
        "never sharded: each rank trains alone": (mistakes.never_sharded, "differs from one-device Adam"),
    },
    "zero_owners": {
        "in the model's order, not largest first": (_owners_in_order, "belongs to rank"),
        "round robin over the sorted parameters": (_owners_round_robin, "belongs to rank"),
        "ties to the last rank": (_owners_ties_to_the_last_rank, "belongs to rank"),
        "smallest first": (_owners_smallest_first, "belongs to rank"),
    },
    "rows_to_read": {
        "array_split's rule for both shardings": (_reads(_array_split), "expected"),
        "only its own saved shard, as if nothing changed": (_own_shard_only, "expected"),
        "empty overlaps kept": (_empty_overlaps_kept, "expected"),
    },
}


@pytest.mark.parametrize("name", MISTAKES)
def test_the_lessons_solution_passes(name):
    report = exercises.check(name, solution(name))
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message_that_says_why(name, mistake):
    function, says = MISTAKES[name][mistake]
    report = exercises.check(name, function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert any(says in detail for detail in failed), failed
