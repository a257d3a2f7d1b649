"""Check a learner's ZeRO-2 on real ranks: same weights as one-device Adam, and a rank never holds every gradient,
nor Adam's state for every parameter.

``train_learners(function, world_size)`` sends the learner's ``train_zero2(model, batches, lr)`` to the ranks as its
source and runs it inside ``watched``, a training program for ``ranks.train_on_ranks``. Before the learner's code
sees the model, ``watched`` puts a hook of its own on every parameter, which runs before any hook the learner
adds to the same parameter (hooks run in the order they were registered). At every gradient it counts the
bytes of every ``.grad`` the rank holds, so it knows the most full gradients held at once during backward. A
global optimizer pre-step hook (``torch/optim/optimizer.py: register_optimizer_step_pre_hook``) counts them again
whenever an optimizer steps, after backward, and collects every optimizer that stepped: afterwards ``watched``
counts the values Adam keeps averages for (``exp_avg``) and the bytes of the memory behind the tensors it steps
(a shard cut from a bucket's padded vector without a copy keeps that whole vector alive), and lists the
parameters still holding a ``.grad``.
``judge`` turns that into the check's verdict.
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .. import examples, ranks
from ..memory import storage_bytes
from ..ranks.by_source import SourceFunction


def watched(model: nn.Module, batches: list, lr: float, learner: SourceFunction) -> dict:
    """Run the learner's program on this rank's ``model`` and ``batches``, and watch its gradients and its
    optimizers (module docstring)."""
    parameters = list(model.parameters())
    most, at_step, stepped, first_squares = [0], [0], [], [0.0]

    def count(param: torch.Tensor) -> None:
        most[0] = max(most[0], storage_bytes(p.grad for p in parameters))

    def before_step(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        at_step[0] = max(at_step[0], storage_bytes(p.grad for p in parameters))
        if not any(o is optimizer for o in stepped):  # its first step: the gradients of training step 1
            stepped.append(optimizer)
            first_squares[0] += sum(float(p.grad.double().square().sum()) for group in optimizer.param_groups
                                    for p in group["params"] if p.grad is not None)

    for p in parameters:
        p.register_post_accumulate_grad_hook(count)
    handle = register_optimizer_step_pre_hook(before_step)
    try:
        returned = learner.rebuild()(model, batches, lr)
    finally:
        handle.remove()
    result = dict(returned) if isinstance(returned, dict) else {"parameters": returned}
    left = [name for name, p in model.named_parameters() if p.grad is not None]
    averaged = sum(state["exp_avg"].numel() for optimizer in stepped for state in optimizer.state.values()
                   if isinstance(state.get("exp_avg"), torch.Tensor))
    behind = storage_bytes(p for optimizer in stepped for group in optimizer.param_groups for p in group["params"])
    return {**result, "most_gradient_bytes": most[0], "gradient_bytes_at_step": at_step[0], "gradients_left": left,
            "all_gradient_bytes": sum(p.numel() * p.element_size() for p in parameters),
            "optimizers_stepped": len(stepped), "adam_values": averaged, "stepped_bytes": behind,
            "first_step_gradient_squares": first_squares[0]}


def train_learners(function: Callable, world_size: int, steps: int = 3, lr: float = 1e-2) -> list[dict]:
    """``function`` trained on ``world_size`` ranks inside ``watched``; per rank what ``train_on_ranks`` returns."""
    return ranks.train_on_ranks(watched, world_size, steps=steps, lr=lr,
                                extra={"learner": SourceFunction.of(function)})


def shard_values(world_size: int) -> int:
    """The most values a rank's shards can hold: a piece of ``ceil(numel / n)`` of every parameter, as with one
    bucket per parameter, the finest buckets and so the most padding. Bigger buckets need fewer."""
    return sum(math.ceil(p.numel() / world_size) for p in examples.mlp(ranks.WIDTHS).parameters())


def judge(case, answer: list[dict]) -> str | None:
    """``None`` if every rank trained as one-device Adam, with a reduce-scatter, holding only some full gradients at
    a time during backward, none when Adam steps and none at the end, and Adam's state and the memory of the
    tensors it steps for its shard only; else the first thing that is not so."""
    names = [name for name, _ in answer[0]["collectives"]]
    if "all_reduce" in names:
        return ("your code called dist.all_reduce: every rank then receives the whole averaged gradient. ZeRO-2 "
                "reduce-scatters it (dist.reduce_scatter), so that each rank receives only its shard")
    for needed, why in (("reduce_scatter", "to give each rank the averaged gradient of its shard"),
                        ("all_gather", "after Adam's step, so that every rank has every updated parameter")):
        if needed not in names:
            return f"your code never called dist.{needed}: ZeRO-2 needs it {why}"
    for rank, result in enumerate(answer):
        everything = result["all_gradient_bytes"]
        if result["gradients_left"]:
            return (f"after training, rank {rank}'s {', '.join(result['gradients_left'])} still hold a .grad: set "
                    "each parameter's .grad to None once its bucket has been reduce-scattered")
        if result["most_gradient_bytes"] >= everything:
            return (f"rank {rank} held every full gradient at once ({everything:,} bytes, as DDP does): "
                    "reduce-scatter a bucket from the hook as soon as its last gradient arrives, and free its "
                    ".grad then, before backward reaches the earlier layers (use more than one bucket)")
        if result["gradient_bytes_at_step"]:
            return (f"rank {rank}'s parameters held {result['gradient_bytes_at_step']:,} bytes of full .grad when "
                    f"the optimizer stepped (the whole model's gradient is {everything:,}): ZeRO-2 never puts the "
                    "full gradients together again. Adam steps this rank's shards, each with its reduce-scattered "
                    "gradient as .grad")
        if not result["optimizers_stepped"]:
            return "your code never stepped a torch.optim optimizer: train this rank's shards with torch.optim.Adam"
        most = shard_values(len(answer))
        if result["adam_values"] > most:
            return (f"rank {rank}'s Adam keeps exp_avg and exp_avg_sq for {result['adam_values']} values each, the "
                    f"model has {ranks.parameter_count()}: DDP's optimizer state. A ZeRO-2 rank keeps Adam's state "
                    f"for its shard only (at most {most} values on {len(answer)} ranks): build torch.optim.Adam "
                    "over this rank's shards only, not over the whole model")
        if result["stepped_bytes"] > 4 * most:  # float32
            return (f"rank {rank}'s Adam steps tensors that keep {result['stepped_bytes']:,} bytes of memory alive "
                    f"(the whole model's parameters are {everything:,}); this rank's shards need at most "
                    f"{4 * most:,}. A piece of a bucket's padded vector (.chunk(n)[rank]) is a view that keeps the "
                    "whole vector: .clone() it, so that the rank keeps only its shard")
    training = case.context["training"]
    return (_averaged_gradient_difference(answer, ranks.first_gradient_square_sum(**training))
            or ranks.first_difference(answer, ranks.one_device(**training)))


def _averaged_gradient_difference(answer: list[dict], expected: float) -> str | None:
    """Adam's update hardly depends on the gradient's scale, so a gradient summed over the ranks instead of averaged
    trains within a few 1e-6 of one device. The gradients Adam steps with do not hide it: on the first step, every
    rank's shards together hold one device's averaged gradient, whose sum of squares is ``expected``."""
    got = sum(result["first_step_gradient_squares"] for result in answer)
    ratio = got / expected
    if abs(ratio - 1) <= 1e-3:
        return None
    n = len(answer)
    why = (f"{n} * {n} = {n * n} times: is the reduce-scattered sum divided by n? Adam hides this mistake in the "
           "weights" if abs(ratio - n * n) <= 1e-2 * n * n else "each rank's Adam should step its shard of the "
           "gradient averaged over every rank's samples, each value once")
    return (f"on the first step, the gradients your ranks' Adam stepped with hold {ratio:.3g} times the squares of "
            f"one device's averaged gradient: {why}")

