"""A snapshot that lets a restarted rank go on exactly where the group was, and the resume that reads it.

A restarted rank starts from ``main()`` with nothing in memory (``restarts``). For its next step to be the step
the dead attempt would have run, bit for bit, it needs back everything that step reads:

* the model's weights (``model.state_dict()``);
* the optimizer's state: Adam's two running averages and its step count per parameter (``optimizer.state_dict()``);
  without them Adam restarts its averages at zero and its bias correction at step 1;
* every random generator the training draws from, **this rank's own**: the course's training program draws
  dropout masks from torch's CPU generator (``torch.get_rng_state()``) and an input augmentation from Python's
  ``random`` (``random.getstate()``), and seeds them per rank, as each rank's dropout must differ. NumPy's
  (``np.random.get_state()``) too, in a program that draws from it (this one does not); a CUDA program's
  ``torch.cuda.get_rng_state_all()``;
* where the data stood: the epoch (the ``DistributedSampler``'s ``set_epoch`` decides its shuffle) and how many
  of that epoch's batches are done, to skip them;
* with fp16 autocast on a GPU, the ``GradScaler``'s ``state_dict()`` (its scale and growth tracker,
  ``torch/amp/grad_scaler.py: GradScaler.state_dict``): a restarted scaler starts again at 65536 and skips the
  steps it needs to come down. This CPU course trains in float32, with no scaler.

Each rank writes its own file (its generators are its own), first to a temporary name and then ``os.replace``:
a rank killed while writing leaves the previous snapshot whole, never half a file.

``restore`` names what ``resume`` gives back, all by default: the lesson drops one at a time to see what it costs.
"""

import os
import random
from pathlib import Path

import torch
import torch.distributed as dist

PARTS = ("model", "optimizer", "rng", "position")


def snapshot(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
             done: int) -> None:
    """Save, for this rank, everything its next step reads: after ``done`` batches of ``epoch``."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
             "position": (epoch, done)}
    path = Path(directory) / f"snapshot-rank-{dist.get_rank()}.pt"
    torch.save(state, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)


def resume(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
           restore: tuple[str, ...] = PARTS) -> tuple[int, int] | None:
    """Load this rank's snapshot into ``model``, ``optimizer`` and the generators; return ``(epoch, done)``, where
    the data stood, or ``None`` when there is no snapshot yet (the first attempt)."""
    if unknown := set(restore) - set(PARTS):
        raise ValueError(f"restore names what to give back, some of {PARTS}; {sorted(unknown)} is not one.")
    path = Path(directory) / f"snapshot-rank-{dist.get_rank()}.pt"
    if not path.exists():
        return None
    state = torch.load(path)  # weights only: tensors, and random.getstate(), a tuple of ints
    if "model" in restore:
        model.load_state_dict(state["model"])
    if "optimizer" in restore:
        optimizer.load_state_dict(state["optimizer"])
    if "rng" in restore:
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
    epoch, done = state["position"]
    return (epoch, done) if "position" in restore else (epoch, 0)
