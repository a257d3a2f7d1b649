# The core, dpcourse's own (torch takes GPU indices: torch/nn/parallel/data_parallel.py, _get_device_index).
"""Which devices the replicas run on: N GPUs, N replicas on fewer GPUs, or N CPU "devices".

DataParallel only needs a list of devices, one per replica. torch's own DataParallel accepts GPU indices
only and becomes a silent pass-through on a machine without a GPU. dpcourse accepts any list, repeats
included, so the same step can be watched on a laptop:

* ``["cuda:0", "cuda:1"]``: one replica per GPU, the real thing.
* ``["cuda:0", "cuda:0"]``: two replicas share one GPU. Every copy, thread and sum really happens, so the
  numbers are right, but both replicas queue on the same GPU: no speed-up.
* ``["cpu", "cpu", "cpu"]``: three replicas on the CPU, each a real copy of the parameters run in its own
  thread. Chunking, copies, aliasing, lost attribute updates and gradient sums all show. What cannot show:
  a device-mismatch error (all CPU memory is one device), the cost of a PCIe/NVLink transfer (a copy is a
  memcpy) or GPU speed.
"""

import os
from collections.abc import Sequence

import torch

__all__ = ["DeviceLike", "as_device", "as_devices", "devices", "usable_gpus"]

DeviceLike = torch.device | str | int


def as_device(device: DeviceLike) -> torch.device:
    """Turn ``torch.device``, ``"cpu"``, ``"cuda:1"`` or ``1`` (a CUDA index) into a checked ``torch.device``.

    A bare ``"cuda"`` means the current CUDA device, as everywhere in torch.
    """
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(
            f"A device must be a torch.device, a string like 'cpu' or 'cuda:1', or a CUDA index; "
            f"got {device!r} of type {type(device).__name__}."
        )
    if isinstance(device, int):
        if device < 0:
            raise ValueError(
                f"CUDA device index {device} is negative. Use 'cpu' for the CPU, or an index >= 0."
            )
        device = torch.device("cuda", device)
    elif isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"Unknown device {device!r}. Use 'cpu', 'cuda' or 'cuda:<index>', or dpcourse.devices(n)."
            ) from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"dpcourse runs replicas on 'cpu' or 'cuda' devices, not on {device}.")
    if device.type == "cuda":
        _check_cuda_index(device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def _check_cuda_index(device: torch.device) -> None:
    if not torch.cuda.is_available():
        raise ValueError(
            f"{device} was requested but this machine has no CUDA GPU. "
            f"Use dpcourse.devices(n) to get n CPU devices instead."
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"{device} was requested but only {count} GPU(s) are visible (cuda:0 .. cuda:{count - 1}). "
            f"Repeat a GPU to run several replicas on it, e.g. ['cuda:0', 'cuda:0']."
        )


def as_devices(devices: Sequence[DeviceLike]) -> list[torch.device]:
    """Check a list of devices; a list, not one device, because DataParallel has one replica per entry."""
    if isinstance(devices, (torch.device, str, int)):
        raise TypeError(
            f"Expected a list of devices, one per replica, but got the single device {devices!r}. "
            f"Wrap it in a list: [{devices!r}]."
        )
    return [as_device(d) for d in devices]


def usable_gpus() -> int:
    """How many GPUs dpcourse may use: all visible ones, or none when ``DPCOURSE_DEVICES=cpu`` is set."""
    if not torch.cuda.is_available() or os.environ.get("DPCOURSE_DEVICES", "").lower() == "cpu":
        return 0
    return torch.cuda.device_count()


def devices(n: int) -> list[torch.device]:
    """Return ``n`` devices to run ``n`` replicas on, the best this machine can do.

    * at least ``n`` GPUs: ``cuda:0 .. cuda:n-1``, one replica per GPU;
    * fewer GPUs: the replicas share them round-robin, e.g. 4 replicas on 2 GPUs are
      ``[cuda:0, cuda:1, cuda:0, cuda:1]``;
    * no GPU: ``[cpu] * n``, n replicas in n threads on the CPU.

    Set the environment variable ``DPCOURSE_DEVICES=cpu`` to get CPU devices even on a GPU machine (the
    test suite does, so the notebooks' stored outputs, made on a CPU, also match there).
    See this module's docstring for what each mode can and cannot show.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"devices(n) needs a whole number of replicas n >= 1, got {n!r}.")
    gpus = usable_gpus()
    if gpus == 0:
        return [torch.device("cpu")] * n
    return [torch.device("cuda", i % gpus) for i in range(n)]
