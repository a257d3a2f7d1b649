"""Lesson 20's ZeRO-3 by hand, on real gloo ranks: the weights of one-device Adam, every way; the bytes counted
equal the formula the exercise asks for; the ring collectives equal gloo's; each quiz experiment measures its
keyed answer, and the distractor in a world where that distractor holds; every exercise passes its solution and
rejects planted mistakes with a message that says what to fix; the figure's text is readable."""

import functools
import linecache
import re
from pathlib import Path

import jupytext
import pytest
import torch
import torch.distributed as dist

from dpcourse import exercises, ranks
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.quiz import find_question, run_experiment
from dpcourse.ranks.launcher import launch
from dpcourse.sharded import rings, zero3, zero3_measure
from dpcourse.sharded.zero1 import shard_range
from dpcourse.viz.zero3 import zero3_memory
from tests.figure_checks import problems

pytestmark = pytest.mark.lesson20
SOURCE = Path(__file__).parent.parent / "notebooks" / "src" / "20_zero3.py"


@functools.cache
def measured(world_size: int) -> list[dict]:
    """DDP and the three ZeRO-3 ways in one launch, on the runner's small model (uneven slices on 3 and 4)."""
    return zero3_measure.measure(world_size, widths=ranks.WIDTHS)


@pytest.mark.parametrize("world_size", [3, 4])
def test_every_way_on_every_rank_ends_with_one_device_adams_weights(world_size):
    oracle = ranks.one_device()
    for way in zero3_measure.WAYS:
        per_rank = [{"parameters": rank["ways"][way]["parameters"]} for rank in measured(world_size)]
        assert ranks.first_difference(per_rank, oracle) is None, way


def test_the_program_for_train_on_ranks_matches_one_device_with_torchs_collectives():
    assert ranks.first_difference(ranks.train_on_ranks(zero3.program, 2), ranks.one_device()) is None


@pytest.mark.parametrize("world_size", [3, 4])
def test_the_counted_bytes_are_the_formulas(world_size):
    for rank in measured(world_size):
        ways = rank["ways"]
        numels = ways["ZeRO-3"]["numels"]
        assert ways["ZeRO-3"]["step_sent"] == zero3_measure.bytes_per_step(numels, world_size)
        assert ways["ZeRO-3, prefetch"]["step_sent"] == zero3_measure.bytes_per_step(numels, world_size)
        assert ways["ZeRO-3, no reshard"]["step_sent"] == zero3_measure.bytes_per_step(numels, world_size, False)


def test_after_forward_only_the_shards_hold_memory_and_prefetch_raises_the_peak():
    for rank, result in enumerate(measured(3)):
        zero = result["ways"]["ZeRO-3"]
        assert zero["held_after_forward"] == [0] * len(zero["numels"])
        assert zero["shard_bytes"] == [4 * (stop - start) for start, stop in
                                       (shard_range(numel, rank, 3) for numel in zero["numels"])]
        assert max(result["ways"]["ZeRO-3, prefetch"]["allocated"]) > max(zero["allocated"])
        assert zero["start"] < result["ways"]["DDP"]["start"]


def _rings_against_gloo() -> dict:
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = torch.arange(5, dtype=torch.float32) + 10 * rank
    ours, theirs = [torch.empty(5) for _ in range(n)], [torch.empty(5) for _ in range(n)]
    rings.all_gather(ours, mine)
    dist.all_gather(theirs, mine)
    pieces = [torch.arange(3, dtype=torch.float32) * (rank + 1) + p for p in range(n)]
    summed, expected = torch.empty(3), torch.empty(3)
    dist.reduce_scatter(expected, [p.clone() for p in pieces])
    rings.reduce_scatter(summed, pieces)
    return {"gathered": torch.equal(torch.stack(ours), torch.stack(theirs)), "scattered": torch.equal(summed, expected)}


def test_the_ring_collectives_equal_gloos():
    assert launch(_rings_against_gloo, 3) == [{"gathered": True, "scattered": True}] * 3


def test_the_formula_on_one_rank_and_on_a_layer_smaller_than_the_ranks():
    assert zero3_measure.bytes_per_step([135, 240, 64], 1) == 0
    assert zero3_measure.bytes_per_step([7], 4) == 3 * 3 * 2 * 4


def test_the_figure_of_a_step_is_readable():
    ways = measured(3)[0]["ways"]
    assert problems(zero3_memory({way: ways[way] for way in ("DDP", "ZeRO-3", "ZeRO-3, prefetch")})) == []


# The quiz: the keyed answer on real ranks, and a distractor in a world where it holds (a ZeRO-3 that keeps
# layers whole after forward, a prefetch that fetches nothing early), run for real too.

@pytest.mark.parametrize("question_id", ["20-after-forward", "20-bytes-vs-ddp", "20-prefetch-peak"])
def test_real_ranks_measure_the_keyed_answer(question_id):
    question = find_question(question_id)
    assert run_experiment(question.experiment).value == question.answer


