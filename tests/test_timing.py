"""dpcourse.timing's training step: what it runs, in which order it reads the clock, and its SGD update."""

import itertools
import time

import pytest
import torch

import dpcourse
from dpcourse import examples
from dpcourse.timing import StepTimes, cuda_seconds, synchronized_clock, timed_step, wall_time


def test_a_timed_step_is_a_plain_training_step_with_sgd():
    model, reference = examples.make_model(), examples.make_model()
    x, y = examples.make_batch(10)
    dp = dpcourse.DataParallel(model, devices=dpcourse.devices(2))
    timed_step(dp, model, x, lambda output: examples.loss_fn(output, y), lr=0.1)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    examples.loss_fn(reference(x), y).backward()
    optimizer.step()
    assert examples.max_weight_difference(model, reference) < 1e-6


def test_the_clock_is_read_between_the_phases():
    model = examples.make_model()
    x, y = examples.make_batch(4)
    ticks = itertools.count()
    times = timed_step(model, model, x, lambda output: examples.loss_fn(output, y), lr=0.1, clock=lambda: next(ticks))
    assert times == StepTimes(0, 1, 1, 1) and (times.forward, times.backward, times.optimizer, times.seconds) == (
        1, 1, 1, 3)
    before = [p.detach().clone() for p in model.parameters()]
    untrained = timed_step(model, model, x, lambda output: output.pow(2).mean(), clock=lambda: next(ticks))
    assert untrained.optimizer == 0 and untrained.seconds == 2  # no lr: no update, and no fourth reading
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    assert all(p.grad is not None for p in model.parameters())  # cleared before the step, not after


def test_the_clock_waits_only_for_gpus():
    assert synchronized_clock([torch.device("cpu")] * 2) is time.perf_counter


@pytest.mark.cuda
def test_cuda_seconds_counts_the_gpu_work_not_only_its_launch():
    torch.cuda.synchronize()
    launched = time.perf_counter()
    torch.cuda._sleep(1_000_000)  # the GPU spins for about a million cycles; the launch returns at once
    launch_seconds = time.perf_counter() - launched
    torch.cuda.synchronize()
    assert cuda_seconds(lambda: torch.cuda._sleep(1_000_000), [0]) > launch_seconds


def test_wall_time_reads_the_clock_it_is_given_around_the_step():
    readings, ran = iter([10.0, 10.25]), []
    sample = wall_time(lambda: ran.append(True), clock=lambda: next(readings))  # a GPU passes synchronized_clock
    assert sample() == 0.25 and ran == [True]
