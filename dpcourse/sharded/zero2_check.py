"""Check a learner's ZeRO-2 on real ranks: same weights as one-device Adam, and a rank never holds every gradient.

``train_learners(function, world_size)`` sends the learner's ``train_zero2(model, batches, lr)`` to the ranks as its
source and runs it inside ``watched``, a training program for ``ranks.train_on_ranks``. Before the learner's code
sees the model, ``watched`` puts a hook of its own on every parameter, which runs before any hook the learner
adds to the same parameter (hooks run in the order they were registered). At every gradient it counts the
bytes of every ``.grad`` the rank holds, so it knows the most full gradients held at once, and after training
it lists the parameters still holding a ``.grad``. ``judge`` turns that into the check's verdict.
"""

from collections.abc import Callable

import torch
from torch import nn

from ..ddp.processes.by_source import SourceFunction
from ..memory import storage_bytes
from . import ranks


def watched(model: nn.Module, batches: list, lr: float, learner: SourceFunction) -> dict:
    """Run the learner's program on this rank's ``model`` and ``batches``, and watch its gradients (docstring)."""
    parameters = list(model.parameters())
    most = [0]

    def count(param: torch.Tensor) -> None:
        most[0] = max(most[0], storage_bytes(p.grad for p in parameters))

    for p in parameters:
        p.register_post_accumulate_grad_hook(count)
    returned = learner.rebuild()(model, batches, lr)
    result = dict(returned) if isinstance(returned, dict) else {"parameters": returned}
    left = [name for name, p in model.named_parameters() if p.grad is not None]
    return {**result, "most_gradient_bytes": most[0], "gradients_left": left,
            "all_gradient_bytes": sum(p.numel() * p.element_size() for p in parameters)}


def train_learners(function: Callable, world_size: int, steps: int = 3, lr: float = 1e-2) -> list[dict]:
    """``function`` trained on ``world_size`` ranks inside ``watched``; per rank what ``train_on_ranks`` returns."""
    return ranks.train_on_ranks(watched, world_size, steps=steps, lr=lr,
                                extra={"learner": SourceFunction.of(function)})


def judge(case, answer: list[dict]) -> str | None:
    """``None`` if every rank trained as one-device Adam, with a reduce-scatter, holding only some full gradients at
    a time and none at the end; else the first thing that is not so."""
    names = [name for name, _ in answer[0]["collectives"]]
    if "all_reduce" in names:
        return ("your code called dist.all_reduce: every rank then receives the whole averaged gradient. ZeRO-2 "
                "reduce-scatters it (dist.reduce_scatter), so that each rank receives only its shard")
    for needed, why in (("reduce_scatter", "to give each rank the averaged gradient of its shard"),
                        ("all_gather", "after Adam's step, so that every rank has every updated parameter")):
        if needed not in names:
            return f"your code never called dist.{needed}: ZeRO-2 needs it {why}"
    training = case.context["training"]
    difference = ranks.first_difference(answer, ranks.one_device(**training))
    if difference:
        return difference
    for rank, result in enumerate(answer):
        if result["gradients_left"]:
            return (f"after training, rank {rank}'s {', '.join(result['gradients_left'])} still hold a .grad: set "
                    "each parameter's .grad to None once its bucket has been reduce-scattered")
        if result["most_gradient_bytes"] >= result["all_gradient_bytes"]:
            return (f"rank {rank} held every full gradient at once ({result['all_gradient_bytes']:,} bytes, as DDP "
                    "does): reduce-scatter a bucket from the hook as soon as its last gradient arrives, and free its "
                    ".grad then, before backward reaches the earlier layers (use more than one bucket)")
    return None
