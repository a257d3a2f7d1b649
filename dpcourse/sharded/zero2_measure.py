"""Lesson 19's measurements: DDP, ZeRO-1 and ZeRO-2 trained on the same ranks, in one launch, and compared.

``compare(world_size)`` starts the ranks once. Each rank runs every program of ``PROGRAMS`` on a fresh copy of the
same model and batches, twice:

1. with torch's collectives: the trained parameters (checked against one-device Adam), the collectives called,
   the gradient bytes held (``zero2.Zero2`` counts them at every hook, ``ddp_by_hand`` at its all-reduce) and
   Adam's state bytes;
2. for one step, with every collective replaced by a ring of point-to-point messages (``rings.ring_collectives``):
   the same arithmetic, but now ``traffic.counted`` sees every byte the rank sends, so the bytes on the wire are
   counted instead of predicted. Every step sends the same bytes.

Then DDP and ZeRO-2 train a deeper model (``DEEP``), for its gradient bytes: the bucket in flight is a constant,
the shard shrinks with the model's share per rank.
"""

import copy
import dataclasses
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .. import examples, ranks
from ..examples import regression_loss
from ..memory import storage_bytes
from ..ranks.traffic import counted
from . import zero1, zero2
from .rings import ring_collectives

DEEP = (8, *[15] * 10, 4)  # 2,359 parameters in 20 tensors: uneven over 2, 3 and 4 ranks too


def ddp_by_hand(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP's arithmetic with one visible all-reduce: the gradients flattened, divided by ``n``, all-reduced, copied
    back; then every rank runs Adam on all the parameters. ``gradient_bytes``: the ``.grad`` tensors and the flat
    buffer, at the all-reduce (DDP's own buckets are flat copies of the gradients too: lesson 15);
    ``held_at_hooks``: the ``.grad`` bytes after each gradient of the first backward, as ``zero2.Zero2`` counts."""
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(parameters, lr=lr)
    held_at_hooks: list[int] = []
    for p in parameters:
        p.register_post_accumulate_grad_hook(lambda _: held_at_hooks.append(storage_bytes(q.grad for q in parameters)))
    first: dict = {}
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(model(x), y).backward()
        gradients = [p.grad for p in parameters]
        flat = parameters_to_vector(gradients).div_(dist.get_world_size())
        first = first or {"after_backward": storage_bytes(gradients), "held_at_hooks": list(held_at_hooks),
                          "gradient_bytes": storage_bytes([*gradients, flat])}
        dist.all_reduce(flat)
        vector_to_parameters(flat, gradients)
        optimizer.step()
    return {"parameters": [p.detach() for p in parameters],
            "state_bytes": storage_bytes(t for s in optimizer.state.values() for t in s.values()), **first}


PROGRAMS: dict[str, Callable[..., dict]] = {"DDP": ddp_by_hand, "ZeRO-1": zero1.zero1_program, "ZeRO-2": zero2.train}
DEEP_PROGRAMS = ("DDP", "ZeRO-2")


def _run(program: Callable[..., dict], model: nn.Module, batches: list, lr: float) -> dict:
    with counted() as calls:
        result = program(copy.deepcopy(model), batches, lr)
    with ring_collectives(), counted() as traffic:  # every step sends the same bytes: one step is enough
        program(copy.deepcopy(model), batches[:1], lr)
    parameters = [p.detach().cpu() for p in result.pop("parameters")]
    return {**result, "parameters": parameters, "collectives": sorted(set(calls.collectives)), "wire": traffic.sent}


def _every_program(model: nn.Module, batches: list, lr: float, programs: dict[str, Callable]) -> dict:
    runs = {name: _run(program, model, batches, lr) for name, program in programs.items()}
    deep = examples.mlp(DEEP).to(next(model.parameters()).device)
    deep_runs = {name: _run(programs[name], deep, batches, lr) for name in DEEP_PROGRAMS}
    return {"parameters": runs["ZeRO-2"]["parameters"], "runs": runs, "deep": deep_runs}


@dataclasses.dataclass
class Comparison:
    """Per rank and program: what ``_run`` measured, for the course's model (``runs``) and the deeper one."""

    world_size: int
    runs: list[dict[str, dict]]
    deep: list[dict[str, dict]]
    differences: dict[str, str | None]  # per program (and "deep <program>"): None, or how it differs from one device
    backend: str

    def ranks_of(self, program: str, key: str, deep: bool = False) -> list:
        """``key`` of ``program`` on every rank, in rank order."""
        return [rank[program][key] for rank in (self.deep if deep else self.runs)]

    def bytes_table(self) -> str:
        """Bytes each rank sent per step, counted with every collective as a ring, and the collectives called."""
        lines = [f"bytes sent per step, rank by rank ({self.world_size} ranks, every collective a ring):"]
        for name in self.runs[0]:
            sent = ", ".join(f"{b:,.0f}" for b in self.ranks_of(name, "wire"))
            lines.append(f"  {name:<7} {sent:<24} collectives: {', '.join(self.runs[0][name]['collectives'])}")
        return "\n".join(lines)

    def memory_table(self) -> str:
        """Gradient bytes per rank: the most at once, and what is left when backward ends; Adam's state."""
        lines = [f"per rank, {self.world_size} ranks: gradient bytes (most at once | at the end of backward), "
                 "Adam's state bytes"]
        for deep, rows in ((False, self.runs[0]), (True, self.deep[0])):
            model = f"{ranks.parameter_count(DEEP if deep else ranks.WIDTHS):,}-parameter model"
            for name in (name for name in rows if "gradient_bytes" in rows[name]):
                peak, end, state = (max(self.ranks_of(name, key, deep)) for key in
                                    ("gradient_bytes", "after_backward", "state_bytes"))
                lines.append(f"  {model}, {name:<7} {peak:>7,} | {end:>7,}   {state:>7,}")
        return "\n".join(lines)


def compare(world_size: int = 3, steps: int = 3, lr: float = 1e-2,
            programs: dict[str, Callable[..., dict]] | None = None) -> Comparison:
    """Start ``world_size`` ranks once and measure every program of ``programs`` (default ``PROGRAMS``) there."""
    programs = dict(programs or PROGRAMS)
    results = ranks.train_on_ranks(_every_program, world_size, steps=steps, lr=lr, extra={"programs": programs})
    expected = {False: ranks.one_device(steps, lr), True: ranks.one_device(steps, lr, widths=DEEP)}
    differences = {}
    for deep, key in ((False, "runs"), (True, "deep")):
        for name in results[0][key]:
            trained = [{"parameters": rank[key][name]["parameters"]} for rank in results]
            widths = DEEP if deep else ranks.WIDTHS
            differences[f"deep {name}" if deep else name] = ranks.first_difference(trained, expected[deep], widths)
    return Comparison(world_size, [r["runs"] for r in results], [r["deep"] for r in results], differences,
                      results[0]["backend"])
