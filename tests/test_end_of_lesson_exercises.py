"""The end-of-lesson exercises of lessons 00-10, 13, 15 and 20, checked like the others: planted wrong answers.

Each of these was once a worked solution shown in the student edition (walkthrough 2026-12-06, D4); now each is a
checked exercise (``dpcourse/exercises/lessonNN.py``). ``MISTAKES`` holds, per exercise, the mistakes it is there
to catch, and words that the message each gets must hold: the check must say what was wrong, not only that something
was. tests/test_exercises.py counts them with the others' (every exercise has three or more).
"""

import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

import dpcourse
from dpcourse import costmodel, examples, exercises, memory
from dpcourse.exercises.check import FAILED
from dpcourse.memory import Setup
from dpcourse.sharded import zero3_measure


def _on(n: int) -> list[torch.device]:
    return dpcourse.devices(n)


def _traced(step: str, run) -> int:
    with dpcourse.trace() as t:
        run()
    return t.steps(step)[0].bytes_copied


# --- lesson 00
def _forwards_on_one_device_too(model, x):
    with dpcourse.trace() as t:
        dpcourse.DataParallel(model, devices=_on(2))(x)
    return [span.step for span in t.spans]


# --- lesson 01
def _gradients_alone(model, x, y, n):
    examples.loss_fn(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def _gradients_on_one_device(model, x, y, n):
    examples.loss_fn(dpcourse.DataParallel(model, devices=_on(1))(x), y).backward()
    return [p.grad for p in model.parameters()]


def _gradients_of_a_summed_loss(model, x, y, n):
    nn.functional.cross_entropy(dpcourse.DataParallel(model, devices=_on(n))(x), y, reduction="sum").backward()
    return [p.grad for p in model.parameters()]


# --- lesson 03
class _IntAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x


class _BufferRebound(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls = self.calls + 1  # a new tensor, set on the replica only
        return x


class _FloatBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --- lesson 04
class _FindsItsDevice(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x.to(next(self.parameters()).device))


class _ByItsBuffers(_FindsItsDevice):
    def forward(self, x):
        return self.linear(x.to(next(self.buffers()).device))


class _ReturnsX(_FindsItsDevice):
    def forward(self, x):
        return x


class _WithAFreshLayer(_FindsItsDevice):
    def forward(self, x):
        return nn.Linear(8, 4)(x)


# --- lesson 05
class _WithLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = examples.make_model()

    def forward(self, x, y):
        return examples.loss_fn(self.model(x), y)


class _SumPerChunk(_WithLoss):
    def forward(self, x, y):
        return nn.functional.cross_entropy(self.model(x), y, reduction="sum")


class _LossesAsAColumn(_WithLoss):
    def forward(self, x, y):
        return nn.functional.cross_entropy(self.model(x), y, reduction="none").unsqueeze(1)


# --- lesson 06
def _mean_of_chunk_means(model, x, y, n):
    return dpcourse.DataParallel(examples.LossInside(model), devices=_on(n))(x, y).mean()


def _weighted_but_not_divided(model, x, y, n):
    means = dpcourse.DataParallel(examples.LossInside(model), devices=_on(n))(x, y)
    return (means * torch.tensor([len(c) for c in x.chunk(n)], dtype=means.dtype)).sum()


# --- lesson 07
def _loaded_as_it_is(model, state):
    model.load_state_dict(state)
    return model


def _loaded_leniently(model, state):
    model.load_state_dict(state, strict=False)
    return model


def _prefix_stripped_in_place(model, state):
    consume_prefix_in_state_dict_if_present(state, "module.")
    model.load_state_dict(state)
    return model


# --- lesson 08
class _ReturnedState(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 2)
        self.register_buffer("internal_state", torch.zeros(10))

    def forward(self, x):
        return self.linear(x), torch.sum(x, dim=0, keepdim=True)


def _accumulated(batch, n, reduce, devices_used=None):
    model = _ReturnedState().to(batch.device)
    _, partial_sums = dpcourse.DataParallel(model, devices=_on(devices_used or n))(batch)
    model.internal_state += reduce(partial_sums)
    return model


def _example2_alone(model, inputs, n):
    model(inputs).pow(2).mean().backward()
    return [p.grad for p in model.parameters()]


def _example2_without_pow(model, inputs, n):
    dpcourse.DataParallel(model, devices=_on(n))(inputs).mean().backward()
    return [p.grad for p in model.parameters()]


# --- lesson 09
def _traced_in_one_step(step, model_fn, n):
    model = model_fn()
    dp = dpcourse.DataParallel(model, devices=_on(n))
    x = torch.randn(8, 16, dtype=next(model.parameters()).dtype)
    return _traced(step, lambda: dp(x).pow(2).mean().backward())


def _gathered(model_fn, n, inputs, measure=lambda output: output.numel() * output.element_size()):
    return measure(dpcourse.DataParallel(model_fn(), devices=_on(n))(*inputs))


# --- lesson 10
def _padded(samples, ranks):
    return list(range(samples)) + list(range(-samples % ranks))


def _speedup(batch: int, preset: str, gpus_index: int = -1) -> float:
    return costmodel.predict_speedup(preset, dataclasses.replace(costmodel.EXAMPLE, batch=batch)).ddp[gpus_index]


# --- lesson 15
def _twice(candidates, n, factor=2, strict=True):
    for batch in candidates:
        common = {"devices": n, "batch": batch, "optimizer": "SGD", "model": memory.sized_mlp(classes=32000)}
        dp = memory.predict(Setup(kind="DataParallel", **common)).totals[0]
        ddp = memory.predict(Setup(kind="DDP", **common)).totals[0]
        if dp > factor * ddp if strict else dp >= factor * ddp:
            return batch
    return None


def _bucket_totals(width, depth, n):
    model = memory.sized_mlp(width=width, depth=depth)
    return [memory.predict(Setup(kind="DDP", devices=n, model=model, bucket_view=view)).totals[0]
            for view in (False, True)]


# The mistakes, each with words its message must hold.
MISTAKES = {
    "replica_forwards": {
        "one per device": (lambda batch, n: n, "expected"),
        "min(batch, n)": (lambda batch, n: min(batch, n), "expected"),
        "the chunk size, not the number of chunks": (lambda batch, n: -(-batch // n), "expected"),
    },
    "single_device_steps": {
        "the four steps": (lambda model, x: ["scatter", "replicate", "forward", "gather"], "expected"),
        "nothing recorded": (lambda model, x: [], "expected"),
        "traced on 2 devices": (_forwards_on_one_device_too, "expected"),
    },
    "parallel_gradients": {
        "the model alone": (_gradients_alone, "0 replica forwards ran"),
        "DataParallel on one device": (_gradients_on_one_device, "0 replica forwards ran"),
        "a summed loss": (_gradients_of_a_summed_loss, "gradients"),
    },
    "train_in_parallel": {
        "a copy trained": (lambda model, n, steps: examples.train(
            dpcourse.DataParallel(copy.deepcopy(model), devices=_on(n)), steps=steps), "train the model you are given"),
        "trained alone": (lambda model, n, steps: examples.train(model, steps=steps), "replica forwards ran"),
        "one step fewer": (lambda model, n, steps: examples.train(
            dpcourse.DataParallel(model, devices=_on(n)), steps=steps - 1), "replica forwards ran"),
    },
    "all_devices_busy": {
        "as many rows as devices": (lambda batch, n: batch >= n, "chunk"),
        "rows divisible by n": (lambda batch, n: batch % n == 0, "chunk"),
        "the number of chunks": (lambda batch, n: len(torch.zeros(batch).chunk(n)), "True or False"),
    },
    "scatter_dict": {
        "chunked by hand": (lambda inputs, n: [
            {key: value.chunk(n)[i] for key, value in inputs.items()} for i in range(len(inputs["x"].chunk(n)))],
            "not made by dpcourse.scatter"),
        "x scattered alone": (lambda inputs, n: dpcourse.scatter(inputs["x"], _on(n)), "expected a dict"),
        "lengths left whole": (lambda inputs, n: [
            {"x": chunk, "lengths": inputs["lengths"]} for chunk in dpcourse.scatter(inputs["x"], _on(n))],
            "expected shape"),
    },
    "Counter": {
        "an int attribute": (_IntAttribute, "not a registered buffer"),
        "the buffer rebound": (_BufferRebound, "calls reads"),
        "a float buffer": (_FloatBuffer, "a whole number"),
    },
    "traced_replicate_bytes": {
        "n copies": (lambda model, n: n * _tensor_bytes([*model.parameters(), *model.buffers()]), "expected"),
        "parameters only": (lambda model, n: (n - 1) * _tensor_bytes(model.parameters()), "expected"),
        "numbers, not bytes": (lambda model, n: (n - 1) * sum(p.numel() for p in model.parameters()), "expected"),
    },
    "UsesItsWeightsDevice": {
        "FindsItsDevice as it is": (_FindsItsDevice, "raised StopIteration"),
        "the device of its buffers": (_ByItsBuffers, "raised StopIteration"),
        "x returned unchanged": (_ReturnsX, "expected shape"),
        "a fresh layer": (_WithAFreshLayer, "DataParallel's output"),
    },
    "reported_replica": {
        "batch // n rows per chunk": (lambda batch, n, bad: min(row // max(1, batch // n) for row in bad), "expected"),
        "the highest replica": (lambda batch, n, bad: max(row // -(-batch // n) for row in bad), "expected"),
        "the first row listed": (lambda batch, n, bad: bad[0] // -(-batch // n), "expected"),
    },
    "gathered_length": {
        "one piece per device": (lambda batch, n: 5 * n, "expected"),
        "one piece": (lambda batch, n: 5, "expected"),
        "the batch": (lambda batch, n: batch, "expected"),
    },
    "PerSampleLoss": {
        "the mean per chunk": (_WithLoss, "expected ["),
        "the sum per chunk": (_SumPerChunk, "expected ["),
        "a column of losses": (_LossesAsAColumn, "expected ["),
    },
    "size_weighted_loss": {
        "the mean of the chunk means": (_mean_of_chunk_means, "share of the batch's rows"),
        "weighted, not divided by the batch": (_weighted_but_not_divided, "share of the batch's rows"),
        "the one-device loss": (lambda model, x, y, n: examples.loss_fn(model(x), y), "0 replica forwards ran"),
    },
    "load_into_bare": {
        "loaded as it is": (_loaded_as_it_is, "raised RuntimeError"),
        "loaded with strict=False": (_loaded_leniently, "the loaded model's state_dict"),
        "the prefix stripped from the caller's checkpoint": (_prefix_stripped_in_place, "keys changed"),
        "a copy loaded": (lambda model, state: _loaded_leniently(copy.deepcopy(model), state), "the model you were"),
    },
    "batchnorm_trains": {
        "two rows per device": (lambda batch, n: batch >= 2 * n, "expected"),
        "more rows than devices": (lambda batch, n: batch > n, "expected"),
        "always": (lambda batch, n: True, "expected"),
    },
    "example2_gradients": {
        "the model alone": (_example2_alone, "0 replica forwards ran"),
        "on one device": (lambda model, inputs, n: _example2_alone(
            dpcourse.DataParallel(model, devices=_on(1)), inputs, n), "0 replica forwards ran"),
        "the loss without pow(2)": (_example2_without_pow, "gradients"),
    },
    "accumulate": {
        "replica 0's sums only": (lambda batch, n: _accumulated(batch, n, lambda sums: sums[0]), "internal_state"),
        "the mean of the sums": (lambda batch, n: _accumulated(batch, n, lambda sums: sums.mean(0)),
                                 "internal_state"),
        "on one device": (lambda batch, n: _accumulated(batch, n, lambda sums: sums.sum(0), devices_used=1),
                          "0 replica forwards ran"),
    },
    "reduce_bytes": {
        "the replicate span": (lambda model_fn, n: _traced_in_one_step("replicate", model_fn, n) + 1, "expected"),
        "n gradients": (lambda model_fn, n: n * _tensor_bytes(model_fn().parameters()), "expected"),
        "numbers, not bytes": (lambda model_fn, n: (n - 1) * sum(p.numel() for p in model_fn().parameters()),
                               "expected"),
    },
    "gathered_bytes": {
        "the scatter span": (lambda model_fn, n, *inputs: _traced(
            "scatter", lambda: dpcourse.DataParallel(model_fn(), devices=_on(n))(*inputs)), "expected"),
        "numbers, not bytes": (lambda model_fn, n, *inputs: _gathered(model_fn, n, inputs, torch.numel), "expected"),
        "n outputs": (lambda model_fn, n, *inputs: n * _gathered(model_fn, n, inputs), "expected"),
    },
    "full_batch_gradient": {
        "the plain mean": (lambda local, sizes: sum(local) / len(local), "expected"),
        "the size-weighted sum": (lambda local, sizes: sum(s * g for g, s in zip(local, sizes, strict=True)),
                                  "expected"),
        "weights swapped": (lambda local, sizes: sum(s * g for g, s in zip(local, sizes[::-1], strict=True))
                            / sum(sizes), "expected"),
    },
    "seen_twice": {
        "no padding": (lambda samples, ranks: [], "expected"),
        "padded from the end": (lambda samples, ranks: list(range(samples - (-samples % ranks), samples)),
                                "expected"),
        "every repeat listed": (lambda samples, ranks: [i for i in _padded(samples, ranks)
                                                        if _padded(samples, ranks).count(i) > 1], "expected"),
    },
    "smallest_batch": {
        "more than the target": (lambda target, preset: next(
            (b for b in (32, 64, 128, 256, 512, 1024) if _speedup(b, preset) > target), None), "expected"),
        "one GPU's speed-up": (lambda target, preset: next(
            (b for b in (32, 64, 128, 256, 512, 1024) if _speedup(b, preset, 0) >= target), None), "expected"),
        "the largest batch": (lambda target, preset: 1024, "expected"),
    },
    "ring_and_rank0": {
        "the whole tensor from each ring rank": (lambda n, nbytes: (2 * (n - 1) * nbytes, (n - 1) * nbytes),
                                                 "expected"),
        "the reduce-scatter half of the ring": (lambda n, nbytes: ((n - 1) * nbytes / n, (n - 1) * nbytes),
                                                "expected"),
        "rank 0 sends once": (lambda n, nbytes: (2 * (n - 1) * nbytes / n, nbytes), "expected"),
    },
    "own_pieces": {
        "every piece holding its values": (lambda after_from, rank: [
            piece for piece, ranks in enumerate(after_from[rank]) if rank in ranks], "expected"),
        "rank 0's tensor": (lambda after_from, rank: [
            piece for piece, ranks in enumerate(after_from[0]) if ranks == (rank,)], "expected"),
        "counted from 1": (lambda after_from, rank: [
            piece + 1 for piece, ranks in enumerate(after_from[rank]) if ranks == (rank,)], "expected"),
    },
    "batch_for_twice": {
        "once as much, not twice": (lambda candidates, n: _twice(candidates, n, factor=1), "expected"),
        "the last candidate": (lambda candidates, n: candidates[-1], "expected"),
        "three times": (lambda candidates, n: _twice(candidates, n, factor=3), "expected"),
    },
    "bucket_view_saving": {
        "nothing saved": (lambda width, depth, n: 0, "expected"),
        "the whole of a rank": (lambda width, depth, n: _bucket_totals(width, depth, n)[0], "expected"),
        "shared among the ranks": (lambda width, depth, n: (lambda t: (t[0] - t[1]) // n)(
            _bucket_totals(width, depth, n)), "expected"),
    },
    "peak_against_kinds": {
        "the kinds added up as the peak": (lambda setup: (memory.predict(setup).totals[0], "backward",
                                                          memory.predict(setup).totals[0]), "expected"),
        "the peak in forward": (lambda setup: (memory.profile_step(setup).peak, "forward",
                                               memory.predict(setup).totals[0]), "expected"),
        "the peak in MiB": (lambda setup: (memory.profile_step(setup).peak / memory.MIB,
                                           memory.profile_step(setup).peak_phase, memory.predict(setup).totals[0]),
                            "expected"),
    },
    "zero3_against_all_reduce": {
        "the all-reduce unpadded": (lambda numels, n: {
            "reshard": zero3_measure.bytes_per_step(numels, n, True),
            "no reshard": zero3_measure.bytes_per_step(numels, n, False),
            "all-reduce": 2 * (n - 1) * sum(numels) * 4 // n}, "['all-reduce']"),
        "resharding ignored": (lambda numels, n: {
            "reshard": zero3_measure.bytes_per_step(numels, n, False),
            "no reshard": zero3_measure.bytes_per_step(numels, n, False),
            "all-reduce": 2 * (n - 1) * -(-sum(numels) // n) * 4}, "['reshard']"),
        "the all-reduce in numbers, not bytes": (lambda numels, n: {
            "reshard": zero3_measure.bytes_per_step(numels, n, True),
            "no reshard": zero3_measure.bytes_per_step(numels, n, False),
            "all-reduce": 2 * (n - 1) * -(-sum(numels) // n)}, "['all-reduce']"),
    },
}


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message_that_names_it(name: str, mistake: str) -> None:
    function, words = MISTAKES[name][mistake]
    report = exercises.check(name, function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    details = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert any(words in detail for detail in details), f"{mistake}: no failed case says {words!r}:\n{report!r}"
    assert "Traceback" not in repr(report)
