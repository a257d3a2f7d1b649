"""Checkpoints under DDP: rank 0 writes, a barrier, then every rank reads with ``map_location``.

The ranks' weights are equal (lesson 10), so one copy is enough: rank 0 saves ``ddp_model.module.state_dict()``
(no ``module.`` prefix, lesson 07). Two things can go wrong, and ``checkpoints()`` shows both on real ranks:

* **No barrier.** A rank that reads before rank 0 has finished writing gets the *previous* checkpoint (or no
  file). Loaded into a model already wrapped in DDP, the stale weights stay: DDP copies rank 0's weights only
  in its constructor, so the ranks train different models from then on, and nothing says so. The demo forces
  the unlucky order with a message (rank 0 writes only after the others have read), so it shows every time.
* **No** ``map_location``. ``torch.load`` puts every tensor back on the device it was saved from
  (``torch/serialization.py``: ``default_restore_location``): on GPUs, rank 0's ``cuda:0``, for every rank.
  ``map_location=device`` puts it on the reading rank's own device.

Saving on every rank writes the same bytes once per rank: the PyTorch DDP tutorial saves on one rank to reduce
"write overhead", and adds the barrier so that no rank loads "before the saving is finished".
"""

import dataclasses
import hashlib
import io
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from ...examples import flat_weights, make_model, max_difference, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..per_rank import shard, wrap


def _train(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int, batch: int = 8) -> None:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    x, y = regression_batch(steps * batch)
    for step in range(steps):
        mine = [step * batch + i for i in shard(batch, rank, world)]
        optimizer.zero_grad()
        regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)).backward()
        optimizer.step()


def _saved_on(path: Path) -> list[str]:
    """The devices the file's tensors were saved from: what ``torch.load`` restores them to by default."""
    locations = set()

    def record(storage, location):
        locations.add(location)
        return storage

    torch.load(path, map_location=record)
    return sorted(locations)


def _checkpoint(folder: str, steps: int) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    ddp_model = wrap(make_model(), here)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    stale, fresh = Path(folder, "no-barrier.pt"), Path(folder, "barrier.pt")
    if rank == 0:
        torch.save({"step": 0, "model": ddp_model.module.state_dict()}, stale)  # the previous checkpoint
    dist.barrier()
    _train(ddp_model, optimizer, steps)
    trained = flat_weights(ddp_model.module)
    checkpoint = {"step": steps, "model": ddp_model.module.state_dict()}

    flag = torch.zeros(1)
    if rank == 0:  # no barrier: rank 0 writes after the others have read (forced here, by chance in real life)
        for other in range(1, world):
            dist.recv(flag, src=other)
        torch.save(checkpoint, stale)
    without_barrier = torch.load(stale, map_location=here)
    if rank != 0:
        dist.send(flag, dst=0)

    if rank == 0:  # the recipe
        torch.save(checkpoint, fresh)
    dist.barrier()
    with_barrier = torch.load(fresh, map_location=here)

    written = io.BytesIO()  # what saving on every rank would write, on every rank
    torch.save(checkpoint, written)

    ddp_model.module.load_state_dict(without_barrier["model"])  # resume the wrapped model from what was read
    resumed = flat_weights(ddp_model.module)
    _train(ddp_model, optimizer, 1)
    return {
        "trained": trained,
        "without_barrier": {"step": without_barrier["step"], "weights": resumed,
                            "after_one_more_step": flat_weights(ddp_model.module)},
        "with_barrier": {"step": with_barrier["step"], "weights": _flat(with_barrier["model"])},
        "saved_on": _saved_on(fresh),
        "loaded_on": str(next(iter(with_barrier["model"].values())).device),
        "every_rank_file": {"bytes": written.tell(), "sha256": hashlib.sha256(written.getvalue()).hexdigest()},
    }


def _flat(state_dict: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in state_dict.values()]).cpu()


@dataclasses.dataclass
class Checkpoints:
    """What each rank read and loaded, without and with the barrier, and what saving on every rank writes."""

    ranks: list[dict]

    def read_steps(self, how: str) -> list[int]:
        """The training step of the checkpoint each rank read; ``how`` is "without_barrier" or "with_barrier"."""
        return [r[how]["step"] for r in self.ranks]

    def diff_to_rank0(self, how: str, weights: str = "weights") -> list[float]:
        """Per rank: max |loaded weights - rank 0's loaded weights|."""
        return [max_difference(r[how][weights], self.ranks[0][how][weights]) for r in self.ranks]

    def __str__(self) -> str:
        trained = self.ranks[0]["trained"]
        files = [r["every_rank_file"] for r in self.ranks]
        lines = [
            f"the checkpoint: {self.ranks[0]['with_barrier']['step']} steps of training, saved by rank 0",
            f"without the barrier: step read per rank {self.read_steps('without_barrier')}, "
            f"max |w - rank 0's| per rank {[round(d, 4) for d in self.diff_to_rank0('without_barrier')]}",
            f"  one more DDP step later:  max |w - rank 0's| per rank "
            f"{[round(d, 4) for d in self.diff_to_rank0('without_barrier', 'after_one_more_step')]}",
            f"with the barrier:    step read per rank {self.read_steps('with_barrier')}, "
            f"max |w - trained weights| per rank "
            f"{[max_difference(r['with_barrier']['weights'], trained) for r in self.ranks]}",
            f"tensors saved on {self.ranks[0]['saved_on']}; loaded with map_location=<the rank's device> on "
            f"{[r['loaded_on'] for r in self.ranks]}",
            f"saving on every rank: {len(files)} writes of {files[0]['bytes']} bytes, all the same bytes: "
            f"{len({f['sha256'] for f in files}) == 1}",
        ]
        return "\n".join(lines)


def checkpoints(world_size: int = 2, steps: int = 2) -> Checkpoints:
    """Train ``steps`` DDP steps, checkpoint without and with a barrier, and report what each rank read."""
    with tempfile.TemporaryDirectory(prefix="dpcourse-checkpoint-") as folder:
        return Checkpoints(launch(_checkpoint, world_size, (folder, steps)))
