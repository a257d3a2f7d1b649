"""The training program that lesson 24 kills and resumes: small, but with every state a resume must bring back.

``train(...)`` runs on each rank of a process group (under ``faults.restarts`` or torchrun): DDP over the course's
model 8 -> 15 -> 15 -> 4 with a dropout after each ReLU, Adam, 2 epochs of 64 samples, a ``DistributedSampler``
with ``shuffle=True`` (``set_epoch`` each epoch) and 4 samples per rank per step: 8 steps per epoch, 16 in all.
Randomness everywhere a resume can forget it:

* dropout masks come from torch's CPU generator, an input scale (an augmentation) from Python's ``random``;
  both are seeded per rank (``SEED + rank``), so the two ranks draw differently, as they should;
* the sampler shuffles by ``seed + epoch``: which samples a step gets depends on the epoch and the batch's place.

The batches are sliced from the sampler's own indices, not drawn through a ``DataLoader``: its iterator draws a
seed from the global generator each time it starts (``torch/utils/data/dataloader.py:
_BaseDataLoaderIter.__init__``, ``_base_seed``), one more draw a resumed epoch would have to replay.

``save(directory, model, optimizer, epoch, done)`` runs after every ``EVERY``-th step (a snapshot), with the
position of the next batch: ``done`` batches of ``epoch`` are finished;
``load(directory, model, optimizer)`` runs once, before the first step, and returns ``(epoch, done)`` or ``None``.
With ``kill_step``, rank ``KILLED_RANK`` kills itself with SIGKILL as that step starts (attempt 0 only), as the
kernel's out-of-memory killer would: no ``except``, no ``finally``, no last words. Each finished step is appended
to a log file at once, so what a killed attempt did is still known afterwards (``log_name``).
"""

import json
import os
import random
import signal
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from .. import examples
from ..ddp.per_rank import wrap
from ..ranks import WIDTHS
from .restarts import attempt_number

SEED, LR, DROPOUT = 0, 1e-2, 0.2
SAMPLES, BATCH, EPOCHS = 64, 4, 2  # BATCH samples per rank and step
STEPS_PER_EPOCH = SAMPLES // (2 * BATCH)  # on 2 ranks: 8
EVERY, KILL_STEP, KILLED_RANK = 5, 14, 1  # snapshots after steps 5, 10, 15; rank 1 dies as step 14 starts


def model_with_dropout() -> nn.Sequential:
    """The course's seeded model (``examples.mlp(WIDTHS)``) with a ``Dropout(0.2)`` after each ReLU."""
    layers = []
    for layer in examples.mlp(WIDTHS, SEED):
        layers += [layer, nn.Dropout(DROPOUT)] if isinstance(layer, nn.ReLU) else [layer]
    return nn.Sequential(*layers)


def state_of(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Copies of everything a step reads, to compare a resumed rank with the uninterrupted run at the same step."""
    adam = [value.clone() for state in optimizer.state.values() for value in state.values()]
    return {"model": [p.detach().clone() for p in model.parameters()], "optimizer": adam,
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}


def log_name(lane: str, rank: int) -> str:
    """The file each finished step of ``lane`` on ``rank`` is appended to, in this attempt."""
    return f"log-{lane}-attempt-{attempt_number()}-rank-{rank}.jsonl"


def train(directory: str | Path, lane: str, save: Callable | None = None, load: Callable | None = None,
          kill_step: int | None = None) -> dict:
    """Train ``lane`` on this rank, snapshots in ``directory`` (see the module's docstring); return what it did."""
    rank, directory = dist.get_rank(), Path(directory)
    model = wrap(model_with_dropout(), torch.device("cpu"))  # DDP, as every rank of lesson 17 builds it
    torch.manual_seed(SEED + rank)
    random.seed(SEED + rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler = DistributedSampler(range(SAMPLES), shuffle=True, seed=SEED)
    x_all, y_all = examples.regression_batch(SAMPLES, SEED)
    start = load(str(directory), model, optimizer) if load else None  # a str, as a learner would be given
    record = {"lane": lane, "pid": os.getpid(), "attempt": attempt_number(), "start": start, "states": {},
              "resumed_state": None if start is None else state_of(model, optimizer)}
    first_epoch, done = start or (0, 0)
    step = first_epoch * STEPS_PER_EPOCH + done
    with open(directory / log_name(lane, rank), "a") as log:
        for epoch in range(first_epoch, EPOCHS):
            sampler.set_epoch(epoch)
            order = list(sampler)
            for index in range(done, STEPS_PER_EPOCH):
                step += 1
                if step == kill_step and rank == KILLED_RANK and attempt_number() == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                samples = order[index * BATCH:(index + 1) * BATCH]
                x = x_all[samples] * random.uniform(0.8, 1.2)
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), y_all[samples])
                loss.backward()
                optimizer.step()
                log.write(json.dumps({"step": step, "epoch": epoch, "loss": loss.item(), "samples": samples}) + "\n")
                log.flush()
                if step % EVERY == 0:
                    record["states"][step] = state_of(model, optimizer)
                    if save:  # the position of the next batch: (1, 0) after the last batch of epoch 0
                        save(str(directory), model, optimizer, *divmod(step, STEPS_PER_EPOCH))
            done = 0
    record["parameters"] = [p.detach().clone() for p in model.parameters()]
    return record


def read_log(directory: str | Path, lane: str, attempt: int, rank: int) -> list[dict]:
    """The steps ``lane`` finished on ``rank`` in ``attempt``, in order, from its log (``[]`` if it logged none)."""
    path = Path(directory) / f"log-{lane}-attempt-{attempt}-rank-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
