"""Lesson 21 in one start of the ranks: FSDP2, DDP with Adam, and DDP with ZeroRedundancyOptimizer, side by side.

Starting ranks costs seconds, so ``tour_program`` runs everything lesson 21 shows in one ``train_on_ranks`` call.
Each part trains its own copy of the seeded model on the same batches:

* ``fsdp2``: ``fully_shard`` per layer, ``reshard_after_forward=True``; saved with DCP before its last step;
* ``kept``: the same with ``reshard_after_forward=False``;
* ``one_unit``: ``fully_shard`` on the root only;
* ``mixed``: one step under a bfloat16 ``MixedPrecisionPolicy``;
* ``ddp`` and ``zero``: DDP with a plain Adam, and with ``ZeroRedundancyOptimizer(Adam)``.

The program returns FSDP2's full parameters as ``parameters`` (what ``train_on_ranks`` compares), the rest
by part.
"""

import copy
from pathlib import Path

from torch import nn

from .. import ranks
from . import checkpoint_sharded, fsdp2, zero_optimizer

WORLD_SIZE = 3  # the course's model's last layer has 4 rows: on 3 ranks, chunks of 2, 2 and 0
STEPS = 4  # the checkpoint is written after step 3, and step 4 runs again after loading it


def tour_program(model: nn.Module, batches: list, lr: float, directory: str) -> dict:
    """Every part above, on copies of ``model``. The FSDP2 run is saved to ``directory`` (a sharded checkpoint)
    before its last step, so that a resumed run can be compared with it."""
    untouched = copy.deepcopy(model)
    parts = {
        "kept": fsdp2.fsdp2_program(copy.deepcopy(untouched), batches, lr, reshard_after_forward=False),
        "one_unit": fsdp2.fsdp2_program(copy.deepcopy(untouched), batches, lr, per_layer=False),
        "mixed": fsdp2.mixed_precision_step(copy.deepcopy(untouched), *batches[0]),
        "ddp": zero_optimizer.ddp_adam_program(copy.deepcopy(untouched), batches, lr),
        "zero": zero_optimizer.zero_program(copy.deepcopy(untouched), batches, lr),
    }

    def save_then_last_step(model: nn.Module, optimizer) -> dict:
        checkpoint_sharded.save(model, optimizer, directory)
        keys = checkpoint_sharded.full_state_dict_keys(model)
        fsdp2.watched_step(model, optimizer, *batches[-1])
        return {"full_state_dict_keys": keys}

    return {**fsdp2.fsdp2_program(model, batches[:-1], lr, then=save_then_last_step), **parts}


def tour(directory: str | Path, world_size: int = WORLD_SIZE, steps: int = STEPS) -> list[dict]:
    """``tour_program`` on ``world_size`` ranks, ``steps`` steps of the course's data; per rank, its results."""
    return ranks.train_on_ranks(tour_program, world_size, steps=steps, extra={"directory": str(directory)})


def resume(directory: str | Path, world_size: int = 2, steps: int = STEPS) -> list[dict]:
    """Load the tour's checkpoint on ``world_size`` ranks and train its last step (``resume_program``)."""
    return ranks.train_on_ranks(checkpoint_sharded.resume_program, world_size, steps=steps,
                                extra={"directory": str(directory), "trained": steps - 1})


def runs(results: list[dict], part: str) -> list[dict]:
    """One part's results on every rank, in the shape ``ranks.first_difference`` reads."""
    return [result[part] for result in results]


def mixed_precision_program(model: nn.Module, batches: list, lr: float) -> dict:
    """``fsdp2.mixed_precision_step`` on the first batch, as a ``train_on_ranks`` program (no optimizer step)."""
    dtypes = fsdp2.mixed_precision_step(model, *batches[0])
    return {"parameters": [p.full_tensor() for p in model.parameters()], "dtypes": dtypes}


def mixed_precision(world_size: int = 2) -> dict[str, str]:
    """The dtypes rank 0 saw in one FSDP2 step under a bfloat16 ``MixedPrecisionPolicy`` (``mixed_precision_step``)."""
    return ranks.train_on_ranks(mixed_precision_program, world_size, steps=1)[0]["dtypes"]


def layout_table(results: list[dict]) -> str:
    """One line per parameter: its full shape, placements and each rank's local shape."""
    lines = [f"{'parameter':<10}{'full shape':>12}   {'placements':<20}" + "".join(
        f"{f'rank {rank}':>10}" for rank in range(len(results)))]
    for index, first in enumerate(results[0]["layout"]):
        shapes = "".join(f"{str(result['layout'][index]['local']):>10}" for result in results)
        lines.append(f"{first['name']:<10}{str(first['shape']):>12}   {first['placements']:<20}{shapes}")
    return "\n".join(lines)


def collectives_line(step: dict, parts: tuple[str, ...] = ("forward", "backward")) -> str:
    """A watched step's collectives in each of ``parts``, with FSDP2's names shortened (all_gather_single: AG)."""
    short = {"all_gather": "AG", "reduce_scatter": "RS", "all_reduce": "AR"}

    def names(calls: list[str]) -> str:
        return " ".join(next((v for k, v in short.items() if call.startswith(k)), call) for call in calls) or "-"

    return " | ".join(f"{part}: {names(step[part])}" for part in parts)
