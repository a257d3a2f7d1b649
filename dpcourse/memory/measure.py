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
(``dpcourse.ddp.demos.memory``).
"""

import weakref
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook

from dpcourse.by_hand import tensor_at
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices

from ..examples import loss_fn
from .accounting import Breakdown, SavedTensors, device_bytes, state_tensors, storage_bytes
from .setup import SHARDED, Setup, make_optimizer


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
    the sum, ``owner`` the replica whose parameters share the module's memory (replica 0 in dpcourse and torch).
    For replicas 1..: ``copies_alive`` how many parameter copies (the view objects) still existed at the sum,
    ``storage_alive`` how many of their storages did, ``copy_storages`` how many buffers hold the last
    replica's copies, and ``together[j - 1]`` the most gradient bytes replica j had computed, counted as each
    layer's backward began, while the storage of its copies still existed. The copies are views of one flat
    buffer per device (``dpcourse/comm.py: _copy_bucket``; torch's ``broadcast_coalesced`` does the same), so
    that buffer lives until the last view is freed. On one device DataParallel calls the module itself, and the
    lists stay empty.
    """

    def __init__(self, module: nn.Module, devices: Sequence[torch.device]) -> None:
        super().__init__(module, devices)
        self.copies: list[int] = []
        self.saved: list[SavedTensors] = []
        self.gradients: list[int] = []
        self.copies_alive: int | None = None
        self.storage_alive: int | None = None
        self.together: list[int] = []
        self.copy_storages: int | None = None
        self.owner: int | None = None
        self._watched: dict[int, Callable[[torch.Tensor], None]] = {}

    def replicate(self, module: nn.Module, devices: list[torch.device]) -> list[nn.Module]:
        replicas = super().replicate(module, devices)
        names = [name for name, _ in module.named_parameters()]
        copies = [[tensor_at(replica, name) for name in names] for replica in replicas]
        self.copies = [storage_bytes(tensors) for tensors in copies]
        self.owner = next((j for j, tensors in enumerate(copies)  # the replica whose copies share the model's memory
                           if all(t.data_ptr() == p.data_ptr()
                                  for t, p in zip(tensors, module.parameters(), strict=True))), None)
        self.saved = [SavedTensors(exclude=tensors) for tensors in copies]
        alive = [weakref.ref(t) for tensors in copies[1:] for t in tensors]  # weak: counting must not keep them
        storages = [_weak_storages(tensors) for tensors in copies[1:]]
        computed, self.together = [0] * len(storages), [0] * len(storages)
        self.copy_storages = len({t.untyped_storage().data_ptr() for t in copies[-1]})
        n, count = len(names), len(replicas)  # the hooks below must not hold the replicas themselves

        def backward_starts(j: int, layer_bytes: int) -> Callable[[torch.Tensor], None]:
            def hook(grad: torch.Tensor) -> None:  # every later layer of replica j has its gradients now
                if any(ref() is not None for ref in storages[j]):
                    self.together[j] = max(self.together[j], computed[j])
                computed[j] += layer_bytes
            return hook

        def arrived(grad_outputs: Sequence[torch.Tensor | None]) -> None:
            self.gradients = [storage_bytes(grad_outputs[j * n : (j + 1) * n]) for j in range(count)]
            self.copies_alive = sum(ref() is not None for ref in alive)
            self.storage_alive = sum(ref() is not None for refs in storages for ref in refs)

        # A replica's parameters are plain tensors (lesson 03): read each layer's size from the original module.
        # Its hook dicts are the original's (a shallow copy), so ``parallel_apply`` watches it with a global hook.
        sizes = [sum(p.numel() * p.element_size() for p in layer.parameters(recurse=False))
                 for layer in module.modules()]
        self._watched = {id(layer): backward_starts(j, size) for j, replica in enumerate(replicas[1:])
                         for layer, size in zip(replica.modules(), sizes, strict=True) if size}
        # One Broadcast made every copy; its backward receives all replicas' gradients and sums them.
        if len(replicas) > 1:
            copies[-1][0].grad_fn.register_prehook(arrived)
        return replicas

    def parallel_apply(self, replicas: list[nn.Module], inputs: tuple, kwargs: tuple) -> list[object]:
        counted = [_Counted(replica, recorder) for replica, recorder in zip(replicas, self.saved, strict=True)]
        watched, self._watched = self._watched, {}

        def forward_done(layer: nn.Module, args: object, output: object) -> None:
            if id(layer) in watched and isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(watched[id(layer)])

        handle = register_module_forward_hook(forward_done)  # every thread; removed before anything else runs
        try:
            return super().parallel_apply(counted, inputs, kwargs)
        finally:
            handle.remove()


