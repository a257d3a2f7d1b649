"""Every checked exercise can pass, can be left alone, and can fail.

- the solution written in the lesson source (the code between its ``### BEGIN SOLUTION`` markers, run with the
  lesson's imports) passes every case;
- a stub that still raises ``NotImplementedError`` reads "not attempted yet", with nothing failed;
- planted wrong answers, the mistakes each exercise is there to catch, fail;
- a learner's function that raises shows one line, "raised X: message", never a traceback.
"""

import importlib
import math
import re
import threading
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn

from dpcourse import examples, exercises, precision
from dpcourse.exercises import registry
from dpcourse.exercises.check import FAILED, NOT_ATTEMPTED, PASSED, run
from tests.helpers import one_thread_each
from tests.lesson_solutions import SOURCES, lesson_solutions

SOLUTIONS, LESSONS = lesson_solutions()
# Exercises whose answer is a pair of functions: exercises.check("snapshot_and_resume", (snapshot, resume)).
PAIRS = {"snapshot_and_resume": "(snapshot, resume)"}
# The capstone's six pieces are tested in test_capstone.py, with its own planted mistakes.
NAMES = sorted(name for name in registry.EXERCISES if not name.startswith("capstone_"))


def test_every_lesson_01_to_11_has_exercises_and_the_course_has_20_or_more() -> None:
    assert len(registry.EXERCISES) >= 20
    assert {LESSONS.get(name, "missing")[:2] for name in NAMES} >= {f"{n:02}" for n in range(1, 12)}


@pytest.mark.parametrize("name", NAMES)
def test_each_exercise_has_a_solution_and_a_check_cell_in_its_lesson(name: str) -> None:
    assert name in SOLUTIONS, f"no solution cell defines {name}"
    assert f'exercises.check("{name}", {PAIRS.get(name, name)})' in (SOURCES / LESSONS[name]).read_text()


@pytest.mark.parametrize("name", NAMES)
def test_the_lessons_solution_passes(name: str) -> None:
    report = exercises.check(name, SOLUTIONS[name])
    assert report.status == PASSED, repr(report)
    assert "✓" in repr(report) and "failed" not in repr(report)


@pytest.mark.parametrize("name", [n for n in NAMES if "05" <= LESSONS.get(n, "")[:2] <= "11"])
def test_the_lessons_solution_passes_where_devices_0_stands_in_for_a_gpu(name: str, stand_in_gpu) -> None:
    report = exercises.check(name, SOLUTIONS[name])
    assert report.status == PASSED, repr(report)


@pytest.mark.parametrize("name", NAMES)
def test_an_untouched_stub_is_not_attempted_yet(name: str) -> None:
    def stub(*args):
        raise NotImplementedError(f"write {name}")

    report = exercises.check(name, (stub, stub) if name in PAIRS else stub)
    assert report.status == NOT_ATTEMPTED and not report.outcomes
    assert repr(report).startswith(f"{name}: not attempted yet.")
    assert "not attempted yet" in report._repr_html_()


@pytest.mark.parametrize("name", NAMES)
def test_a_raising_answer_shows_its_first_line_and_the_learners_line_and_no_traceback(name: str) -> None:
    message = "bad value\nsecond line"

    def broken(*args):
        raise ValueError(message)

    report = exercises.check(name, (broken, broken) if name in PAIRS else broken)
    assert report.status == FAILED
    line = broken.__code__.co_firstlineno + 1
    expected = f"raised ValueError: bad value (line {line} of broken: raise ValueError(message))"
    # run in other processes (lessons 13, 18-21), the line travels in the message, with the rank that raised
    on_ranks = rf"raised ValueError: bad value \(rank \d, line {line} of broken: raise ValueError\(message\)\)"
    details = {outcome.detail for outcome in report.outcomes}
    assert details == {expected} or all(re.fullmatch(on_ranks, detail) for detail in details), details
    assert "Traceback" not in repr(report) + report._repr_html_() and "second line" not in repr(report)


