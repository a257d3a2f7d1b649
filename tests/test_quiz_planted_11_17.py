"""Lessons 11-17's quiz experiments, each run in a planted world where a wrong answer is true; the experiment
must then measure that wrong answer (``tests/quiz_planting.py``).

Lesson 11's run DataParallel and plant its steps. Lessons 13-17's start real ranks, which costs seconds per
launch: their plants replace what the ranks would have returned (the function the experiment calls, or the
``launch`` inside it), built with the package's own result classes wherever the experiment reads them.
Lesson 10's planted worlds, and some of 15-17's, are in ``tests/test_quiz_ddp_experiments.py``.
"""

import threading
from types import SimpleNamespace

import torch

from dpcourse import accumulation, memory, precision
from dpcourse.data_parallel import DataParallel
from dpcourse.ddp.demos import batchnorm, collectives, compare, pointtopoint, sampling, uneven
from dpcourse.ddp.demos import memory as ddp_memory
from dpcourse.ddp.demos.compression import Compression
from dpcourse.memory import Breakdown
from dpcourse.memory.accounting import device_bytes
from dpcourse.quiz.experiments import lesson14, lesson15, lesson16
from tests.quiz_planting import deep_copies, dropping_the_remainder, even_split, planted, reports, scatter_by


@planted("11-review-nine-rows-scalar")
def test_a_scatter_that_split_evenly_would_gather_4_scalars(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(even_split))  # 9 rows: 3, 2, 2, 2
    reports("11-review-nine-rows-scalar", (4,))


@planted("11-review-buffer-counter")
def test_deep_copied_replicas_would_update_buffers_of_their_own(monkeypatch):
    monkeypatch.setattr(DataParallel, "replicate", deep_copies)
    reports("11-review-buffer-counter", 0)


@planted("11-review-five-rows-output")
def test_a_scatter_that_dropped_the_remainder_would_lose_a_row(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(dropping_the_remainder))
    reports("11-review-five-rows-output", (4, 2))


@planted("13-reduce-others")
def test_a_reduce_that_left_the_other_ranks_alone_would_be_measured_as_unchanged(monkeypatch):
    inputs = [[1], [2], [4]]
    moved = collectives.Moved(
        name="reduce", call="dist.reduce(x, dst=0)", before=inputs, after=[[7], [2], [4]],
        before_from=[[(0,)], [(1,)], [(2,)]], after_from=[[(0, 1, 2)], [(1,)], [(2,)]], defined=[True, False, False],
    )
    monkeypatch.setattr(collectives, "collectives", lambda *args, **kwargs: {"reduce": moved})
    reports("13-reduce-others", "Its own values, unchanged: only rank 0's tensor is written")


@planted("13-send-first")
def test_sends_that_returned_at_once_would_be_measured_as_passing_the_tensors(monkeypatch):
    monkeypatch.setattr(pointtopoint, "pass_right", lambda world_size, **kwargs: [(r - 1) % world_size
                                                                                  for r in range(world_size)])
    reports("13-send-first", "Every rank receives its left neighbour's tensor")


