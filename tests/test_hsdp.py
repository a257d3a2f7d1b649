"""Lesson 26, HSDP: the tour on 4 real ranks (HSDP on a (2, 2) mesh, 1-D FSDP2, DDP), the rules the exercises judge
by checked against what torch did there, the lesson's solutions through every case, and the figure."""

import pytest
import torch

from dpcourse import exercises, ranks
from dpcourse.exercises import lesson26
from dpcourse.exercises.check import PASSED
from dpcourse.sharded import hsdp, hsdp_tables
from dpcourse.sharded.hsdp_traffic import Call, mesh_groups, per_dimension, sent_by_ring, traffic_per_rank
from dpcourse.viz.hsdp import mesh_figure
from tests.figure_checks import problems
from tests.lesson_solutions import solution

pytestmark = pytest.mark.lesson26

PARAMETER_BYTES = 4 * ranks.parameter_count(hsdp.WIDTHS)


@pytest.fixture(scope="module")
def tour() -> list[dict]:
    return hsdp.tour()


def test_hsdp_fsdp2_and_ddp_all_equal_one_device_adam(tour):
    for kind in hsdp.KINDS:
        assert hsdp.difference(hsdp.runs(tour, kind)) is None, kind


def test_the_ranks_groups_are_the_rows_and_columns_of_mesh_groups(tour):
    groups = mesh_groups(4, 2)
    for rank, result in enumerate(tour):
        row, column = result["coordinate"]
        assert (row, column) == divmod(rank, 2)
        assert list(result["groups"]["shard"]) == groups["shard"][row]
        assert list(result["groups"]["replicate"]) == groups["replicate"][column]


def test_each_shard_group_splits_the_rows_and_each_replicate_group_repeats_them(tour):
    for rank, result in enumerate(tour):
        assert result["placements"] == "(Replicate(), Shard(dim=0))"
        assert result["local"] == (8, 8)
        assert result["rows"] == (8 * (rank % 2), 8 * (rank % 2) + 8)


def test_the_traffic_rule_is_what_the_ranks_sent_in_each_dimension(tour):
    rule = traffic_per_rank(PARAMETER_BYTES, 2, 2)
    for result in tour:
        assert {name: entry["sent"] for name, entry in result["traffic"].items()} == rule
        assert result["traffic"]["replicate"]["calls"] == {"all-reduce": 3}
        assert result["traffic"]["shard"]["calls"] == {"all-gather": 6, "reduce-scatter": 3}
    assert tour[0]["FSDP2"]["traffic"]["all ranks"]["sent"] == traffic_per_rank(PARAMETER_BYTES, 1, 4)["shard"]
    assert tour[0]["DDP"]["traffic"]["all ranks"]["sent"] == traffic_per_rank(PARAMETER_BYTES, 4, 1)["replicate"]
    assert traffic_per_rank(PARAMETER_BYTES, 1, 4)["replicate"] == traffic_per_rank(PARAMETER_BYTES, 4, 1)["shard"] == 0


def test_a_rank_holds_half_the_model_under_hsdp_a_quarter_under_fsdp2(tour):
    steps = 4 * len(list(hsdp.one_device()))  # Adam's step count: one float32 per parameter tensor, whole
    for kind, share in (("DDP", 1), ("HSDP", 2), ("FSDP2", 4)):
        held = hsdp.runs(tour, kind)[0]["bytes"]
        part = PARAMETER_BYTES // share
        assert held == {"parameters": part, "gradients": part, "optimizer state": 2 * part + steps}, kind


def test_the_tables_and_the_figure_read_the_tour(tour):
    assert "rank 3 at mesh (1, 1): shard group (2, 3), replicate group (1, 3); 0.weight rows 8 ... 15" in (
        hsdp_tables.layout_table(tour))
    assert hsdp_tables.all_reduce_share(tour).endswith("0.50 of DDP's")
    assert problems(mesh_figure(tour)) == []


@pytest.mark.parametrize("name", ["hsdp_groups", "traffic_per_rank"])
def test_the_lessons_solutions_pass_every_case(name):
    assert exercises.run(exercises.EXERCISES[name], solution(name)).status == PASSED


def test_mesh_groups_refuses_a_shard_size_that_does_not_divide():
    with pytest.raises(ValueError, match="shard=3 must divide world_size=4"):
        mesh_groups(4, 3)


def test_sent_by_ring_is_lesson_13s_rule():
    assert sent_by_ring("all-gather", 800, 4) == sent_by_ring("reduce-scatter", 800, 4) == 600
    assert sent_by_ring("all-reduce", 800, 4) == 1200
    assert sent_by_ring("all-reduce", 800, 1) == 0


def test_per_dimension_names_a_collective_on_no_known_group():
    calls = [Call("all_reduce", (0, 2), 8), Call("all_gather_single", (0, 1, 2, 3), 16)]
    with pytest.raises(ValueError, match=r"all_gather_single ran on ranks \(0, 1, 2, 3\)"):
        per_dimension(calls, {"replicate": (0, 2)})
    summary = per_dimension(calls[:1], {"replicate": (0, 2), "shard": (0, 1)})
    assert summary == {"replicate": {"calls": {"all-reduce": 1}, "size": 8, "sent": 8.0},
                       "shard": {"calls": {}, "size": 0, "sent": 0.0}}


def test_call_kind_drops_the_version_dependent_suffix():
    assert [Call(name, (0,), 0).kind for name in ("all_gather_into_tensor", "reduce_scatter_single", "broadcast")] == [
        "all-gather", "reduce-scatter", "broadcast"]


def test_rows_held_refuses_a_shard_that_is_no_block_of_rows(monkeypatch):
    class Sharded(torch.Tensor):
        def full_tensor(self):
            return torch.arange(8.0).view(4, 2)

    monkeypatch.setattr(hsdp.fsdp2, "local", lambda tensor: torch.tensor([[9.0, 9.0]]))
    with pytest.raises(ValueError, match="no block of consecutive rows"):
        hsdp.rows_held(torch.zeros(1).as_subclass(Sharded))
    monkeypatch.setattr(hsdp.fsdp2, "local", lambda tensor: torch.tensor([[4.0, 5.0], [6.0, 7.0]]))
    assert hsdp.rows_held(torch.zeros(1).as_subclass(Sharded)) == (2, 4)


def test_the_exercises_are_registered():
    assert [exercise.name for exercise in lesson26.EXERCISES] == ["train_with_hsdp", "hsdp_groups", "traffic_per_rank"]
