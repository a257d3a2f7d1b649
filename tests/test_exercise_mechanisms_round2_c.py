"""Round 2 of issue 36 for lessons 19 and 20: the mutation tool's survivors (``python -m tests.mutation 19 20``) and
the learners' mistakes of the same kind, each rejected with a message that names it.

- ``train_zero2``: a shard cut from a bucket's padded vector without ``.clone()`` is a view that keeps the whole
  vector alive; the check counts the memory behind the tensors Adam steps.
- ``gather_full`` and ``shard_of_gradient``: called once more on float64 numbers past float32's precision, which
  must come back exactly, in float64 (a padded vector made without ``dtype=`` is float32).

Rank-based, on 2 ranks, one case each (a launch of the ranks costs seconds).
"""

import dataclasses
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpcourse import exercises
from dpcourse.exercises import lesson19, lesson20
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.sharded import zero2
from dpcourse.sharded.zero1 import shard_range


def _on_two_ranks(exercise: exercises.Exercise) -> exercises.Exercise:
    """The exercise's first case, on 2 ranks."""
    first = exercise.cases()[0]
    return dataclasses.replace(exercise, cases=lambda: [dataclasses.replace(first, description="2 ranks",
                                                                            args=(2, *first.args[1:]))])


def _failure(exercise: exercises.Exercise, function) -> str:
    report = exercises.run(_on_two_ranks(exercise), function)
    assert report.status == FAILED, repr(report)
    assert "Traceback" not in repr(report)
    return report.outcomes[0].detail


# train_zero2: Adam steps this rank's shards, each in memory of its own.

