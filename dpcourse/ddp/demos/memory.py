"""DDP's memory per rank, counted in each rank's own process: ``measure_ranks(setups)``, ``measure_ddp(setups)``.

Every rank holds the whole model, its gradients, the optimizer state and DDP's all-reduce buckets (flat buffers
the size of all gradients, ``torch/csrc/distributed/c10d/reducer.cpp``), and the activations and outputs of its
own shard of the batch. DDP reports its buckets' sizes itself (``_get_ddp_logging_data()["bucket_sizes"]``): the
buckets built at construction, one for every gradient under the defaults. After the first step the reducer rebuilds
them in the order the gradients arrived, which that report does not follow (``sharded.ddp_buckets`` reads the real
ones from a comm hook); every gradient is in exactly one bucket either way, so their bytes in all are the same.
With ``gradient_as_bucket_view=True`` the gradients are views into the buckets, so the two share their memory.
On a GPU each rank also reports ``torch.cuda.max_memory_allocated`` over the counted step, less the memory that
is not the step's (cuBLAS workspaces), as ``dpcourse.memory.cuda_peaks`` does.
"""

import re
from collections.abc import Sequence

import torch
import torch.distributed as dist

from dpcourse.examples import loss_fn
from dpcourse.memory.accounting import Breakdown, SavedTensors, device_bytes, state_tensors, storage_bytes
from dpcourse.memory.setup import Setup, make_optimizer

from ...ranks.launcher import device, launch
from ..per_rank import shard, wrap


def bucket_bytes(ddp_model: torch.nn.Module) -> int:
    """The bytes of DDP's all-reduce buckets in all, as DDP's own logging data reports them.

    That report lists the buckets built at construction, not those the reducer rebuilds after the first step
    (module docstring); the total, every gradient once, is the same for both.
    """
    return sum(int(size) for size in re.findall(r"\d+", str(ddp_model._get_ddp_logging_data()["bucket_sizes"])))


def _rank_bytes(setup: Setup) -> dict:
    """One setup on this rank: its bytes per category, and its CUDA peak on a GPU."""
    rank, here = dist.get_rank(), device()
    model = setup.model.build().to(here)
    parameters = list(model.parameters())
    ddp_model = wrap(model, here, gradient_as_bucket_view=setup.bucket_view)
    optimizer = make_optimizer(setup.optimizer, ddp_model.parameters())
    x, y = setup.model.batch(setup.batch)
    mine = shard(setup.batch, rank, dist.get_world_size())
    x, y = x[mine].to(here), y[mine].to(here)
    other = 0
    # Three warm-up steps, then the counted one. DDP rebuilds its buckets in the second step, and the old ones
    # are freed only in the third: on an H100 the second step peaked 167 MiB (one bucket set) above the others.
    for counted in (False, False, False, True):
        if counted and here.type == "cuda":  # as memory.cuda_peaks: what the allocator holds beyond the step's own
            torch.cuda.synchronize(here)
            own = storage_bytes(t for t in [*parameters, *state_tensors(optimizer), x, y] if t.device == here)
            other = torch.cuda.memory_allocated(here) - own - bucket_bytes(ddp_model)
            torch.cuda.reset_peak_memory_stats(here)
        activations = SavedTensors(exclude=parameters)
        with activations:
            output = ddp_model(x)
        kept = SavedTensors(exclude=parameters)
        with kept:
            loss = loss_fn(output, y)
        kept.add(output)
        kept.add(loss)
        loss.backward()
        gradients = storage_bytes(p.grad for p in parameters)
        optimizer.step()
        optimizer.zero_grad()
    buckets = bucket_bytes(ddp_model)
    if setup.bucket_view:  # the gradients are the buckets: count that memory once, as gradients
        buckets -= gradients
    peak = torch.cuda.max_memory_allocated(here) - other if here.type == "cuda" else None
    counted_bytes = device_bytes(parameters=storage_bytes(parameters), gradients=gradients,
                                 optimizer_state=storage_bytes(state_tensors(optimizer)),
                                 activations=activations.bytes, outputs_and_loss=kept.bytes, all_reduce_buckets=buckets)
    return {"bytes": counted_bytes, "cuda_peak": peak}


def _each_setup(setups: list[Setup]) -> list[dict]:
    return [_rank_bytes(setup) for setup in setups]


def measure_ranks(setups: Sequence[Setup], backend: str | None = None, timeout: float = 120.0) -> list[list[dict]]:
    """Run each of ``setups`` (``kind="DDP"``, all on as many ranks) in one launch of ``setups[0].devices`` ranks.

    Returns, per setup, per rank, ``{"bytes": ..., "cuda_peak": ...}``: ``bytes`` is a dict over
    ``dpcourse.memory.CATEGORIES``, ``cuda_peak`` is ``None`` on the CPU. One launch for them all: starting the
    ranks costs more than a small model's steps. ``backend`` as in ``launch``: NCCL (one GPU per rank) where there
    are enough GPUs, else gloo on the CPU.
    """
    if not setups:
        raise ValueError("measure_ranks needs at least one Setup(kind='DDP', ...).")
    for setup in setups:
        if setup.kind != "DDP" or setup.devices != setups[0].devices:
            raise ValueError(f"measure_ranks runs DDP on one set of ranks: every Setup needs kind='DDP' and "
                             f"devices={setups[0].devices}, not {setup}.")
    per_rank = launch(_each_setup, setups[0].devices, (list(setups),), backend=backend, timeout=timeout)
    return [[rank[i] for rank in per_rank] for i in range(len(setups))]


def measure_ddp(setups: Sequence[Setup]) -> list[Breakdown]:
    """``dpcourse.memory.measure`` for DDP: several setups on as many ranks, counted in one launch of the ranks
    (the costly part), each rank in its own process."""
    return [Breakdown(setup, [rank["bytes"] for rank in ranks], "measured")
            for setup, ranks in zip(setups, measure_ranks(setups), strict=True)]
