"""DDP's bucketed all-reduce during the backward, on a timeline: which part of the communication hides, which shows.

DDP all-reduces a bucket as soon as the backward has produced all of its gradients, while the backward goes on to
the layers before it (``torch/nn/parallel/distributed.py``; the reducer launches the bucket's all-reduce from the
hook of its last gradient, ``torch/csrc/distributed/c10d/reducer.cpp: Reducer::mark_bucket_ready``). ``timed_steps``
watches that from a comm hook: the hook is handed each bucket when it is ready (the all-reduce starts then), and
the future it returns completes when the all-reduce is over, so one ``then`` callback notes when it finished. The
backward's ``loss.backward()`` returns only once every bucket's all-reduce is done (the reducer waits for them).

The model: ``LAYERS`` layers ``Linear(WIDTH, WIDTH, bias=False)``, each 4 MiB of gradient, one bucket each
(``bucket_cap_mb=4``: a bucket closes once it holds at least 4 MiB). Each layer's backward computes for a
**planted** time, a ``time.sleep`` in a hook on the layer's output gradient, before the layer's own gradients:
the stand-in for a GPU's kernels, which compute while the CPU is free to move messages. On a CPU the real
compute would fight gloo's copies for the same cores, and no overlap could be read honestly on a busy machine.

Times are seconds from the start of ``loss.backward()``. After ``WARMUP`` untimed steps (DDP's first step puts
every gradient in one bucket, and rebuilds the buckets in the order the gradients arrived: ``sharded.ddp_buckets``)
each timed step records every layer's compute, every bucket's all-reduce, when the last gradient was ready
(``compute_end``) and when ``backward()`` returned (``end``): ``end - compute_end`` is the communication that did
not hide.
"""

import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from ..ranks import collective_times
from ..ranks.launcher import device, launch
from .per_rank import wrap

LAYERS, WIDTH = 4, 1024  # 4 layers of 1024 x 1024 float32: 4 MiB of gradient each
LAYER_BYTES = WIDTH * WIDTH * 4
BUCKET_CAP_MB = 4
WARMUP, TIMED = 2, 3
PLANTED = 0.03  # seconds of backward compute planted in each layer by default


def model() -> nn.Sequential:
    """``LAYERS`` layers ``Linear(WIDTH, WIDTH, bias=False)`` in a row, seeded: the same on every rank."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])


def _planted(layer: int, seconds: float, events: dict):
    """A forward hook that makes ``layer``'s backward compute for ``seconds`` (a hook on its output's gradient runs
    before the layer's own backward) and notes when that compute ran."""

    def sleeper(grad: torch.Tensor) -> None:
        started = time.perf_counter()
        time.sleep(seconds)
        events["compute"].append((layer, started - events["origin"], time.perf_counter() - events["origin"]))

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        output.register_hook(sleeper)

    return hook


def _noting_hook(events: dict):
    """A comm hook that all-reduces each bucket's mean as torch's ``allreduce_hook`` does
    (``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``), noting when it started and finished."""

    def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        started = time.perf_counter() - events["origin"]
        buffer = bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(buffer, async_op=True).get_future()

        def finished(done: torch.futures.Future) -> torch.Tensor:
            events["buckets"].append((bucket.index(), buffer.numel() * buffer.element_size(), started,
                                      time.perf_counter() - events["origin"]))
            return done.value()[0]

        return future.then(finished)

    return hook