# Planted wrong answers: the mistakes each exercise must catch (issue 13 names averaging instead of summing,
# no replica-0 aliasing, tensor_split instead of chunk, gradients sent to the wrong replica).

def _sum_loss_gradients(model, x, y):
    loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
    return list(torch.autograd.grad(loss, list(model.parameters())))


def _first_half_gradients(model, x, y):
    half = max(1, len(x) // 2)
    return list(torch.autograd.grad(examples.loss_fn(model(x[:half]), y[:half]), list(model.parameters())))


def _sizes_of(chunks):
    return [len(chunk) for chunk in chunks]


def _one_thread_for_all(functions, inputs):
    outputs = []
    thread = threading.Thread(target=lambda: outputs.extend(f(x) for f, x in zip(functions, inputs, strict=True)))
    thread.start()
    thread.join()
    return outputs


def _threads_one_at_a_time(functions, inputs):
    outputs = [None] * len(functions)
    for i in range(len(functions)):
        thread = threading.Thread(target=lambda i=i: outputs.__setitem__(i, functions[i](inputs[i])))
        thread.start()
        thread.join()
    return outputs


def _mode_read_when_called(function):
    def wrapper(*args):
        with torch.set_grad_enabled(torch.is_grad_enabled()):
            return function(*args)

    return wrapper


def _always_grad(function):
    def wrapper(*args):
        with torch.enable_grad():
            return function(*args)

    return wrapper


def _cat_promoting(outputs):
    return torch.cat([out.reshape(-1, *out.shape[1:]) if out.dim() else out.reshape(1) for out in outputs])


def _gather_without_namedtuples(outputs):
    first = outputs[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return torch.cat(outputs)
    if isinstance(first, dict):
        return {key: _gather_without_namedtuples([out[key] for out in outputs]) for key in first}
    return tuple(_gather_without_namedtuples(items) for items in zip(*outputs, strict=True))


def _gather_without_none(outputs):
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(outputs)
    if isinstance(first, dict):
        return {key: _gather_without_none([out[key] for out in outputs]) for key in first}
    items = [_gather_without_none(same) for same in zip(*outputs, strict=True)]
    return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)


def _train(divide_by_n: bool = False, zero_grad: bool = True, steps: int | None = None):
    def train_on_devices(model, x, y, n, steps_asked, lr):
        import dpcourse

        dp = dpcourse.DataParallel(model, devices=dpcourse.devices(n))
        for _ in range(steps or steps_asked):
            if zero_grad:
                model.zero_grad()
            (examples.loss_fn(dp(x), y) / (n if divide_by_n else 1)).backward()
            examples.sgd_step(model, lr)
        return model

    return train_on_devices


def _last_layer_gradients(model, x, y):
    """Only the last Linear's weight and bias: the gradients of the others left out."""
    return list(torch.autograd.grad(examples.loss_fn(model(x), y), list(model.parameters())[-2:]))


def _gather_lists_as_tuples(outputs):
    gathered = _gather_without_none(outputs)
    return tuple(gathered) if isinstance(gathered, list) else gathered


def _ring_averaging(tensors, send):
    return [result / len(tensors) for result in SOLUTIONS["ring_all_reduce"](tensors, send)]


def _all_to_all(tensors, send):
    n = len(tensors)
    for r in range(n):  # every rank sends its whole tensor to every other rank
        for other in range(n):
            if other != r:
                send(r, other, tensors[r])
    total = torch.stack(tensors).sum(0)
    return [total.clone() for _ in range(n)]


def _reduce_scatter_only(tensors, send):
    n = len(tensors)
    pieces = [list(t.clone().tensor_split(n)) for t in tensors]
    for step in range(n - 1):
        arrived = [send(r, (r + 1) % n, pieces[r][(r - step) % n]) for r in range(n)]
        for r in range(n):
            pieces[(r + 1) % n][(r - step) % n] += arrived[r]
    return [torch.cat(p) for p in pieces]


def _accumulate(weight: Callable[[int, int, int], float], zero_each_time: bool = False):
    def accumulate_gradients(model, x, y, micro_batch):
        parts = list(zip(x.split(micro_batch), y.split(micro_batch), strict=True))
        for x_k, y_k in parts:
            if zero_each_time:
                model.zero_grad()
            (examples.loss_fn(model(x_k), y_k) * weight(len(x_k), len(x), len(parts))).backward()

    return accumulate_gradients
# Lesson 13's all-reduces run on real ranks, where they travel as source: each mistake is a def, the flags
# of the factories below travel as closure values.

def _through_rank_0(add: bool = True, send_back: bool = True):
    def reduce_then_broadcast(tensor):
        rank, n = dist.get_rank(), dist.get_world_size()
        if rank != 0:
            dist.send(tensor, 0)
            if send_back:
                dist.recv(tensor, 0)
            return
        incoming = torch.empty_like(tensor)
        for source in range(1, n):
            dist.recv(incoming, source)
            if add:
                tensor += incoming
            else:
                tensor.copy_(incoming)
        for other in range(1, n if send_back else 1):
            dist.send(tensor, other)

    return reduce_then_broadcast


def _everyone_to_everyone(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    mine, total = tensor.clone(), tensor.clone()
    requests = [dist.isend(mine, other) for other in range(n) if other != rank]
    for other in range(n):
        if other != rank:
            incoming = torch.empty_like(tensor)
            dist.recv(incoming, other)
            total += incoming
    for request in requests:
        request.wait()
    tensor.copy_(total)


def _calls_all_reduce(tensor):
    dist.all_reduce(tensor)


def _ring(accumulate: bool = True, all_gather: bool = True, direction: int = -1, average: bool = False):
    def ring_all_reduce_on_ranks(tensor):
        rank, n = dist.get_rank(), dist.get_world_size()
        pieces = tensor.view(-1).tensor_split(n)
        for step in range(n - 1):
            arriving = pieces[(rank + direction * (step + 1)) % n]
            incoming = torch.empty_like(arriving)
            request = dist.isend(pieces[(rank + direction * step) % n], (rank + 1) % n)
            dist.recv(incoming, (rank - 1) % n)
            request.wait()
            if accumulate:
                arriving += incoming
            else:
                arriving.copy_(incoming)
        for step in range(n - 1 if all_gather else 0):
            request = dist.isend(pieces[(rank + 1 - step) % n], (rank + 1) % n)
            dist.recv(pieces[(rank - step) % n], (rank - 1) % n)
            request.wait()
        if average:
            tensor /= n

    return ring_all_reduce_on_ranks


def _whole_tensor_around_the_ring(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    travelling = tensor.clone()
    for _ in range(n - 1):
        incoming = torch.empty_like(travelling)
        request = dist.isend(travelling, (rank + 1) % n)
        dist.recv(incoming, (rank - 1) % n)
        request.wait()
        tensor += incoming
        travelling = incoming


def _thread_with(autocast_args: Callable[[], dict]):
    def in_thread_with_autocast(function, x):
        arguments, result = autocast_args(), []

        def work():
            with torch.autocast("cpu", **arguments):
                result.append(function(x))

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        return result[0]

    return in_thread_with_autocast


def _scale_without_reset(scale, found_inf, good_steps, growth_interval):
    if found_inf:
        return scale * 0.5, good_steps
    return (scale * 2.0, 0) if good_steps + 1 == growth_interval else (scale, good_steps + 1)


def _shuffled(samples, rank, world, generator_seed, pad=True):
    """DistributedSampler's recipe, with the shuffle's seed and the padding given: each mistake changes one."""
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(generator_seed)).tolist()
    total = -(-samples // world) * world
    order = (order * world)[:total] if pad else order
    return order[rank:total:world]


def _mean_of_means(means, variances, counts):
    return means.mean(0), variances.mean(0)


def _variances_averaged(means, variances, counts):
    weights = counts[:, None] / counts.sum()
    return (weights * means).sum(0), (weights * variances).sum(0)


def _unbiased(means, variances, counts):
    weights = counts[:, None] / counts.sum()
    mean = (weights * means).sum(0)
    total = counts.sum()
    return mean, (weights * (variances + (means - mean) ** 2)).sum(0) * total / (total - 1)


WRONG: dict[str, dict[str, Callable]] = {
    "full_batch_gradients": {"summed loss": _sum_loss_gradients, "half the batch": _first_half_gradients,
                             "the last layer's parameters only": _last_layer_gradients},
    "chunk_loss_weights": {
        "1/n (the mean of means)": lambda sizes: [1 / len(sizes)] * len(sizes),
        "the sizes themselves": lambda sizes: list(sizes),
        "1/size, each chunk's own mean again": lambda sizes: [1 / size for size in sizes],
        "size / number of chunks": lambda sizes: [size / len(sizes) for size in sizes],
    },
    "chunk_sizes": {
        "tensor_split instead of chunk": lambda batch, n: _sizes_of(torch.arange(batch).tensor_split(n)),
        "always n chunks": lambda batch, n: [math.ceil(batch / n)] * (n - 1) + [batch - math.ceil(batch / n) * (n - 1)],
        "every chunk full, [2, 2, 2] for 5 rows on 4": lambda batch, n: [-(-batch // n)] * -(-batch // -(-batch // n)),
    },
    "scatter_rows": {
        "copies instead of views": lambda x, n: [chunk.clone() for chunk in x.chunk(n)],
        "tensor_split instead of chunk": lambda x, n: list(x.tensor_split(n)),
        "n slices of ceil(rows / n), empty ones kept": lambda x, n: [
            x[i * -(-len(x) // n):(i + 1) * -(-len(x) // n)] for i in range(n)],
    },
    "replicate_parameters": {
        "no replica-0 aliasing": lambda params, n: [[p.clone() for p in params] for _ in range(n)],
        "every replica aliases the originals": lambda params, n: [list(params) for _ in range(n)],
        "detached copies": lambda params, n: [list(params)] + [[p.detach().clone() for p in params]] * (n - 1),
    },
    "replicate_bytes": {
        "n copies instead of n - 1": lambda model, n: n * sum(
            t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]),
        "parameters only": lambda model, n: (n - 1) * sum(p.numel() * p.element_size() for p in model.parameters()),
        "4 bytes per value whatever the dtype": lambda model, n: (n - 1) * 4 * sum(
            t.numel() for t in [*model.parameters(), *model.buffers()]),
    },
    "run_replicas": {
        "a loop in the caller's thread": lambda fs, xs: [f(x) for f, x in zip(fs, xs, strict=True)],
        "one thread for all replicas": _one_thread_for_all,
        "threads one at a time": _threads_one_at_a_time,
        "a thread even for one replica": one_thread_each,
    },
    "in_callers_grad_mode": {
        "mode read when called": _mode_read_when_called,
        "the function unchanged": lambda function: function,
        "grad always on": _always_grad,
    },
    "gather_tensors": {
        "torch.stack": lambda outputs: torch.stack(outputs),
        "cat that promotes the dtype": _cat_promoting,
        "cat without the scalar case": lambda outputs: torch.cat(outputs),
    },
    "gather_structure": {
        "namedtuples become tuples": _gather_without_namedtuples,
        "None not handled": _gather_without_none,
        "lists become tuples": _gather_lists_as_tuples,
    },
    "reduce_add": {
        "averaging instead of summing": lambda grads: [torch.stack(same).mean(0) for same in zip(*grads, strict=True)],
        "replica 0's gradients only": lambda grads: list(grads[0]),
        "the last replica's gradients only": lambda grads: list(grads[-1]),
        "summed over parameters instead of replicas": lambda grads: [torch.stack([g.sum() for g in replica]).sum()
                                                                    for replica in grads],
    },
    "split_gradient": {
        "gradients sent to the wrong replica": lambda grad, sizes: list(grad.split(sizes[::-1]))[::-1],
        "torch.chunk instead of the recorded sizes": lambda grad, sizes: list(grad.chunk(len(sizes))),
        "tensor_split into as many pieces": lambda grad, sizes: list(grad.tensor_split(len(sizes))),
    },
    "sample_weights": {
        "1/B for every sample": lambda batch, n: torch.full((batch,), 1 / batch),
        "n devices instead of n chunks": lambda batch, n: torch.tensor(
            [1 / (n * len(c)) for c in torch.arange(batch).chunk(n) for _ in range(len(c))]),
        "1/b, the chunk means summed": lambda batch, n: torch.tensor(
            [1 / len(c) for c in torch.arange(batch).chunk(n) for _ in range(len(c))]),
    },
    "train_on_devices": {
        "gradients never zeroed": _train(zero_grad=False),
        "loss divided by n (averaging)": _train(divide_by_n=True),
        "one step whatever `steps` says": _train(steps=1),
    },
    "bare_state_dict": {
        "prefix kept": lambda state: dict(state),
        "str.replace removes every 'module.'": lambda state: {k.replace("module.", ""): v for k, v in state.items()},
        "lstrip('module.') strips characters, not a prefix": lambda state: {k.lstrip("module."): v
                                                                           for k, v in state.items()},
    },
    "per_sample_loss": {
        "the per-replica mean": lambda output, target: nn.functional.cross_entropy(output, target),
        "the per-replica sum": lambda output, target: nn.functional.cross_entropy(output, target, reduction="sum"),
        "nll_loss on the raw scores (log_softmax forgotten)": lambda output, target: nn.functional.nll_loss(
            output, target, reduction="none"),
    },
    "bytes_per_step": {
        "n copies instead of n - 1": lambda p, n: {"replicate": n * p, "reduce-add": n * p},
        "reduce-add forgotten": lambda p, n: {"replicate": (n - 1) * p},
        "a ring's volume, 2(n - 1)/n": lambda p, n: {"replicate": (n - 1) * p // n, "reduce-add": (n - 1) * p // n},
    },
    "ring_all_reduce": {
        "everyone sends everything": _all_to_all,
        "reduce-scatter only": _reduce_scatter_only,
        "averages instead of summing": _ring_averaging,
    },
    "distributed_indices": {
        "no padding": lambda batch, rank, world: list(range(rank, batch, world)),
        "contiguous blocks": lambda batch, rank, world: torch.arange(batch).tensor_split(world)[rank].tolist(),
        "padded with the last sample": lambda batch, rank, world: (
            list(range(batch)) + [batch - 1] * (-batch % world))[rank::world],
    },
    "epoch_indices": {
        "set_epoch forgotten": lambda samples, rank, world, epoch, seed: _shuffled(samples, rank, world, seed),
        "a seed per rank": lambda samples, rank, world, epoch, seed: _shuffled(
            samples, rank, world, seed + epoch + rank),
        "no padding": lambda samples, rank, world, epoch, seed: _shuffled(
            samples, rank, world, seed + epoch, pad=False),
        "contiguous blocks": lambda samples, rank, world, epoch, seed: torch.randperm(
            samples, generator=torch.Generator().manual_seed(seed + epoch)).tensor_split(world)[rank].tolist(),
    },
    "global_batch_stats": {
        "mean of means, mean of variances": _mean_of_means,
        "variances averaged, spread of the means left out": _variances_averaged,
        "unbiased variance": _unbiased,
    },
    "scalar_output_shape": {
        "one element per device": lambda batch, n: () if n == 1 else (n,),
        "a 0-d tensor whatever n": lambda batch, n: (),
        "one element per row": lambda batch, n: () if n == 1 else (batch,),
    },
    "loss_weights": {
        "1/K for every micro-batch": lambda sizes: [1 / len(sizes)] * len(sizes),
        "no weight": lambda sizes: [1.0] * len(sizes),
        "1/b_k, the micro-batch's own mean again": lambda sizes: [1 / size for size in sizes],
    },
    "accumulate_gradients": {
        "no weight": _accumulate(lambda rows, total, k: 1.0),
        "1/K, wrong for a short last micro-batch": _accumulate(lambda rows, total, k: 1 / k),
        "zero_grad inside the loop": _accumulate(lambda rows, total, k: rows / total, zero_each_time=True),
    },
    "reduce_then_broadcast": {
        "rank 0 copies instead of adding": _through_rank_0(add=False),
        "the sum never sent back": _through_rank_0(send_back=False),
        "every rank sends to every other": _everyone_to_everyone,
        "dist.all_reduce itself": _calls_all_reduce,
    },
    "ring_all_reduce_on_ranks": {
        "no accumulation (copies the incoming piece)": _ring(accumulate=False),
        "reduce-scatter only": _ring(all_gather=False),
        "pieces counted the wrong way round the ring": _ring(direction=1),
        "averages instead of summing": _ring(average=True),
        "the whole tensor, not divided into pieces": _whole_tensor_around_the_ring,
        "dist.all_reduce itself": _calls_all_reduce,
    },
    "in_thread_with_autocast": {
        "a plain thread": lambda function, x: precision.in_plain_thread(function, x),
        "the enabled flag only, as torch's worker": lambda function, x: precision.in_torch_style_worker(function, x),
        "in the caller's thread": lambda function, x: function(x),
        "autocast always on": _thread_with(lambda: {"enabled": True}),
    },
    "next_scale": {
        "the count not reset after an overflow": _scale_without_reset,
        "grows one step late": lambda scale, inf, good, interval: (
            (scale * 0.5, 0) if inf else (scale * 2.0, 0) if good == interval else (scale, good + 1)),
        "grows after every good step": lambda scale, inf, good, interval: (scale * 0.5, 0) if inf else (scale * 2.0, 0),
    },
    "after_forwards": {
        "both counters survive": lambda k, n: (k, k),
        "both counters lost": lambda k, n: (k, k) if n == 1 else (0, 0),
        "a buffer counted once per replica": lambda k, n: (k if n == 1 else 0, k * n),
    },
    "optimizer_state_bytes": {
        "Adam keeps one buffer, like momentum": lambda params, opt: (opt != "SGD") * _bytes(params),
        "Adam's step counters forgotten": lambda params, opt: {"SGD": 0, "SGD with momentum": 1, "Adam": 2}[opt]
        * _bytes(params),
        "momentum counted for plain SGD too": lambda params, opt: (2 if opt == "Adam" else 1) * _bytes(params)
        + 4 * len(params) * (opt == "Adam"),
        "4 bytes per value whatever the dtype": lambda params, opt: {"SGD": 0, "SGD with momentum": 1, "Adam": 2}[opt]
        * 4 * sum(p.numel() for p in params) + 4 * len(params) * (opt == "Adam"),
    },
    "device0_surplus": {
        "everything one device holds": lambda one: sum(one.values()),
        "the outputs and loss forgotten": lambda one: one["gradients"] + one["optimizer state"],
        "the optimizer state only": lambda one: one["optimizer state"],
        "the outputs and loss only": lambda one: one["outputs and loss"],
    },
}


def _bytes(parameters) -> int:
    return sum(p.numel() * p.element_size() for p in parameters)


# Part III's exercises run on ranks, so their planted mistakes live beside their lessons' other tests (where the
# ranks can import them by name), each checked for the message it gets: tests/test_zero1.py and the others.
PART_III_TESTS = ("tests.test_zero1", "tests.test_zero2", "tests.test_zero3", "tests.test_fsdp2")
# Part IV's: in each lesson's mechanism tests.
PART_IV_TESTS = tuple(f"tests.test_exercise_mechanisms_{number}" for number in range(22, 27))
# The end-of-lesson exercises' planted mistakes come with the words their messages must hold.
END_OF_LESSON_TESTS = ("tests.test_end_of_lesson_exercises",)


def test_every_exercise_has_three_or_more_planted_wrong_answers() -> None:
    planted = {name: list(mistakes) for name, mistakes in WRONG.items()}
    # imported here: Part III's import this module when collected
    for module in PART_III_TESTS + PART_IV_TESTS + END_OF_LESSON_TESTS:
        planted.update({name: list(mistakes) for name, mistakes in importlib.import_module(module).MISTAKES.items()})
    assert set(planted) == set(NAMES), f"without planted mistakes: {sorted(set(NAMES) - set(planted))}"
    few = {name: len(planted[name]) for name in NAMES if len(planted[name]) < 3}
    assert not few, f"exercises with fewer than 3 planted mistakes: {few}"


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in WRONG for mistake in WRONG[name]])
def test_a_planted_wrong_answer_fails(name: str, mistake: str) -> None:
    report = exercises.check(name, WRONG[name][mistake])
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    assert "Traceback" not in repr(report)


def test_check_names_the_known_exercises_for_an_unknown_name() -> None:
    with pytest.raises(KeyError, match="chunk_sizes"):
        exercises.check("chunk_size", lambda batch, n: [])


def test_a_case_gets_fresh_arguments_every_check() -> None:
    def trains_in_place(model, x, y, n, steps, lr):
        return SOLUTIONS["train_on_devices"](model, x, y, n, steps, lr)

    assert run(registry.EXERCISES["train_on_devices"], trains_in_place).passed
    assert run(registry.EXERCISES["train_on_devices"], trains_in_place).passed


CHUNK_SIZES_MISTAKES = {
    # The learner walkthrough's: chunks of ceil(batch / n) until they cover the batch, [2, 2, 2] for 5 rows on 4.
    "every chunk full": lambda batch, n: [-(-batch // n)] * -(-batch // -(-batch // n)),
    "numpy's array_split rule": lambda batch, n: [batch // n + (i < batch % n) for i in range(n)],
    "floor division, rest on the last": lambda batch, n: [batch // n] * (n - 1) + [batch - (n - 1) * (batch // n)],
    "one chunk per device, empty ones kept": lambda batch, n: [len(c) for c in torch.arange(batch).tensor_split(n)],
}


@pytest.mark.parametrize("mistake", CHUNK_SIZES_MISTAKES)
def test_chunk_sizes_rejects_plausible_mistakes_and_says_which_rule_broke(mistake):
    report = exercises.check("chunk_sizes", CHUNK_SIZES_MISTAKES[mistake])
    assert report.status == FAILED
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert any(hint in detail for detail in failed for hint in ("rows in all", "an empty chunk", "ceil("))


def test_chunk_sizes_tries_every_batch_up_to_24_on_up_to_8_devices():
    report = exercises.check("chunk_sizes", lambda batch, n: [len(c) for c in torch.arange(batch).chunk(n)])
    assert report.passed and report.outcomes[-1].case.description == "192 generated cases"
    wrong_only_for_5_on_4 = lambda batch, n: [2, 2, 2] if (batch, n) == (5, 4) else [  # noqa: E731
        len(c) for c in torch.arange(batch).chunk(n)]
    report = exercises.check("chunk_sizes", wrong_only_for_5_on_4)
    assert report.outcomes[-1].case.description == "generated: 5 rows on 4 devices"
    assert "6 rows in all, but the batch has 5" in report.outcomes[-1].detail
