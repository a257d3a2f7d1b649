"""Count what one training step really holds on each device, from the tensors torch keeps.

``measure(setup)`` builds the model, runs a warm-up step (so that the optimizer state exists, as in every later
step) and then one step in which it counts, per device:

* parameters, gradients and optimizer state: the bytes of the tensors themselves (``storage_bytes``);
* activations and what the loss keeps: ``SavedTensors``, a ``saved_tensors_hooks`` recorder, entered in each
  replica's own thread (the hooks are per thread);
* under DataParallel, each replica's gradients at the moment they reach the sum, from a hook on the backward
  node of the ``Broadcast`` that made the replicas' parameters (``torch/nn/parallel/_functions.py``).

DataParallel is dpcourse's own, run unchanged: ``CountingDataParallel`` only overrides ``replicate`` and
``parallel_apply`` to watch them, as torch's DataParallel lets a subclass do. DDP runs in real processes
(``dpcourse.ddp.memory``).
"""

import weakref
from collections.abc import Sequence

import torch
from torch import nn

from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.replicate import tensor_at

from ..examples import loss_fn
from .accounting import Breakdown, SavedTensors, device_bytes, state_tensors, storage_bytes
from .workload import Setup, make_optimizer


class _Counted(nn.Module):
    """A replica whose forward runs inside its recorder, in the replica's own thread."""

    def __init__(self, replica: nn.Module, recorder: SavedTensors) -> None:
        super().__init__()
        self.replica, self.recorder = replica, recorder

    def forward(self, *args: object) -> object:
        with self.recorder:
            return self.replica(*args)


class CountingDataParallel(DataParallel):
    """``dpcourse.DataParallel`` that counts, per replica, its parameter copies, saved tensors and gradients.

    After a backward: ``copies[j]`` bytes of replica j's parameters (replica 0's are the model's own tensors),
    ``saved[j].bytes`` what replica j's forward saved, ``gradients[j]`` replica j's gradients when they reached
    the sum, and ``copies_alive`` how many parameter copies of replicas 1.. still existed at that moment. On one
    device DataParallel calls the module itself, and the lists stay empty.
    """

    def __init__(self, module: nn.Module, devices: Sequence[torch.device]) -> None:
        super().__init__(module, devices)
        self.copies: list[int] = []
        self.saved: list[SavedTensors] = []
        self.gradients: list[int] = []
        self.copies_alive: int | None = None

    def replicate(self, module: nn.Module, devices: list[torch.device]) -> list[nn.Module]:
        replicas = super().replicate(module, devices)
        names = [name for name, _ in module.named_parameters()]
        copies = [[tensor_at(replica, name) for name in names] for replica in replicas]
        self.copies = [storage_bytes(tensors) for tensors in copies]
        self.saved = [SavedTensors(exclude=tensors) for tensors in copies]
        alive = [weakref.ref(t) for tensors in copies[1:] for t in tensors]  # weak: counting must not keep them
        n, count = len(names), len(replicas)  # the hook below must not hold the replicas themselves

        def arrived(grad_outputs: Sequence[torch.Tensor | None]) -> None:
            self.gradients = [storage_bytes(grad_outputs[j * n : (j + 1) * n]) for j in range(count)]
            self.copies_alive = sum(ref() is not None for ref in alive)

        # One Broadcast made every copy; its backward receives all replicas' gradients and sums them.
        if len(replicas) > 1:
            copies[-1][0].grad_fn.register_prehook(arrived)
        return replicas

    def parallel_apply(self, replicas: list[nn.Module], inputs: tuple, kwargs: tuple) -> list[object]:
        counted = [_Counted(replica, recorder) for replica, recorder in zip(replicas, self.saved, strict=True)]
        return super().parallel_apply(counted, inputs, kwargs)


