"""Sharded checkpoints: every rank writes its own shards, and any number of ranks can read them back.

    model_state, optimizer_state = get_state_dict(model, optimizer)   # DTensors: this rank's shards
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)

``torch.distributed.checkpoint`` (DCP) writes one file per rank (``__<rank>_0.distcp``) and a ``.metadata`` file
that says which rows of which tensor each file holds (``chunks``). ``dcp.load`` fills a state dict *in place*:
each rank asks for the rows its own shards cover, whatever the number of ranks that saved them, and reads them
from whichever files hold them (``torch/distributed/checkpoint/default_planner.py``). ``set_state_dict`` then
puts them into the model and the optimizer (``torch/distributed/checkpoint/state_dict.py``).

``get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))`` is the
other way out: full tensors, gathered on rank 0 (the other ranks get an empty dict), for ``torch.save``.
"""

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from ..examples import regression_loss
from .fsdp2 import mesh_of_all_ranks, shard_model
from .zero1 import shard_range


def save(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path) -> None:
    """Write the sharded model and optimizer state to ``directory``, every rank its own file; all ranks call it."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(directory))


def load(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str | Path) -> None:
    """Read ``directory`` into the sharded ``model`` and ``optimizer``, each rank its own rows; all ranks call it."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict_keys(model: nn.Module) -> list[str]:
    """The keys of the full (gathered) state dict that this rank receives: all of them on rank 0, none elsewhere."""
    return list(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))


def files(directory: str | Path) -> dict[str, int]:
    """The checkpoint's files and their sizes in bytes."""
    return {path.name: path.stat().st_size for path in sorted(Path(directory).iterdir())}


def saved_rows(directory: str | Path, key: str) -> list[tuple[int, int]]:
    """The rows of ``key`` (``"model.0.weight"``) each saved chunk holds, ``(first, end)``, from the metadata."""
    metadata = dcp.FileSystemReader(str(directory)).read_metadata()
    chunks = metadata.state_dict_metadata[key].chunks
    return sorted((chunk.offsets[0], chunk.offsets[0] + chunk.sizes[0]) for chunk in chunks)


def rows_to_read(rows: int, saved_ranks: int, rank: int, ranks: int) -> list[tuple[int, int, int]]:
    """What rank ``rank`` of ``ranks`` reads to load a dim-0-sharded tensor of ``rows`` rows saved by
    ``saved_ranks`` ranks: ``(saved_rank, first, end)`` for each saved shard that overlaps its own rows, in
    saved-rank order, with the global rows it takes from it. Both shardings follow ``shard_range``."""
    first, end = shard_range(rows, rank, ranks)
    pieces = []
    for saved_rank in range(saved_ranks):
        saved_first, saved_end = shard_range(rows, saved_rank, saved_ranks)
        if max(first, saved_first) < min(end, saved_end):
            pieces.append((saved_rank, max(first, saved_first), min(end, saved_end)))
    return pieces


def resume_program(model: nn.Module, batches: list, lr: float, directory: str, trained: int) -> dict:
    """Shard a model whose weights are all zero, load ``directory`` into it and its Adam, train on the batches
    after the first ``trained``; return the full parameters and this rank's local shapes after loading."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    shard_model(model, mesh_of_all_ranks())
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    load(model, optimizer, directory)
    loaded = [p.full_tensor() for p in model.parameters()]
    for x, y in batches[trained:]:
        optimizer.zero_grad()
        regression_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": [p.full_tensor() for p in model.parameters()], "loaded": loaded,
            "local": [tuple(p.to_local().shape) for p in model.parameters()]}
