"""Bytes per device, kind by kind, and how to count them from the tensors torch really holds.

A training step needs, on each device:

* **parameters**: the model's weights (under DataParallel each device's replica; replica 0 *is* the model);
* **gradients**: one per parameter. Under DataParallel each replica's gradients exist until they are summed,
  and device 0 also keeps the sum, in the model's ``.grad``;
* **optimizer state**: SGD keeps none, momentum one buffer per parameter, Adam two (``exp_avg``,
  ``exp_avg_sq``) and a 4-byte ``step`` counter per parameter tensor (``torch/optim/adam.py: _init_group``);
* **activations**: what autograd saves in forward for backward, here every Linear layer's input;
* **outputs and loss**: the output the training loop keeps, and what the loss saves (its log-softmax, the
  targets). Under DataParallel all of it is on device 0, where the outputs are gathered;
* **all-reduce buckets**: DDP's flat buffers, in which it all-reduces the gradients.

The ZeRO stages shard some of these over the ranks (``dpcourse.memory.sharding`` says how, and what each rank
holds while a layer runs); a rank's piece of a ``DTensor`` is counted by ``local``.

Each kind is counted at its largest during the step, and the total is their sum: what the device must hold,
kind by kind. The allocator's real peak differs by what is short-lived (see ``peak``).
"""

import dataclasses
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.distributed.tensor import DTensor

from .setup import RANKS, Setup

CATEGORIES = ("parameters", "gradients", "optimizer state", "activations", "outputs and loss", "all-reduce buckets")
MIB = 2**20


def local(tensor: torch.Tensor) -> torch.Tensor:
    """What this rank holds of ``tensor``: a ``DTensor``'s local shard (``to_local()``), any other tensor itself.

    FSDP2's parameters, their gradients and the optimizer state built from them are DTensors
    (``torch/distributed/tensor``): one logical tensor whose pieces live on the ranks of a device mesh.
    """
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _pointers(tensors: Iterable[torch.Tensor]) -> set[int]:
    return {local(t).untyped_storage().data_ptr() for t in tensors}


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the memory behind ``tensors``, each storage once: views of one buffer count as that buffer.

    A DTensor counts the storage of its local shard, padding included: FSDP2 keeps each rank's shard in a buffer
    of ceil(rows / ranks) rows (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``).
    """
    held = [local(t) for t in tensors if t is not None]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}
    return sum(storages.values())


def state_tensors(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    """Every tensor in ``optimizer.state``: momentum buffers, Adam's averages and its step counters."""
    for per_parameter in optimizer.state.values():
        yield from (value for value in per_parameter.values() if isinstance(value, torch.Tensor))


class SavedTensors:
    """Inside ``with recorder:``, count the tensors autograd saves for backward, each view once, in bytes.

    Uses ``torch.autograd.graph.saved_tensors_hooks``: the pack hook sees every tensor an operation saves
    (``nn.Linear`` saves its input and its weight, ``ReLU`` its output). Tensors whose memory belongs to
    ``exclude`` (the parameters) are left out: they are counted as parameters. ``exclude`` may also be a
    function, asked at every save: FSDP's full parameters exist only while their layer runs, and the memory of a
    freed one may hold an activation a moment later. A saved view counts its own bytes, not its whole buffer's:
    a chunk of the batch is what its device would hold. The hooks are per thread, so a recorder counts the
    thread that enters it. ``add(tensor)`` counts a tensor the caller keeps.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]] = ()) -> None:
        if callable(exclude):
            self._excluded = lambda: _pointers(exclude())
        else:
            fixed = _pointers(exclude)  # read now: the caller may pass a generator
            self._excluded = lambda: fixed
        self._seen: dict[tuple, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.untyped_storage().data_ptr() not in self._excluded():
            self.add(tensor)
        return tensor  # saved as usual: counting must not change what backward sees

    def add(self, tensor: torch.Tensor) -> None:
        self._seen[(tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)] = tensor.nbytes

    @property
    def bytes(self) -> int:
        return sum(self._seen.values())

    def __enter__(self) -> "SavedTensors":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


def device_bytes(**kinds: int) -> dict[str, int]:
    """One device's bytes as a dict over every category (missing ones are 0); unknown names raise."""
    unknown = set(kinds) - {name.replace(" ", "_").replace("-", "_") for name in CATEGORIES}
    if unknown:
        raise ValueError(f"Unknown memory categories {sorted(unknown)}; the categories are {list(CATEGORIES)}.")
    return {name: kinds.get(name.replace(" ", "_").replace("-", "_"), 0) for name in CATEGORIES}


@dataclasses.dataclass
class Breakdown:
    """Bytes per category for each device of one ``Setup``, ``predicted`` or ``measured`` (``source``)."""

    setup: Setup
    devices: list[dict[str, int]]
    source: str

    @property
    def totals(self) -> list[int]:
        return [sum(device.values()) for device in self.devices]

    @property
    def unit(self) -> str:
        return "rank" if self.setup.kind in RANKS else "device"

    def surplus(self) -> dict[str, int]:
        """What device 0 holds beyond device 1, per category (all zero when there is no device 1)."""
        if len(self.devices) < 2:
            return dict.fromkeys(CATEGORIES, 0)
        return {name: self.devices[0][name] - self.devices[1][name] for name in CATEGORIES}

    def table(self) -> str:
        """A text table in MiB: one row per category that any device uses, one column per device, and a total."""
        header = f"{'MiB':<20}" + "".join(f"{f'{self.unit} {i}':>10}" for i in range(len(self.devices)))
        rows = [header]
        for name in CATEGORIES:
            if any(device[name] for device in self.devices):
                rows.append(f"{name:<20}" + "".join(f"{device[name] / MIB:>10.2f}" for device in self.devices))
        rows.append(f"{'total':<20}" + "".join(f"{total / MIB:>10.2f}" for total in self.totals))
        return "\n".join(rows)

    def __str__(self) -> str:
        s = self.setup
        title = f"{self.source}: {s.kind} on {s.devices}, batch {s.batch}, {s.optimizer}"
        return f"{title}\n{self.table()}"