def _kept_by_loss(output: torch.Tensor, target: torch.Tensor, parameters: list[torch.Tensor]):
    """The loss, and a recorder holding what it saved plus the output and loss the training loop keeps."""
    kept = SavedTensors(exclude=parameters)
    with kept:
        loss = loss_fn(output, target)
    kept.add(output)
    kept.add(loss)
    return loss, kept


def _one_device(setup: Setup, device: torch.device) -> list[dict[str, int]]:
    model = setup.model.build().to(device)
    parameters = list(model.parameters())
    optimizer = make_optimizer(setup.optimizer, parameters)
    x, y = (t.to(device) for t in setup.model.batch(setup.batch))
    for _ in range(2):  # a warm-up step, then the counted one
        activations = SavedTensors(exclude=parameters)
        with activations:
            output = model(x)
        loss, kept = _kept_by_loss(output, y, parameters)
        loss.backward()
        gradients = storage_bytes(p.grad for p in parameters)
        optimizer.step()
        optimizer.zero_grad()
    return [device_bytes(parameters=storage_bytes(parameters), gradients=gradients,
                         optimizer_state=storage_bytes(state_tensors(optimizer)), activations=activations.bytes,
                         outputs_and_loss=kept.bytes)]


def _data_parallel(setup: Setup, devices: list[torch.device]) -> tuple[list[dict[str, int]], CountingDataParallel]:
    model = setup.model.build().to(devices[0])
    parameters = list(model.parameters())
    optimizer = make_optimizer(setup.optimizer, parameters)
    data_parallel = CountingDataParallel(model, devices)
    x, y = setup.model.batch(setup.batch)  # the batch comes from the host; each chunk is copied to its device
    y = y.to(devices[0])  # the loss is computed on devices[0], where the outputs are gathered
    for _ in range(2):  # a warm-up step, then the counted one
        loss, kept = _kept_by_loss(data_parallel(x), y, parameters)
        loss.backward()
        summed = storage_bytes(p.grad for p in parameters)
        optimizer.step()
        optimizer.zero_grad()
    dp = data_parallel
    first = device_bytes(parameters=dp.copies[0], gradients=dp.gradients[0] + summed,
                         optimizer_state=storage_bytes(state_tensors(optimizer)), activations=dp.saved[0].bytes,
                         outputs_and_loss=kept.bytes)
    others = [device_bytes(parameters=dp.copies[j], gradients=dp.gradients[j], activations=dp.saved[j].bytes)
              for j in range(1, len(dp.copies))]
    idle = [device_bytes() for _ in range(len(devices) - len(dp.copies))]  # fewer chunks than devices
    return [first, *others, *idle], dp


def measure(setup: Setup) -> Breakdown:
    """Run ``setup`` for real and count its bytes per device and category (see ``dpcourse.memory.accounting``).

    One device and DataParallel run here, on ``dpcourse.devices(n)`` (CPU devices without a GPU). DDP is counted
    inside each rank's own process: ``dpcourse.ddp.memory.measure_ddp([setup])``.
    """
    if setup.kind == "DDP":
        raise ValueError("DDP's memory is counted in each rank's own process: use "
                         "dpcourse.ddp.memory.measure_ddp([setup]), which starts the ranks.")
    devices = choose_devices(setup.devices)
    if setup.devices == 1:  # DataParallel on one device calls the module itself
        return Breakdown(setup, _one_device(setup, devices[0]), "measured")
    return Breakdown(setup, _data_parallel(setup, devices)[0], "measured")


def copies_alive_at_the_sum(setup: Setup) -> int:
    """Under DataParallel: how many parameter copies of replicas 1.. still exist when their gradients are summed.

    0 means that backward freed every copy (each saved for one layer's backward) before the sum: a replica's
    device never holds its copies and its gradients in full at the same time.
    """
    if setup.kind != "DataParallel" or setup.devices < 2:
        raise ValueError(f"copies_alive_at_the_sum needs kind='DataParallel' on 2 or more devices, not {setup}.")
    return _data_parallel(setup, choose_devices(setup.devices))[1].copies_alive