def _weak_storages(tensors: Sequence[torch.Tensor]) -> list[weakref.ref]:
    """One weak reference per distinct storage under ``tensors``: counting what is alive must not keep it alive."""
    storages = {id(storage): storage for storage in (t.untyped_storage() for t in tensors)}
    return [weakref.ref(storage) for storage in storages.values()]


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
    # CPU devices share one memory, so where a tensor lives is read from what the step did, not from .device:
    # the summed .grad and the optimizer state belong with the optimizer's parameters, i.e. with the replica
    # whose parameters share their memory (replica 0, lesson 03) or, if none does, on the model's own device,
    # which then also holds the model; the outputs and the loss live where DataParallel gathered them, output_device.
    home = dp.owner if dp.owner is not None else devices.index(parameters[0].device)
    gathered = devices.index(dp.output_device)
    counted = [device_bytes(parameters=dp.copies[j], gradients=dp.gradients[j], activations=dp.saved[j].bytes)
               for j in range(len(dp.copies))]
    counted += [device_bytes() for _ in range(len(devices) - len(dp.copies))]  # fewer chunks than devices
    counted[home]["gradients"] += summed
    counted[home]["optimizer state"] += storage_bytes(state_tensors(optimizer))
    if dp.owner is None:
        counted[home]["parameters"] += storage_bytes(parameters)
    counted[gathered]["outputs and loss"] += kept.bytes
    return counted, dp


def measure(setup: Setup) -> Breakdown:
    """Run ``setup`` for real and count its bytes per device and category (see ``dpcourse.memory.accounting``).

    One device and DataParallel run here, on ``dpcourse.devices(n)`` (CPU devices without a GPU). DDP and the ZeRO
    stages are counted inside each rank's own process: ``dpcourse.ddp.demos.memory.measure_ddp([setup])``,
    ``dpcourse.sharded.memory.measure_sharded([setup])``.
    """
    if setup.kind == "DDP":
        raise ValueError("DDP's memory is counted in each rank's own process: use "
                         "dpcourse.ddp.demos.memory.measure_ddp([setup]), which starts the ranks.")
    if setup.kind in SHARDED:
        raise ValueError(f"{setup.kind}'s memory is counted in each rank's own process: use "
                         "dpcourse.sharded.memory.measure_sharded([setup]), which starts the ranks.")
    devices = choose_devices(setup.devices)
    if setup.devices == 1:  # DataParallel on one device calls the module itself
        return Breakdown(setup, _one_device(setup, devices[0]), "measured")
    return Breakdown(setup, _data_parallel(setup, devices)[0], "measured")


def copies_and_gradients(setup: Setup) -> dict[str, int]:
    """Under DataParallel: does a replica's device hold its parameter copies and its gradients at the same time?

    Counted for replicas 1.. in one step: ``copy bytes`` (replica 1's copies), ``copy storages`` (how many
    buffers hold them), ``gradient bytes`` (replica 1's, at the sum), ``gradients with copies alive`` (the most
    gradient bytes any replica had computed while the storage of its copies still existed), and, at the moment
    the gradients reach the sum, ``copy views alive`` and ``copy storages alive``. Each layer's backward frees
    the views it saved, but the views share one flat buffer, which lives until the last of them is freed.
    """
    if setup.kind != "DataParallel" or setup.devices < 2:
        raise ValueError(f"copies_and_gradients needs kind='DataParallel' on 2 or more devices, not {setup}.")
    dp = _data_parallel(setup, choose_devices(setup.devices))[1]
    return {"copy bytes": dp.copies[1], "copy storages": dp.copy_storages,
            "gradient bytes": dp.gradients[1], "gradients with copies alive": max(dp.together),
            "copy views alive": dp.copies_alive, "copy storages alive": dp.storage_alive}