def timed_steps(backward_compute: float) -> list[dict]:
    """Run on every rank: ``WARMUP + TIMED`` DDP steps with ``backward_compute`` seconds planted in each layer's
    backward; each timed step's ``{"origin", "compute", "buckets", "end"}``, times from ``time.perf_counter``
    (one clock for every process of the machine, so the ranks' times can be put on one timeline)."""
    events: dict = {"origin": 0.0, "compute": [], "buckets": []}
    layers = model()
    for index, layer in enumerate(layers):
        layer.register_forward_hook(_planted(index, backward_compute, events))
    ddp_model = wrap(layers, device(), bucket_cap_mb=BUCKET_CAP_MB)
    ddp_model.register_comm_hook(None, _noting_hook(events))
    x = torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(dist.get_rank())).to(device())
    steps = []
    for step in range(WARMUP + TIMED):
        loss = ddp_model(x).square().mean()
        dist.barrier()  # every rank starts its backward together
        events.update(origin=time.perf_counter(), compute=[], buckets=[])
        loss.backward()
        if step >= WARMUP:
            steps.append({"origin": events["origin"], "compute": sorted(events["compute"]),
                          "buckets": sorted(events["buckets"], key=lambda b: b[2]),
                          "end": time.perf_counter() - events["origin"]})
    return steps


def _on_rank_0_clock(per_rank: list[list[dict]], index: int) -> dict:
    """Timed step ``index`` on rank 0's timeline: every rank's compute, rank 0's buckets and end, and
    ``compute_end``, when the slowest rank's last gradient was ready (no all-reduce can end before it)."""
    origin = per_rank[0][index]["origin"]
    shifted = [[(layer, start + s["origin"] - origin, end + s["origin"] - origin) for layer, start, end in s["compute"]]
               for s in (steps[index] for steps in per_rank)]
    ready = [max(start for _, _, start, _ in steps[index]["buckets"]) + steps[index]["origin"] - origin
             for steps in per_rank]
    return {"compute": shifted, "buckets": per_rank[0][index]["buckets"], "compute_end": max(ready),
            "end": per_rank[0][index]["end"]}


def from_ranks(per_rank: list[list[dict]]) -> dict:
    """The timed step whose backward took the median time, on rank 0's clock (a real step, not a blend), and
    ``"all_reduce"``: the median over rank 0's timed steps of one bucket's all-reduce."""
    steps = [_on_rank_0_clock(per_rank, i) for i in range(len(per_rank[0]))]
    durations = [end - start for step in steps for _, _, start, end in step["buckets"]]
    return {**sorted(steps, key=lambda s: s["end"])[len(steps) // 2], "all_reduce": statistics.median(durations)}


def measure(backward_compute: float = PLANTED, world_size: int = 2, timeout: float = 60.0) -> dict:
    """DDP on ``world_size`` new ranks with ``backward_compute`` seconds planted per layer: ``from_ranks``."""
    return from_ranks(launch(timed_steps, world_size, (backward_compute,), timeout=timeout))


def tail(step: dict) -> float:
    """Seconds of communication the backward did not hide: from its last gradient to ``backward()``'s return."""
    return step["end"] - step["compute_end"]


def communication(step: dict) -> float:
    """Seconds rank 0's all-reduces took, one after another (their sum)."""
    return sum(end - start for _, _, start, end in step["buckets"])


def layer_compute(step: dict) -> float:
    """The median layer's backward compute, over every rank: what the α-β step model takes as compute."""
    return statistics.median(end - start for rank in step["compute"] for _, start, end in rank)


def _lesson_on_this_rank(sizes: list[int], repeats: int, backward_compute: float) -> dict:
    return {"collectives": collective_times.time_on_this_rank(sizes, collective_times.COLLECTIVES, repeats),
            "ddp": timed_steps(backward_compute)}


def lesson_run(sizes: tuple[int, ...] = collective_times.SIZES, repeats: int = 7, backward_compute: float = PLANTED,
               world_size: int = 2, timeout: float = 90.0) -> tuple[list[collective_times.Timing], dict]:
    """Lesson 25's one start of the ranks: the collectives timed at every size (``collective_times``), then the
    DDP steps (``measure``); ``(timings, step)``."""
    per_rank = launch(_lesson_on_this_rank, world_size, (list(sizes), repeats, backward_compute), timeout=timeout)
    return (collective_times.from_ranks([rank["collectives"] for rank in per_rank]),
            from_ranks([rank["ddp"] for rank in per_rank]))
