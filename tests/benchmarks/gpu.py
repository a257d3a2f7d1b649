"""GPU: dpcourse against torch.nn.DataParallel, replicate against a plain copy, and tracing on vs off.

Times come from CUDA events recorded on device 0's current stream around the whole step, after every
GPU has finished earlier work: a GPU runs asynchronously, so a host clock would time the launches only.
On a machine with one GPU, ``[0, 0]`` puts two replicas on it and "device to device" is a copy within
cuda:0 (read and written in the same memory): it says what replicate costs, not what a link does.
"""

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

import dpcourse
from dpcourse.examples.model import MLP
from dpcourse.models_to_time import ModelToTime
from dpcourse.ranks.launcher import launch
from dpcourse.timing import Sample, cuda_seconds, interleaved, wall_time

from .models import batch_size, dp_step, models, tracing_cost, training_step
from .rounds import summary, watched


def cuda_time(step: Callable[[], object]) -> Sample:
    """A ``Sample`` timing one call of ``step`` with CUDA events on device 0, after syncing every GPU."""

    return lambda: cuda_seconds(step, range(torch.cuda.device_count()))


def device_lists() -> list[list[int]]:
    """``[0]``, ``[0, 0]`` and ``[0, 0, 0, 0]`` (replicas sharing one GPU) and, with several GPUs, all of them."""
    count = torch.cuda.device_count()
    return [[0], [0, 0], [0, 0, 0, 0]] + ([list(range(count))] if count > 1 else [])


def versus_torch(
    workload: ModelToTime, batch: int, device_ids: list[int], rounds: int, warmup: int, timer=cuda_time
) -> dict:
    """The same model and batch: plain step, dpcourse.DataParallel and torch.nn.DataParallel, interleaved."""
    devices = [torch.device("cuda", i) for i in device_ids]
    model = workload.mlp.build().to(devices[0])
    steps = {
        "single": training_step(model, model, workload, batch, devices[0]),
        "dpcourse": dp_step(workload, batch, model, devices),
        "torch": training_step(torch.nn.DataParallel(model, device_ids=device_ids), model, workload, batch, devices[0]),
    }
    return watched({name: timer(step) for name, step in steps.items()}, rounds, warmup).report("torch", "vs_torch")


def big_model(layers: int, width: int) -> nn.Sequential:
    """``layers`` Linear(width, width): 6 x 4096 gives 100.7M parameters (403 MB in float32)."""
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def replicate_bandwidth(
    devices: Sequence[torch.device], layers: int, width: int, rounds: int, warmup: int, timer=cuda_time
) -> dict:
    """Bytes per second of ``dpcourse.replicate`` (and torch's) against plain copies of the same bytes.

    Bandwidth counts the bytes that arrive: parameters x (replicas - 1). The ceiling is the better of one
    coalesced copy (all parameters as one flat buffer) and one copy per parameter tensor, into buffers
    allocated beforehand. Within one GPU every byte is also read, so the memory moves twice as much.
    """
    model = big_model(layers, width).to(devices[0])
    params = [p.detach() for p in model.parameters()]
    flat = torch.cat([p.reshape(-1) for p in params])
    flat_targets = [torch.empty_like(flat, device=d) for d in devices[1:]]
    targets = [[torch.empty_like(p, device=d) for p in params] for d in devices[1:]]

    def per_tensor() -> None:
        for per_device in targets:
            for target, p in zip(per_device, params, strict=True):
                target.copy_(p, non_blocking=True)

    steps: dict[str, Callable[[], object]] = {
        "copy coalesced": lambda: [t.copy_(flat, non_blocking=True) for t in flat_targets],
        "copy per tensor": per_tensor,
        "dpcourse.replicate": lambda: dpcourse.replicate(model, devices),
    }
    if all(d.type == "cuda" for d in devices):
        ids = [d.index for d in devices]
        theirs = torch.nn.DataParallel(model, device_ids=ids)
        steps["torch replicate"] = lambda: theirs.replicate(model, ids)
    samples = interleaved({name: timer(step) for name, step in steps.items()}, rounds, warmup).samples
    copied = flat.numel() * flat.element_size() * (len(devices) - 1)
    bandwidth = {name: copied / summary(seconds)["median_ms"] / 1e6 for name, seconds in samples.items()}
    ceiling = max(bandwidth["copy coalesced"], bandwidth["copy per tensor"])
    return {
        "devices": [str(d) for d in devices],
        "parameters": flat.numel(),
        "bytes_copied": copied,
        "steps": {name: summary(seconds) for name, seconds in samples.items()},
        "gb_per_s": bandwidth,
        "share_of_ceiling": bandwidth["dpcourse.replicate"] / ceiling,
        "note": "within one GPU: a device-to-device copy is cuda:0 -> cuda:0" if len(set(devices)) == 1 else "",
    }


