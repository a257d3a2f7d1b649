"""One DataParallel training step with the primitives called one by one, every intermediate value kept.

``StepThrough`` shows this record stage by stage; computing it all up front is what makes Back/Next instant.
The step is what ``DataParallel`` + ``loss.backward()`` + ``SGD.step()`` do, spelled out:

    run      = by_hand.forward(model, x, devices)       # scatter, replicate, parallel_apply, gather; x only:
                                                        # the labels stay on devices[0]
    loss     = loss_fn(run.gathered, y)                 # one loss over the whole batch
    grads    = autograd.grad(loss, outputs + every replica's parameter copies + the model's parameters)
    SGD(model.parameters(), lr).step()                  # with .grad = the reduce-added gradients (on a twin)

Asking autograd for the copies' gradients as well is how the per-replica parts become visible: the
original's gradient is their sum (``ReduceAdd``, the backward of ``Broadcast``).
"""

import dataclasses

import torch
from torch import nn

from dpcourse import by_hand, examples
from dpcourse.devices import devices as choose_devices
from dpcourse.trace import Trace
from dpcourse.trace import trace as trace_steps

LEARNING_RATE = 0.1

Tensors = dict[str, torch.Tensor]


@dataclasses.dataclass
class StepRecord:
    """Everything one step computed, plus the single-device oracle for each stage."""

    devices: list[torch.device]  # the devices asked for; the first len(chunks) of them run a replica
    model: nn.Module  # the one real model, on devices[0], as the forward saw it
    x: torch.Tensor
    y: torch.Tensor
    chunks: list[torch.Tensor]  # scatter: x's chunk for each replica
    replicas: list[nn.Module]  # replicate
    outputs: list[torch.Tensor]  # parallel_apply
    gathered: torch.Tensor  # gather
    loss: torch.Tensor
    output_grads: list[torch.Tensor]  # backward: d loss / d outputs[i], the gathered gradient split back
    replica_grads: list[Tensors]  # backward: d loss / d replica i's copy of each parameter
    grads: Tensors  # reduce-add: the model's .grad, the sum of replica_grads
    weights_before: Tensors
    weights_after: Tensors  # after the SGD step, taken on a twin so that the stages before still show their values
    single_loss: torch.Tensor  # the oracle: the same step on devices[0] with the whole batch
    single_grads: Tensors
    single_weights_after: Tensors
    trace: Trace  # scatter .. reduce-add, as recorded by dpcourse.trace()

    @property
    def used(self) -> list[torch.device]:
        return self.devices[: len(self.chunks)]


def _weights_after_sgd(model: nn.Module, grads: Tensors, lr: float) -> Tensors:
    """The weights ``examples.sgd_step`` makes from ``grads``, computed on a twin so that ``model`` keeps its own."""
    twin = examples.twin(model)
    for name, p in twin.named_parameters():
        p.grad = grads[name]
    examples.sgd_step(twin, lr)
    return {name: p.detach() for name, p in twin.named_parameters()}


def run_step(n_devices: int, batch: int, lr: float = LEARNING_RATE) -> StepRecord:
    """One training step of the course model (``examples.make_model``) on ``examples.make_batch(batch)``.

    Runs on ``dpcourse.devices(n_devices)``, traced, and the same step on one device as the oracle.
    """
    devices = choose_devices(n_devices)
    model = examples.make_model().to(devices[0])
    single = examples.twin(model)
    x, y = examples.make_batch(batch, device=devices[0])
    names = [name for name, _ in model.named_parameters()]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    with trace_steps() as recorded:
        run = by_hand.forward(model, x, devices)
        loss = examples.loss_fn(run.gathered, y)
        replica_grads, found = run.gradients(loss, names, also=[*run.outputs, *model.parameters()])
    n = len(run.outputs)
    grads = dict(zip(names, found[n:], strict=True))

    single_loss = examples.loss_fn(single(x), y)
    single_loss.backward()
    single_grads = {name: p.grad.clone() for name, p in single.named_parameters()}
    return StepRecord(
        devices=devices, model=model, x=x, y=y, chunks=run.chunks, replicas=run.replicas, outputs=run.outputs,
        gathered=run.gathered.detach(), loss=loss.detach(), output_grads=found[:n], replica_grads=replica_grads,
        grads=grads, weights_before=before, weights_after=_weights_after_sgd(model, grads, lr),
        single_loss=single_loss.detach(), single_grads=single_grads,
        single_weights_after=_weights_after_sgd(single, single_grads, lr), trace=recorded,
    )