def _zero2(shard="clone"):
    """The lesson's ZeRO-2, with each shard made as ``shard`` says: "clone" (right), "view" (the mutant:
    ``.chunk(n)[rank]`` kept as a view of the bucket's padded vector), "narrow" (the same view by another road),
    "one flat" (every bucket's padded vector in one buffer, each shard a view of it)."""

    def train_zero2(model, batches, lr):
        rank, n = dist.get_rank(), dist.get_world_size()
        parameters = list(model.parameters())
        buckets = [[parameters[i] for i in g] for g in zero2.bucket_indices([p.numel() for p in parameters], 100)]
        pieces = [math.ceil(sum(p.numel() for p in b) / n) for b in buckets]

        def padded(tensors, piece):
            flat = torch.zeros(n * piece)
            values = torch.cat([t.reshape(-1) for t in tensors])
            flat[:values.numel()] = values
            return flat

        flats = [padded([p.detach() for p in b], piece) for b, piece in zip(buckets, pieces, strict=True)]
        if shard == "clone":
            shards = [flat.chunk(n)[rank].clone() for flat in flats]
        elif shard == "view":
            shards = [flat.chunk(n)[rank] for flat in flats]
        elif shard == "narrow":
            shards = [flat.narrow(0, rank * piece, piece) for flat, piece in zip(flats, pieces, strict=True)]
        else:
            whole = torch.cat(flats)
            shards, start = [], 0
            for flat, piece in zip(flats, pieces, strict=True):
                shards.append(whole[start + rank * piece:start + (rank + 1) * piece])
                start += flat.numel()
        optimizer = torch.optim.Adam(shards, lr=lr)

        def when_full(k):
            def hook(param):
                if all(p.grad is not None for p in buckets[k]):
                    flat = padded([p.grad for p in buckets[k]], pieces[k]) / n
                    shards[k].grad = torch.empty_like(shards[k])
                    dist.reduce_scatter(shards[k].grad, list(flat.chunk(n)))
                    for p in buckets[k]:
                        p.grad = None
            return hook

        for k, bucket in enumerate(buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(when_full(k))
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            for k, bucket in enumerate(buckets):
                flat = torch.empty(n * pieces[k])
                dist.all_gather(list(flat.chunk(n)), shards[k].detach())
                with torch.no_grad():
                    start = 0
                    for p in bucket:
                        p.copy_(flat[start:start + p.numel()].view_as(p))
                        start += p.numel()
        return parameters

    return train_zero2


def test_a_zero2_whose_shards_are_copies_passes():
    report = exercises.run(_on_two_ranks(lesson19.TRAIN_ZERO2), _zero2())
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize("shard", ["view", "narrow", "one flat"])
def test_a_zero2_whose_shards_keep_the_padded_vectors_alive_fails(shard):
    detail = _failure(lesson19.TRAIN_ZERO2, _zero2(shard))
    assert detail.startswith("rank 0's Adam steps tensors that keep") and ".clone()" in detail, detail


# gather_full and shard_of_gradient: float64 numbers come back in float64.

def _gather_full(pad_dtype="input", cat_dtype=None):
    """The lesson's gather_full, its padded shard made in ``pad_dtype`` ("input": the shard's; None: the default,
    float32) and the result cast to ``cat_dtype`` if given ("input": the shard's)."""

    def gather_full(shard, numel):
        n = dist.get_world_size()
        size = -(-numel // n)
        dtype = shard.dtype if pad_dtype == "input" else pad_dtype
        padded = torch.zeros(size, dtype=dtype, device=shard.device)
        padded[: shard.numel()] = shard
        pieces = [torch.empty_like(padded) for _ in range(n)]
        dist.all_gather(pieces, padded)
        whole = torch.cat(pieces)[:numel]
        return whole if cat_dtype is None else whole.to(shard.dtype if cat_dtype == "input" else cat_dtype)

    return gather_full


def _shard_of_gradient(pad_dtype="input", out_dtype="input", result_dtype=None):
    """The lesson's shard_of_gradient with its padded vector made in ``pad_dtype``, its output in ``out_dtype``
    ("input": the gradient's; None: float32), its result cast to ``result_dtype`` if given."""

    def shard_of_gradient(full_grad):
        n, rank, numel = dist.get_world_size(), dist.get_rank(), full_grad.numel()
        size = -(-numel // n)
        dtype = full_grad.dtype if pad_dtype == "input" else pad_dtype
        padded = torch.zeros(n * size, dtype=dtype, device=full_grad.device)
        padded[:numel] = full_grad
        mine = torch.empty(size, dtype=full_grad.dtype if out_dtype == "input" else out_dtype)
        dist.reduce_scatter(mine, [piece.to(mine.dtype) for piece in padded.chunk(n)])
        start, stop = shard_range(numel, rank, n)
        shard = mine[: stop - start] / n
        return shard if result_dtype is None else shard.to(result_dtype)

    return shard_of_gradient


RIGHT = {"gather_full": _gather_full(), "shard_of_gradient": _shard_of_gradient()}
EXERCISE = {"gather_full": lesson20.GATHER_FULL, "shard_of_gradient": lesson20.SHARD_OF_GRADIENT}
FLOAT32 = {  # each with what the check says: float32 returned, or float64 numbers rounded on the way
    ("gather_full", "the mutant: torch.zeros without dtype="): (_gather_full(pad_dtype=None), "returned torch.float32"),
    ("gather_full", "the padded shard made in float32 on purpose"): (
        _gather_full(pad_dtype=torch.float32), "returned torch.float32"),
    ("gather_full", "the result cast to float32"): (_gather_full(cat_dtype=torch.float32), "returned torch.float32"),
    ("gather_full", "padded in float32, cast back to the shard's dtype"): (
        _gather_full(pad_dtype=torch.float32, cat_dtype="input"), "a tensor in float32 on the way"),
    ("shard_of_gradient", "the mutant: torch.zeros without dtype="): (
        _shard_of_gradient(pad_dtype=None, out_dtype=None), "returned torch.float32"),
    ("shard_of_gradient", "the output made with torch.empty(size), float32"): (
        _shard_of_gradient(out_dtype=None), "returned torch.float32"),
    ("shard_of_gradient", "the slice cast to float32"): (
        _shard_of_gradient(result_dtype=torch.float32), "returned torch.float32"),
    ("shard_of_gradient", "padded in float32, reduce-scattered into float64"): (
        _shard_of_gradient(pad_dtype=None), "a tensor in float32 on the way"),
}


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_function_that_keeps_the_dtype_passes(name):
    report = exercises.run(_on_two_ranks(EXERCISE[name]), RIGHT[name])
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize(("name", "mistake"), list(FLOAT32))
def test_a_function_that_passes_float64_through_float32_fails(name, mistake):
    function, says = FLOAT32[name, mistake]
    detail = _failure(EXERCISE[name], function)
    assert detail.startswith(f"rank 0's {name}") and "float64" in detail and says in detail, detail