def test_a_zero3_that_kept_layers_whole_would_be_measured_as_holding_them(monkeypatch):
    monkeypatch.setitem(zero3_measure.WAYS, "ZeRO-3", {"reshard": False})
    assert run_experiment("held_after_forward").value == "Its whole parameters, until backward has used them"


def test_a_zero3_without_the_second_all_gather_would_be_measured_as_ddps_bytes(monkeypatch):
    monkeypatch.setitem(zero3_measure.WAYS, "ZeRO-3", {"reshard": False})
    same = "The same as DDP: reduce-scatter plus all-gather is an all-reduce"
    assert run_experiment("bytes_against_ddp").value == same


def test_a_prefetch_that_fetched_nothing_early_would_be_measured_as_the_same_peak(monkeypatch):
    monkeypatch.setitem(zero3_measure.WAYS, "ZeRO-3, prefetch", {})
    assert run_experiment("prefetch_peak").value == "The same: the next layer is gathered anyway"


# The exercises: the lesson's solutions pass; planted mistakes fail, each with a message naming what is wrong.

def _solutions() -> dict:
    namespace: dict = {}
    for cell in jupytext.read(SOURCE).cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []) and "### BEGIN" in cell.source:
            name = re.search(r"^def (\w+)\(", cell.source, re.M).group(1)
            code = "import torch\nimport torch.distributed as dist\nfrom dpcourse.sharded.zero1 import shard_range\n"
            code += cell.source
            filename = f"<20_zero3: {name}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # sent to ranks as source
            exec(compile(code, filename, "exec"), namespace)
    return {name: namespace[name] for name in ("zero3_bytes_per_step", "gather_full", "shard_of_gradient")}


SOLUTIONS = _solutions()


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_lessons_solution_passes(name):
    report = exercises.check(name, SOLUTIONS[name])
    assert report.status == PASSED, repr(report)


def _gather(trim: bool = True, order: int = 1, floor: bool = False):
    def gather_full(shard, numel):
        n = dist.get_world_size()
        size = numel // n if floor else -(-numel // n)
        padded = torch.zeros(size)
        padded[: shard.numel()] = shard
        pieces = [torch.empty_like(padded) for _ in range(n)]
        dist.all_gather(pieces, padded)
        whole = torch.cat(pieces[::order])
        return whole[:numel] if trim else whole

    return gather_full


def _own_shard_n_times(shard, numel):
    return torch.cat([shard] * dist.get_world_size())[:numel]


def _scatter(average: bool = True, trim: bool = True, communicate: bool = True):
    def shard_of_gradient(full_grad):
        n, rank, numel = dist.get_world_size(), dist.get_rank(), full_grad.numel()
        size = -(-numel // n)
        padded = torch.zeros(n * size)
        padded[:numel] = full_grad
        mine = torch.empty(size)
        if communicate:
            dist.reduce_scatter(mine, list(padded.chunk(n)))
        else:
            mine.copy_(padded.chunk(n)[rank])
        start, stop = shard_range(numel, rank, n)
        mine = mine[: stop - start] if trim else mine
        return mine / n if average else mine

    return shard_of_gradient


def _all_reduced(full_grad):
    total = full_grad.clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()


MISTAKES = {
    "zero3_bytes_per_step": {
        "no padding: numel / n": (lambda numels, n, reshard: sum(
            int((3 if reshard else 2) * (n - 1) * numel / n * 4) for numel in numels), "expected"),
        "no all-gather before backward": (lambda numels, n, reshard: sum(
            2 * (n - 1) * -(-numel // n) * 4 for numel in numels), "expected"),
        "n pieces instead of n - 1": (lambda numels, n, reshard: sum(
            (3 if reshard else 2) * n * -(-numel // n) * 4 for numel in numels), "expected"),
        "numbers instead of bytes": (lambda numels, n, reshard: sum(
            (3 if reshard else 2) * (n - 1) * -(-numel // n) for numel in numels), "expected"),
    },
    "gather_full": {
        "padding not cut off": (_gather(trim=False), "cut the padding off"),
        "shards in reverse rank order": (_gather(order=-1), "rank order"),
        "padded to floor(numel / n)": (_gather(floor=True), "raised"),
        "its own shard, n times": (_own_shard_n_times, "rank order"),
    },
    "shard_of_gradient": {
        "the sum, not the average": (_scatter(average=False), "the sum n (n + 1) / 2 times"),
        "padding kept": (_scatter(trim=False), "cut the padding off"),
        "no reduce-scatter: its own gradient's slice": (_scatter(communicate=False), "average"),
        "an all-reduce: the whole averaged gradient": (_all_reduced, "returned"),
    },
}


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message_that_says_what_is_wrong(name, mistake):
    function, words = MISTAKES[name][mistake]
    report = exercises.check(name, function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    assert words in repr(report) and "Traceback" not in repr(report), repr(report)
