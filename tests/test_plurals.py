"""Every count a learner reads agrees with its number: "1 row", "2 rows" (``dpcourse.ui.words.plural``).

Each message is made by the public function behind it (an exercise's ``cases``, ``generated`` or ``judge``, a
check's report, ``dpcourse.open.describe``, a figure of ``dpcourse.viz``), once with a count of 1 and once with 2.
"""

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import pytest
import torch

from dpcourse import open as course_open
from dpcourse import viz
from dpcourse.exercises.check import FAILED, Case, CaseResult, Report, first_difference, run
from dpcourse.exercises.registry import EXERCISES
from dpcourse.ui.words import plural
from dpcourse.viz import palette

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NOUNS = ("rows|devices|ranks|replicas|parameters|numbers|samples|bytes|steps|values|pieces|chunks|lists|tensors|"
         "outputs|items|cases|times|threads|elements|layers|buckets|shards|copies")
# "1 rows", but not the "1" of "3, 3, 1 rows", "n - 1 steps", "2 and 1 values" or "Linear(5, 1)".
ONE_WITH_A_PLURAL = re.compile(rf"(?<![\w.,(/-])(?<!, )(?<!- )(?<!and )1 ({NOUNS})\b")
# Its cases measure a model's memory for seconds; their names hold no count.
MEASURED = {"device0_surplus"}