@planted("13-ring-bytes")
def test_a_ring_whose_bytes_grew_with_the_ranks_would_be_measured_as_doubling(monkeypatch):
    def doubling(numels, world_sizes, repeats):
        nbytes = numels[0] * 4
        return compare.Comparison([compare.Run("ring", n, nbytes, [nbytes * n // 2] * n, [nbytes * n // 2] * n, 0.0,
                                               True) for n in world_sizes])

    monkeypatch.setattr(compare, "compare", doubling)
    reports("13-ring-bytes", "They double: each rank exchanges pieces with twice as many ranks")


def weighted_by_share(rule, rows, sizes):
    """``accumulation.weight`` that ignores the rule: every micro-batch's loss weighted by its share of the rows."""
    return rows / sum(sizes)


@planted("14-divide-by-steps")
def test_an_accumulation_that_always_weighted_by_share_would_match_one_device(monkeypatch):
    monkeypatch.setattr(accumulation, "weight", weighted_by_share)
    reports("14-divide-by-steps", "The same: each mean loss already averages its samples")


@planted("14-dp-reduce-adds")
def test_replicas_kept_over_the_micro_steps_and_one_backward_would_reduce_add_once(monkeypatch):
    """A DataParallel with a ``no_sync()`` of sorts: it replicates once and keeps the replicas, and the loop
    backwards the micro-batches' summed losses once; the one ``Broadcast`` then sums once."""
    real = DataParallel.replicate
    kept = {}

    def replicate_once(self, module, devices):
        if id(module) not in kept:
            kept[id(module)] = real(self, module, devices)
        return kept[id(module)]

    def one_backward(model, x, y, micro_batch, rule="b_k/B", loss_of=accumulation.mean_loss):
        parts = accumulation.micro_batches(x, y, micro_batch)
        sizes = [len(x_k) for x_k, _ in parts]
        sum(loss_of(model, x_k, y_k) * accumulation.weight(rule, len(x_k), sizes) for x_k, y_k in parts).backward()
        return sizes

    monkeypatch.setattr(DataParallel, "replicate", replicate_once)
    monkeypatch.setattr(accumulation, "accumulate", one_backward)
    reports("14-dp-reduce-adds", 1)


def ddp_counting(allreduces, difference=0.0):
    """``compare_schedules`` as if each rank's counting hook had seen ``allreduces`` per micro-step."""
    run = SimpleNamespace(allreduces=[allreduces, allreduces], max_diff_to_full_batch=difference)
    return lambda world_size, runs: SimpleNamespace(runs=[run])


@planted("14-no-sync-allreduces")
def test_a_no_sync_that_postponed_every_allreduce_would_count_4(monkeypatch):
    monkeypatch.setattr(lesson14, "compare_schedules", ddp_counting([1, 1, 1, 1]))
    reports("14-no-sync-allreduces", "4: `no_sync()` only postpones them to the end of the block")


@planted("14-forward-outside")
def test_a_no_sync_that_also_covered_forwards_outside_would_count_1(monkeypatch):
    monkeypatch.setattr(lesson14, "compare_schedules", ddp_counting([0, 0, 0, 1]))
    reports("14-forward-outside", "1: the backwards inside `no_sync()` do not all-reduce")


@planted("14-last-partial")
def test_an_accumulation_that_weighted_by_share_would_weigh_every_sample_1_10(monkeypatch):
    monkeypatch.setattr(accumulation, "weight", weighted_by_share)
    reports("14-last-partial", "1/10 each, like every other sample")


@planted("15-adam-state")
def test_an_adam_with_one_running_average_would_keep_as_much_as_the_parameters(monkeypatch):
    real = memory.make_optimizer

    def momentum_for_adam(name, parameters):
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9) if name == "Adam" else real(name, parameters)

    monkeypatch.setattr(memory, "make_optimizer", momentum_for_adam)
    reports("15-adam-state", "As much as the parameters: one running average per parameter, like momentum")


@planted("15-ddp-rank-memory")
def test_ranks_that_split_the_model_would_be_measured_as_holding_half(monkeypatch):
    def split_between_ranks(setups):
        (setup,) = setups
        half = lesson15.MODEL.parameters * 4 // 2
        rank = device_bytes(parameters=half, gradients=half, optimizer_state=2 * half, all_reduce_buckets=half)
        return [Breakdown(setup, [rank, dict(rank)], "measured")]

    monkeypatch.setattr(ddp_memory, "measure_ddp", split_between_ranks)
    reports("15-ddp-rank-memory", "Half as much: DDP splits the parameters and the optimizer state between the ranks")


def in_a_thread_with_the_callers_autocast(function, *args, **kwargs):
    """A thread that starts with its caller's autocast, dtype included (CPU autocast, as the experiments use)."""
    enabled, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    outcome = {}

    def work():
        with torch.autocast("cpu", dtype=dtype, enabled=enabled):
            outcome["result"] = function(*args)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return outcome["result"]