def ddp_rank_steps(widths: tuple[int, ...], batch: int, rounds: int, warmup: int, device: str) -> list[float]:
    """One DDP rank's training steps on ``device``, which every rank shares: seconds per step.

    Each rank trains on ``batch / world size`` samples. A barrier before every step lines the ranks up, so the
    slowest rank's time is the step's time. On a GPU the times come from CUDA events.
    """
    on = torch.device(device)
    workload = ModelToTime("ddp", MLP(tuple(widths)))
    model = workload.mlp.build().to(on)
    if on.type == "cuda":
        torch.cuda.set_device(on)
        ddp, timer = nn.parallel.DistributedDataParallel(model, device_ids=[on.index]), cuda_time
    else:
        ddp, timer = nn.parallel.DistributedDataParallel(model), wall_time
    sample = timer(training_step(ddp, model, workload, batch // dist.get_world_size(), on))
    seconds = []
    for round_ in range(warmup + rounds):
        dist.barrier()
        elapsed = sample()
        if round_ >= warmup:
            seconds.append(elapsed)
    return seconds


def ddp_on_one_gpu(workload: ModelToTime, batch: int, rounds: int, warmup: int, ranks: int = 2,
                   device: str = "cuda:0") -> dict:
    """DDP with ``ranks`` processes sharing ``device``, gloo all-reducing the gradients (the course uses NCCL
    only with a GPU per rank, ``launcher.backend_for``).

    Not interleaved with the DataParallel runs: the ranks are processes of their own.
    """
    args = (workload.mlp.widths, batch, rounds, warmup, device)
    per_rank = launch(ddp_rank_steps, ranks, args, backend="gloo", timeout=300)
    slowest = [max(step) for step in zip(*per_rank, strict=True)]
    return {"ranks": ranks, "backend": "gloo", "devices": [device] * ranks, "steps": summary(slowest)}


def run(quick: bool, rounds: int, warmup: int) -> dict:
    """Every GPU measurement, or ``{"skipped": why}`` on a machine without CUDA."""
    if not torch.cuda.is_available():
        print("gpu: skipped, no CUDA device", flush=True)
        return {"skipped": "no CUDA device on this machine"}
    results: dict = {"versus_torch": {}, "tracing": {}, "ddp": {}}
    batch = batch_size(quick)
    for workload in models(quick):
        for ids in device_lists():
            print(f"gpu: {workload.describe()}, batch {batch} on devices {ids}", flush=True)
            results["versus_torch"][f"{workload.label} {ids}"] = versus_torch(workload, batch, ids, rounds, warmup)
        pair = [torch.device("cuda", i) for i in device_lists()[1]]
        results["tracing"][workload.label] = tracing_cost(workload, batch, pair, rounds, warmup, timer=cuda_time)
        print(f"gpu: {workload.label}, DDP with 2 ranks on cuda:0 (gloo)", flush=True)
        ddp = ddp_on_one_gpu(workload, batch, rounds, warmup)
        dp = results["versus_torch"][f"{workload.label} [0, 0]"]["steps"]
        ddp["vs_dp_0_0"] = {name: ddp["steps"]["median_ms"] / dp[name]["median_ms"] for name in ("dpcourse", "torch")}
        results["ddp"][workload.label] = ddp
    count = torch.cuda.device_count()
    pair = [torch.device("cuda", 0), torch.device("cuda", 1 if count > 1 else 0)]
    layers, width = (2, 256) if quick else (6, 4096)
    print(f"gpu: replicate {layers} x Linear({width}, {width}) onto {[str(d) for d in pair]}", flush=True)
    results["replicate"] = replicate_bandwidth(pair, layers, width, rounds, warmup)
    return results
