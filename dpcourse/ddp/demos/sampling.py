"""Who trains on which sample: ``DistributedSampler``, ``set_epoch``, and what goes wrong without them.

Every rank runs the same script, so every rank builds the same ``DataLoader``. Nothing in DDP splits the data:
``DistributedSampler`` does, by shuffling the indices with one seed shared by all ranks and giving rank ``r``
every ``world_size``-th index from position ``r`` (``torch/utils/data/distributed.py``, ``__iter__``). Its
shuffle is seeded with ``seed + epoch``, and only ``set_epoch`` changes ``epoch``.

``coverage()`` runs four loaders on real ranks and records the order in which each rank sees the samples:

* ``"no sampler"``: ``DataLoader(shuffle=True)`` seeded the same on every rank, as a single-device script
  is: every rank trains on every sample, in the same order;
* ``"a seed per rank"``: ``DistributedSampler(seed=rank)``: the ranks cut different shuffles, so some samples
  are trained on twice and others never (its docstring: the seed "should be identical across all processes");
* ``"no set_epoch"``: a correct split, but every epoch repeats epoch 0's order;
* ``"set_epoch"``: the recipe, a fresh split of a fresh shuffle every epoch.
"""

import dataclasses
from collections import Counter

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ...ranks.launcher import launch

SETUPS = ("no sampler", "a seed per rank", "no set_epoch", "set_epoch")


def rank_orders(setup: str, samples: int, epochs: int, rank: int | None = None, world: int | None = None,
                batch: int = 3) -> list[list[int]]:
    """The sample indices one rank trains on, in order, for each epoch, with loader ``setup`` (one of ``SETUPS``).

    ``rank`` and ``world`` default to the process group's, as in a DDP script; pass them to compute a rank's
    order without starting any process (``DistributedSampler`` accepts them too).
    """
    if setup not in SETUPS:
        raise ValueError(f"setup must be one of {SETUPS}, not {setup!r}.")
    dataset = TensorDataset(torch.arange(samples))
    same_seed = torch.Generator().manual_seed(0)  # the same on every rank, as a script seeds itself
    sampler = None
    if setup != "no sampler":
        seed = (dist.get_rank() if rank is None else rank) if setup == "a seed per rank" else 0
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=seed)  # None: the group's
    loader = DataLoader(dataset, batch_size=batch, shuffle=sampler is None, sampler=sampler, generator=same_seed)
    orders = []
    for epoch in range(epochs):
        if setup != "no set_epoch" and sampler is not None:
            sampler.set_epoch(epoch)
        orders.append([int(i) for (ids,) in loader for i in ids])
    return orders


def _coverage(samples: int, epochs: int) -> dict[str, list[list[int]]]:
    return {setup: rank_orders(setup, samples, epochs) for setup in SETUPS}


@dataclasses.dataclass
class Coverage:
    """``orders[setup][rank][epoch]``: the samples rank ``rank`` trained on in ``epoch``, in order."""

    samples: int
    orders: dict[str, list[list[list[int]]]]

    def times_trained(self, setup: str, epoch: int) -> list[int]:
        """For each sample, how many ranks trained on it in ``epoch``: 1 is right, 0 is missing, 2 a duplicate."""
        counts = Counter(i for rank in self.orders[setup] for i in rank[epoch])
        return [counts[i] for i in range(self.samples)]

    def repeats_epoch_0(self, setup: str) -> bool:
        """Whether every rank's later epochs repeat its epoch-0 order exactly."""
        return all(order == rank[0] for rank in self.orders[setup] for order in rank[1:])

    def __str__(self) -> str:
        epochs = len(next(iter(self.orders.values()))[0])
        lines = [f"{self.samples} samples, {len(self.orders[SETUPS[0]])} ranks, {epochs} epochs"]
        for setup in self.orders:
            trained = [self.times_trained(setup, epoch) for epoch in range(epochs)]
            steps = [sum(t) for t in trained]
            twice = [sum(n > 1 for n in t) for t in trained]
            never = [t.count(0) for t in trained]
            lines.append(f"{setup:<16} per epoch: {steps} samples trained, {twice} of them twice, "
                         f"{never} never; every epoch repeats epoch 0: {self.repeats_epoch_0(setup)}")
        return "\n".join(lines)


def coverage(samples: int = 12, epochs: int = 2, world_size: int = 2) -> Coverage:
    """Run the four loaders of ``SETUPS`` on ``world_size`` real ranks; return what each rank trained on."""
    ranks = launch(_coverage, world_size, (samples, epochs))
    return Coverage(samples, {setup: [rank[setup] for rank in ranks] for setup in SETUPS})
