"""Memory per rank under the ZeRO stages, counted in each rank's own process with torch's implementations.

    stage    what runs on each rank
    DDP      ``DistributedDataParallel`` and the optimizer (the baseline: nothing sharded)
    ZeRO-1   ``DistributedDataParallel`` and ``torch.distributed.optim.ZeroRedundancyOptimizer``
    FSDP2, no reshard  ``fully_shard(layer, reshard_after_forward=False)`` on every Linear and the model
    ZeRO-3   ``fully_shard(layer, reshard_after_forward=True)`` on every Linear and the model (FSDP2)

FSDP2 replaces each parameter by a ``DTensor`` whose local shard is this rank's piece, all-gathers a layer's full
parameters just before the layer runs (they are then plain tensors registered on the module), and, after the
layer's backward, reduce-scatters its gradients so that each parameter's ``.grad`` is a DTensor shard
(``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``: ``pre_forward``, ``post_backward``). What a rank
holds therefore changes while the step runs; it is counted at its largest, kind by kind, as
``dpcourse.memory.accounting`` does:

* parameters: the shards (after the step) plus the most all-gathered bytes seen, read just before each layer's
  forward and, in backward, after each of its full gradients is accumulated (the layer is still gathered then);
* gradients: the most ``.grad`` bytes seen (shards and full), read at the same moments and at the end of backward;
* optimizer state, activations, outputs and loss, DDP's buckets: as ``dpcourse.ddp.demos.memory`` counts them.

``dpcourse.memory.sharding`` predicts the same numbers from formulas, and says what neither counts.
"""

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor

from dpcourse.ddp.demos.memory import bucket_bytes
from dpcourse.ddp.per_rank import shard, wrap
from dpcourse.examples import loss_fn
from dpcourse.memory.accounting import Breakdown, SavedTensors, device_bytes, state_tensors, storage_bytes
from dpcourse.memory.setup import Setup, make_optimizer, optimizer_class
from dpcourse.ranks.launcher import device, launch
from dpcourse.training_setup import FSDP2_NO_RESHARD

from . import fsdp2

# The kinds that start ranks and are counted here. The paper's ZeRO-2 is not among them (torch has no
# implementation of it); FSDP2 without resharding is (``training_setup.FSDP2_NO_RESHARD``).
KINDS = ("DDP", "ZeRO-1", FSDP2_NO_RESHARD, "ZeRO-3")


class Watched:
    """The most all-gathered parameter bytes and ``.grad`` bytes an FSDP2 model holds during a step.

    ``watch(layer)`` is a forward pre-hook: FSDP2's own pre-forward hook, registered first, has all-gathered the
    layer by then. It also hooks each full parameter's gradient accumulation, the moment before FSDP2
    reduce-scatters it. ``saved`` records what forward saves, less the full parameters (a Linear saves its weight).
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._hooked: set[int] = set()
        self.reset()

    def reset(self) -> None:
        """Start a new step: nothing seen yet, a new recorder of what forward saves."""
        self.gathered, self.gradients, self.saved = 0, 0, SavedTensors(exclude=self.full)

    def full(self) -> list[torch.Tensor]:
        """The parameters all-gathered now: FSDP2 registers them on their layer while it runs."""
        return [p for p in self.model.parameters() if not isinstance(p, DTensor)]

    def look(self, *_: object) -> None:
        self.gathered = max(self.gathered, storage_bytes(self.full()))
        self.gradients = max(self.gradients, storage_bytes(p.grad for p in self.model.parameters()))

    def watch(self, layer: nn.Module, args: object) -> None:
        for parameter in (p for p in layer.parameters() if not isinstance(p, DTensor)):
            if id(parameter) not in self._hooked:  # FSDP2 reuses the full parameter objects from step to step
                self._hooked.add(id(parameter))
                parameter.register_post_accumulate_grad_hook(self.look)
        self.look()


def _build(setup: Setup, here: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, Watched | None]:
    """The model as ``setup.kind`` trains it on this rank, its optimizer, and the watcher of an FSDP2 model."""
    model = setup.model.build().to(here)
    if setup.kind in ("DDP", "ZeRO-1"):
        ddp_model = wrap(model, here, gradient_as_bucket_view=setup.bucket_view)
        if setup.kind == "DDP":
            return ddp_model, make_optimizer(setup.optimizer, ddp_model.parameters()), None
        cls, options = optimizer_class(setup.optimizer)
        return ddp_model, ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=cls, **options), None
    # Each Linear its own unit, then the model (the root, which has no parameters left), as lesson 21 shards it.
    fsdp2.shard_model(model, fsdp2.mesh_of_all_ranks(), reshard_after_forward=setup.kind == "ZeRO-3")
    watched = Watched(model)
    for layer in fsdp2.linear_layers(model):
        layer.register_forward_pre_hook(watched.watch)
    return model, make_optimizer(setup.optimizer, model.parameters()), watched


def own_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that holds this rank's state: ``ZeroRedundancyOptimizer`` keeps a plain one, ``.optim``, over
    the parameters it gave this rank (``torch/distributed/optim/zero_redundancy_optimizer.py``)."""
    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer


def _rank_bytes(setup: Setup) -> dict[str, int]:
    """One setup on this rank: a warm-up of three steps (DDP rebuilds its buckets in the second), one counted."""
    rank, here = dist.get_rank(), device()
    model, optimizer, watched = _build(setup, here)
    x, y = setup.model.batch(setup.batch)
    mine = shard(setup.batch, rank, dist.get_world_size())
    x, y = x[mine].to(here), y[mine].to(here)
    for _ in range(4):
        if watched:
            watched.reset()
        activations = watched.saved if watched else SavedTensors(exclude=model.parameters())
        kept = SavedTensors(exclude=model.parameters())
        with activations:
            output = model(x)
        with kept:
            loss = loss_fn(output, y)
        kept.add(output)
        kept.add(loss)
        loss.backward()
        gradients = storage_bytes(p.grad for p in model.parameters())
        optimizer.step()
        optimizer.zero_grad()
    counted = {"parameters": storage_bytes(model.parameters()), "gradients": gradients,
               "optimizer_state": storage_bytes(state_tensors(own_optimizer(optimizer))),
               "activations": activations.bytes, "outputs_and_loss": kept.bytes}
    if watched:
        counted["parameters"] += watched.gathered
        counted["gradients"] = max(gradients, watched.gradients)
    elif not setup.bucket_view:  # with it, the gradients are the buckets: counted once, as gradients
        counted["all_reduce_buckets"] = bucket_bytes(model)
    return device_bytes(**counted)


def _each_setup(setups: list[Setup]) -> list[dict[str, int]]:
    return [_rank_bytes(setup) for setup in setups]


def measure_sharded(setups: Sequence[Setup], timeout: float = 120.0) -> list[Breakdown]:
    """Each of ``setups`` (``kind`` DDP or a ZeRO stage, all on as many ranks) counted in one launch of the ranks.

    One launch for them all: starting the ranks costs more than a small model's steps. Returns one
    ``Breakdown`` per setup, its ``devices`` the ranks' bytes per category. Ranks use gloo on the CPU unless every
    rank has a GPU of its own (``dpcourse.ranks.backend_for``).
    """
    if not setups:
        raise ValueError("measure_sharded needs at least one Setup(kind='ZeRO-1', devices=2, ...).")
    for setup in setups:
        if setup.kind not in KINDS or setup.devices != setups[0].devices:
            raise ValueError(f"measure_sharded runs one set of ranks: every Setup needs kind in {list(KINDS)} and "
                             f"devices={setups[0].devices}, not {setup}.")
    per_rank = launch(_each_setup, setups[0].devices, (list(setups),), timeout=timeout)
    return [Breakdown(setup, [rank[i] for rank in per_rank], "measured") for i, setup in enumerate(setups)]