@planted("16-plain-thread")
def test_a_thread_that_inherited_autocast_would_compute_in_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "in_plain_thread", in_a_thread_with_the_callers_autocast)
    reports("16-plain-thread", "bfloat16, like the thread that started it")


@planted("16-enabled-only")
def test_a_worker_given_the_callers_dtype_would_compute_in_float16(monkeypatch):
    monkeypatch.setattr(precision, "in_torch_style_worker", in_a_thread_with_the_callers_autocast)
    reports("16-enabled-only", "float16, the caller's dtype")


@planted("16-overflow-skip")
def test_a_scaler_that_stepped_anyway_would_be_measured_as_stepping(monkeypatch):
    """``GradScaler.step`` that always calls ``optimizer.step()``, overflowed gradients (here NaN) or not."""
    monkeypatch.setattr(torch.amp.GradScaler, "step", lambda self, optimizer, *args, **kwargs: optimizer.step())
    reports("16-overflow-skip", "`optimizer.step()` runs with the infs clipped to the largest float16")


@planted("16-compression-error")
def test_an_fp16_hook_that_rounded_like_bfloat16_would_lose_to_bf16(monkeypatch):
    """The hooks' names swapped: "fp16_compress_hook" rounds the gradient to bfloat16, the bf16 one to float16."""
    exact = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    grads = {
        (1.0, "none"): exact,
        (1.0, "fp16_compress_hook"): exact.to(torch.bfloat16).float(),
        (1.0, "bf16, dpcourse's copy"): exact.half().float(),
    }
    result = Compression(grads, ranks_agree=True, bf16_compress_hook="accepted")
    monkeypatch.setattr(lesson16, "compression", lambda multipliers: result)
    reports("16-compression-error", "bfloat16: it was designed for deep learning")


@planted("17-no-sampler")
def test_ranks_handed_half_of_the_data_each_would_train_12(monkeypatch):
    halves = [[list(range(0, 12, 2))], [list(range(1, 12, 2))]]  # orders[rank][epoch]
    coverage = sampling.Coverage(12, {setup: halves for setup in sampling.SETUPS})
    monkeypatch.setattr(sampling, "coverage", lambda samples, epochs: coverage)
    reports("17-no-sampler", "12: DDP hands each rank half of the data")


@planted("17-set-epoch")
def test_a_sampler_that_reshuffled_by_itself_would_be_measured_as_a_fresh_shuffle(monkeypatch):
    shuffles = [torch.randperm(12, generator=torch.Generator().manual_seed(epoch)).tolist() for epoch in range(3)]
    per_rank = [[order[rank::2] for order in shuffles] for rank in range(2)]  # disjoint halves, new each epoch
    coverage = sampling.Coverage(12, {setup: per_rank for setup in sampling.SETUPS})
    monkeypatch.setattr(sampling, "coverage", lambda samples, epochs: coverage)
    reports("17-set-epoch", "A fresh shuffle: the sampler draws new random numbers every epoch")


@planted("17-uneven-no-join")
def test_ranks_that_finished_their_own_batches_would_be_measured_as_training_alone(monkeypatch):
    def finishes(batches, timeout):
        ranks = [{mode: {"weights": [None] * (n + 1), "error": None, "seconds": 0.1} for mode in uneven.MODES}
                 for n in batches]
        return uneven.Uneven(list(batches), timeout, 4, ranks)

    monkeypatch.setattr(uneven, "uneven", finishes)
    reports("17-uneven-no-join", "Rank 0 trains on it alone and both ranks finish")


@planted("17-global-variance")
def test_a_syncbatchnorm_that_averaged_the_shards_variances_would_give_1(monkeypatch):
    def averaging_ranks(function, world_size, args):
        (shards,) = args
        means = [sum(s) / len(s) for s in shards]
        variances = [sum((v - m) ** 2 for v in s) / len(s) for s, m in zip(shards, means, strict=True)]
        combined = (sum(means) / world_size, sum(variances) / world_size, float(sum(len(s) for s in shards)))
        return [combined] * world_size

    monkeypatch.setattr(batchnorm, "launch", averaging_ranks)
    reports("17-global-variance", 1.0)
