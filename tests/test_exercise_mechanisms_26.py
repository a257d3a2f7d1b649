"""Lesson 26's checks watch the mechanism the exercise teaches, not only the numbers it gives.

``train_with_hsdp``: a 1-D FSDP2, a DDP, a (4, 1) mesh and a model sharded as one unit all reach one-device
Adam's weights, and must fail with a message that names what is wrong; sharding on the shard dimension alone
reaches other weights. ``hsdp_groups`` and ``traffic_per_rank``: the swapped dimensions and the forgotten
``(n - 1) / n`` factors must fail. The right solution passes (the lesson's own is run in ``tests/test_hsdp.py``
for the other two, and in the lesson for this one)."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

from dpcourse import exercises
from dpcourse.exercises import lesson26
from dpcourse.exercises.check import FAILED, PASSED

pytestmark = pytest.mark.lesson26


def _train(model, batches, lr):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def _shard(model, mesh, per_layer=True):
    for layer in model:
        if isinstance(layer, nn.Linear) and per_layer:
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def hsdp_right(model, batches, lr):
    _shard(model, init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard")))
    _train(model, batches, lr)
    return [p.full_tensor() for p in model.parameters()]


def fsdp2_on_all_ranks(model, batches, lr):
    _shard(model, init_device_mesh("cpu", (dist.get_world_size(),)))
    _train(model, batches, lr)
    return [p.full_tensor() for p in model.parameters()]


def ddp(model, batches, lr):
    _train(DistributedDataParallel(model), batches, lr)
    return list(model.parameters())


def mesh_of_4_replicas(model, batches, lr):
    _shard(model, init_device_mesh("cpu", (4, 1), mesh_dim_names=("replicate", "shard")))
    _train(model, batches, lr)
    return [p.full_tensor() for p in model.parameters()]


def one_unit(model, batches, lr):
    _shard(model, init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard")), per_layer=False)
    _train(model, batches, lr)
    return [p.full_tensor() for p in model.parameters()]


def shard_dimension_only(model, batches, lr):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    _shard(model, mesh["shard"])
    _train(model, batches, lr)
    return [p.full_tensor() for p in model.parameters()]


def _detail(exercise, function) -> str:
    report = exercises.run(exercise, function)
    assert report.status == FAILED, repr(report)
    assert "Traceback" not in repr(report)
    return next(outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED)


def test_train_with_hsdp_passes_the_right_mechanism():
    report = exercises.run(lesson26.TRAIN_WITH_HSDP, hsdp_right)
    assert report.status == PASSED, repr(report)


def groups_swapped(world_size, shard_size):
    rows = world_size // shard_size
    return {"replicate": [list(range(r * shard_size, (r + 1) * shard_size)) for r in range(rows)],
            "shard": [list(range(c, world_size, shard_size)) for c in range(shard_size)]}


def groups_column_major(world_size, shard_size):
    rows = world_size // shard_size
    return {"shard": [list(range(r, world_size, rows)) for r in range(rows)],
            "replicate": [list(range(c * rows, (c + 1) * rows)) for c in range(shard_size)]}


def groups_one_group_each(world_size, shard_size):
    return {"shard": [list(range(world_size))], "replicate": [list(range(world_size))]}


def groups_from_one(world_size, shard_size):
    rows = world_size // shard_size
    return {"shard": [[row * shard_size + column + 1 for column in range(shard_size)] for row in range(rows)],
            "replicate": [[row * shard_size + column + 1 for row in range(rows)] for column in range(shard_size)]}


def traffic_swapped(parameter_bytes, replicate, shard):
    return {"shard": 3 * (replicate - 1) / replicate * parameter_bytes,
            "replicate": 2 * (shard - 1) / shard * parameter_bytes / replicate}


def traffic_without_factors(parameter_bytes, replicate, shard):
    return {"shard": 3 * parameter_bytes, "replicate": 2 * parameter_bytes / shard}


def traffic_whole_gradient_across(parameter_bytes, replicate, shard):
    return {"shard": 3 * (shard - 1) / shard * parameter_bytes,
            "replicate": 2 * (replicate - 1) / replicate * parameter_bytes}


def traffic_one_gather(parameter_bytes, replicate, shard):
    return {"shard": 2 * (shard - 1) / shard * parameter_bytes,
            "replicate": 2 * (replicate - 1) / replicate * parameter_bytes / shard}


# exercise -> planted mistake -> (the wrong answer, words its message must hold); tests/test_exercises.py reads it.
MISTAKES = {
    "train_with_hsdp": {
        "1-D FSDP2 on all 4 ranks": (fsdp2_on_all_ranks, "a 1-D mesh"),
        "DDP": (ddp, "not DTensors placed (Replicate(), Shard(dim=0))"),
        "a (4, 1) mesh": (mesh_of_4_replicas, "the shape (4, 1), not (2, 2)"),
        "the model as one unit": (one_unit, "FSDP units are ['']"),
        "the shard dimension's sub-mesh alone": (shard_dimension_only, "differs from one-device Adam"),
    },
    "hsdp_groups": {
        "the shard and replicate groups swapped": (groups_swapped, "swapped"),
        "the mesh filled column by column": (groups_column_major,
                                             "the shard groups are [[0, 1], [2, 3]], not [[0, 2], [1, 3]]"),
        "every rank in one group of each kind": (groups_one_group_each,
                                                 "the shard groups are [[0, 1], [2, 3]], not [[0, 1, 2, 3]]"),
        "ranks numbered from 1": (groups_from_one, "not [[1, 2], [3, 4]]"),
    },
    "traffic_per_rank": {
        "the dimensions swapped": (traffic_swapped, "the mesh the other way round"),
        "no (n - 1) / n factors": (traffic_without_factors, "P = 1936 bytes on a (2, 2) mesh"),
        "the whole gradient all-reduced across": (traffic_whole_gradient_across, "in the replicate dimension"),
        "one all-gather per unit": (traffic_one_gather, "in the shard dimension"),
    },
}
EXERCISES = {exercise.name: exercise for exercise in lesson26.EXERCISES}


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message_that_names_it(name, mistake):
    function, says = MISTAKES[name][mistake]
    detail = _detail(EXERCISES[name], function)
    assert says in detail, detail


def test_a_wrong_kind_of_answer_is_named():
    assert "expected a dict with the keys 'shard' and 'replicate'" in _detail(
        lesson26.TRAFFIC_PER_RANK, lambda parameter_bytes, replicate, shard: 0)
    assert "expected a dict with the keys 'shard' and 'replicate'" in _detail(
        lesson26.HSDP_GROUPS, lambda world_size, shard_size: [])