def test_plural_adds_an_s_unless_the_count_is_one() -> None:
    assert [plural(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert [plural(n, "copy", "copies") for n in (1, 2)] == ["1 copy", "2 copies"]
    assert palette.plural is plural  # the figures' helper is this one


def case_names(name: str) -> list[str]:
    exercise = EXERCISES[name]
    cases = exercise.cases() + (exercise.generated() if exercise.generated else [])
    return [text for case in cases for text in (case.description, case.hint)]


def test_no_case_name_or_hint_says_1_with_a_plural() -> None:
    """Every exercise whose cases are cheap to make (ranks and memory measurements left out)."""
    wrong = {name: found for name in EXERCISES if not EXERCISES[name].slow and name not in MEASURED
             if (found := [text for text in case_names(name) if ONE_WITH_A_PLURAL.search(text)])}
    assert not wrong, wrong


@pytest.mark.parametrize(("exercise", "one", "two"), [
    ("scatter_rows", "1 row on 1 device", "2 rows on 2 devices"),
    ("sample_weights", "1 row on 1 device", "2 rows on 2 devices"),
    ("scalar_output_shape", "1 row on 1 device", "2 rows on 2 devices"),
    ("reduce_add", "1 replica, 1 parameter", "2 replicas, 2 parameters"),
    ("replicate_bytes", "Linear(3, 2) on 1 device", "Linear(3, 2) on 2 devices"),
    ("bytes_per_step", "1 byte on 1 device", "4 bytes on 2 devices"),
    ("ring_all_reduce", "1 rank, 1 value", "2 ranks, 2 values"),
    ("distributed_indices", "1 sample, rank 0 of 1", "2 samples, rank 0 of 2"),
    ("epoch_indices", "1 sample, rank 0 of 1", "2 samples, rank 0 of 2"),
    ("global_batch_stats", "1 rank, ", "2 ranks, "),
    ("shard_range", "1 number on 1 rank", "2 numbers on 2 ranks"),
    ("adam_state_bytes", "1 number on 2 ranks", "2 numbers on 2 ranks"),
    ("zero2_bytes_per_step", "values on 1 rank", "values on 2 ranks"),
    ("zero3_bytes_per_step", "1 rank, reshard", "2 ranks, reshard"),
    ("zero_owners", "on 1 rank", "on 2 ranks"),
    ("rows_to_read", "1 row, saved on 1, rank 0 of 1", "2 rows, saved on 1, rank 0 of 2"),
    ("full_batch_gradients", "1 row, model seed 2", "10 rows, model seed 0"),
    ("capstone_parallel_apply", "1 replica", "2 replicas"),
])
def test_case_names_count_in_the_singular_and_the_plural(exercise: str, one: str, two: str) -> None:
    names = case_names(exercise)
    assert any(one in name for name in names), names[:10]
    assert any(two in name for name in names), names[:10]


def judged(name: str, args: tuple, answer: object) -> str:
    return EXERCISES[name].judge(Case("", args), answer)


def rows(count: int) -> torch.Tensor:
    return torch.arange(count * 2, dtype=torch.float32).reshape(count, 2)


def gathered_by_rank_0(numbers: int) -> list[dict]:
    return [{"direct": {"gathered": torch.zeros(numbers)}}]


# (message with a count of 1, what it must say, message with 2, what it must say)
MESSAGES: dict[str, tuple[Callable[[], str], str, Callable[[], str], str]] = {
    "chunk_sizes: rows in all": (lambda: judged("chunk_sizes", (2, 1), [1]), "1 row in all",
                                 lambda: judged("chunk_sizes", (1, 1), [2]), "2 rows in all"),
    "scatter_rows: chunks": (lambda: judged("scatter_rows", (rows(2), 1), [rows(1), rows(1)]),
                             "expected 1 chunk (sizes [2]), got 2 chunks",
                             lambda: judged("scatter_rows", (rows(2), 2), [rows(2)]),
                             "expected 2 chunks (sizes [1, 1]), got 1 chunk"),
    "replicate_parameters: lists": (lambda: judged("replicate_parameters", ([rows(1)], 1), [[rows(1)], [rows(1)]]),
                                    "expected 1 list of parameters, one per replica, got 2 lists",
                                    lambda: judged("replicate_parameters", ([rows(1)], 2), [[rows(1)]]),
                                    "expected 2 lists of parameters, one per replica, got 1 list"),
    "replicate_parameters: tensors": (lambda: judged("replicate_parameters", ([rows(1), rows(1)], 1), [[rows(1)]]),
                                      "replica 0 has 1 tensor, expected 2",
                                      lambda: judged("replicate_parameters", ([rows(1)], 1), [[rows(1), rows(1)]]),
                                      "replica 0 has 2 tensors, expected 1"),
    "run_replicas: outputs": (lambda: judged("run_replicas", ([], [rows(1)]), ([rows(1), rows(1)], [])),
                              "expected 1 output, one per replica in order, got 2 outputs",
                              lambda: judged("run_replicas", ([], [rows(1), rows(1)]), ([rows(1)], [])),
                              "expected 2 outputs, one per replica in order, got 1 output"),
    "first_difference: items": (lambda: first_difference([1], [1, 2]), "expected 1 item, got 2 items",
                                lambda: first_difference([1, 2], [1]), "expected 2 items, got 1 item"),
    "per_sample_loss: rows on devices": (lambda: judged("per_sample_loss", (rows(1), torch.zeros(1), 1),
                                                        torch.zeros(2)), "for 1 row on 1 device",
                                         lambda: judged("per_sample_loss", (rows(2), torch.zeros(2), 2),
                                                        torch.zeros(3)), "for 2 rows on 2 devices"),
    "shard_range: numbers a shard holds": (lambda: judged("shard_range", (3, 2), [(0, 1), (1, 3)]),
                                           "rank 0's shard (0, 1) holds 1 number",
                                           lambda: judged("shard_range", (3, 1), [(0, 2)]),
                                           "rank 0's shard (0, 2) holds 2 numbers"),
    "adam_state_bytes: a shard's numbers": (lambda: judged("adam_state_bytes", (1, 1), [0]), "shard of 1 number",
                                            lambda: judged("adam_state_bytes", (2, 1), [0]), "shard of 2 numbers"),
    "zero2_bytes_per_step: pieces": (lambda: judged("zero2_bytes_per_step", ([4], 2), 0), "n - 1 = 1 piece of",
                                     lambda: judged("zero2_bytes_per_step", ([4], 3), 0), "n - 1 = 2 pieces of"),
    "gather_full: numbers gathered": (lambda: judged("gather_full", (2,), gathered_by_rank_0(1)),
                                      "rank 0 gathered 1 number for",
                                      lambda: judged("gather_full", (2,), gathered_by_rank_0(2)),
                                      "rank 0 gathered 2 numbers for"),
    "zero_owners: ranks in the list": (lambda: judged("zero_owners", ([5], 1), [0, 0]), "a list of 1 rank, one per",
                                       lambda: judged("zero_owners", ([5, 5], 1), [0]), "a list of 2 ranks, one per"),
    "zero_owners: a parameter's elements": (lambda: judged("zero_owners", ([1, 9], 2), [0, 1]), "(1 element)",
                                            lambda: judged("zero_owners", ([2, 9], 2), [0, 1]), "(2 elements)"),
    "rows_to_read: rows saved by ranks": (lambda: judged("rows_to_read", (1, 1, 0, 1), []),
                                          "1 row saved by 1 rank",
                                          lambda: judged("rows_to_read", (2, 2, 0, 1), []),
                                          "2 rows saved by 2 ranks"),
    "a check's headline: cases": (lambda: repr(one_case_report(1)), "0 of 1 case passed",
                                  lambda: repr(one_case_report(2)), "0 of 2 cases passed"),
    "dpcourse.open: copies kept": (lambda: kept(1), "Kept 1 copy you already had",
                                   lambda: kept(2), "Kept 2 copies you already had"),
}


def one_case_report(count: int) -> Report:
    outcomes = [CaseResult(Case("a case", ()), FAILED, "differs") for _ in range(count)]
    return Report(EXERCISES["chunk_sizes"], outcomes, FAILED)


def kept(count: int) -> str:
    return course_open.describe(course_open.Copies([], [Path(f"{n}.ipynb") for n in range(count)]), Path("my-course"))


@pytest.mark.parametrize("message", MESSAGES)
def test_each_message_counts_in_the_singular_and_the_plural(message: str) -> None:
    one, says_one, two, says_two = MESSAGES[message]
    assert says_one in one()
    assert says_two in two()


def test_a_failing_generated_case_is_named_in_the_singular_and_the_plural() -> None:
    """The report's "generated: ..." line that the walkthrough saw as "generated: 1 rows on 1 devices"."""
    def copies_when(batch: int, n: int) -> Callable:
        return lambda x, parts: [c.clone() if (len(x), parts) == (batch, n) else c for c in x.chunk(parts)]

    assert "generated: 1 row on 1 device" in repr(run(EXERCISES["scatter_rows"], copies_when(1, 1)))
    assert "generated: 2 rows on 2 devices" in repr(run(EXERCISES["scatter_rows"], copies_when(2, 2)))


def title(figure: "Figure") -> str:
    """A figure's title and every axes' title, as one string."""
    texts = [figure.get_suptitle(), *(ax.get_title() for ax in figure.axes)]
    plt.close(figure)
    return " | ".join(texts)


FIGURES: dict[str, tuple[Callable[[], "Figure"], str, Callable[[], "Figure"], str]] = {
    "chunk_split": (lambda: viz.chunk_split(1, 1), "1 row on 1 device", lambda: viz.chunk_split(2, 2),
                    "2 rows on 2 devices"),
    "chunk_split along dim 1": (lambda: viz.chunk_split(torch.zeros(3, 1), 1, dim=1), "1 slice along dim 1 on 1 device",
                                lambda: viz.chunk_split(torch.zeros(3, 2), 2, dim=1), "2 slices along dim 1 on 2"),
    "replicate_map": (lambda: viz.replicate_map(torch.nn.Linear(1, 1), ["cpu"]), "on 1 device: shared",
                      lambda: viz.replicate_map(torch.nn.Linear(1, 1), ["cpu", "cpu"]), "on 2 devices: shared"),
    "per_replica_mean_bias": (lambda: viz.per_replica_mean_bias(1, 1), "1 sample on 1 device",
                              lambda: viz.per_replica_mean_bias(2, 2), "2 samples on 2 devices"),
    "shard_layout": (lambda: viz.shard_layout([("w", 1)], 1), "1 number on 1 rank",
                     lambda: viz.shard_layout([("w", 2)], 2), "2 numbers on 2 ranks"),
    "gather_view scalars": (lambda: viz.gather_view([1], scalars=True), "gather: 1 scalar →",
                            lambda: viz.gather_view([1, 1], scalars=True), "gather: 2 scalars →"),
}


@pytest.mark.parametrize("figure", FIGURES)
def test_each_figure_title_counts_in_the_singular_and_the_plural(figure: str) -> None:
    one, says_one, two, says_two = FIGURES[figure]
    assert says_one in title(one())
    assert says_two in title(two())
