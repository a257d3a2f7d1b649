# The core, mirror of torch/nn/parallel/data_parallel.py.
"""DataParallel: every forward is scatter -> replicate -> parallel_apply -> gather.

Mirrors ``torch/nn/parallel/data_parallel.py``. The wrapper holds the one real module (on
``devices[0]``); replicas exist only during a forward call and are thrown away after it, which is why
they are rebuilt (and the parameters copied) on every step.
"""

import warnings
from collections.abc import Sequence
from itertools import chain
from typing import Any

import torch
from torch import nn

from .devices import DeviceLike, as_device, as_devices, usable_gpus
from .parallel_apply import parallel_apply
from .replicate import replicate
from .scatter_gather import gather, scatter_kwargs

__all__ = ["DataParallel", "data_parallel"]

IMBALANCE_WARNING = """
    There is an imbalance between your GPUs. You may want to exclude GPU {} which
    has less than 75% of the memory or cores of GPU {}. You can do so by setting
    the devices argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES
    environment variable."""


def _check_balance(devices: list[torch.device]) -> None:
    """Warn when one GPU has under 75% of the memory (or else the cores) of the biggest: it would set the pace."""
    gpus = [d.index for d in devices if d.type == "cuda"]
    if not gpus:
        return
    props = [torch.cuda.get_device_properties(i) for i in gpus]
    for measure in (lambda p: p.total_memory, lambda p: p.multi_processor_count):
        values = [measure(p) for p in props]
        if min(values) / max(values) < 0.75:
            warnings.warn(
                IMBALANCE_WARNING.format(gpus[values.index(min(values))], gpus[values.index(max(values))]),
                stacklevel=3,
            )
            return


def _check_placement(module: nn.Module, device: torch.device) -> None:
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.device != device:
            raise RuntimeError(
                f"module must have its parameters and buffers on device {device} (devices[0]) but found one "
                f"of them on device: {tensor.device}. Move the module first: module.to({str(device)!r})."
            )


def _all_gpus() -> list[int]:
    """The GPUs ``devices=None`` means: every GPU dpcourse may use (none when ``DPCOURSE_DEVICES=cpu``)."""
    return list(range(usable_gpus()))


def _checked_devices(devices: Sequence[DeviceLike], caller: str) -> list[torch.device]:
    devices = as_devices(devices)
    if not devices:
        raise ValueError(
            f"{caller} got an empty device list. Pass devices=dpcourse.devices(n) for n replicas "
            f"(CPU devices when there is no GPU)."
        )
    return devices


class DataParallel(nn.Module):
    """Run ``module`` on several devices by splitting each batch along ``dim``.

    ``devices=None`` follows torch: all visible GPUs, and with no GPU a plain **pass-through**
    (``forward`` just calls the module; that is all ``torch.nn.DataParallel`` does on a laptop).
    Pass ``devices=dpcourse.devices(4)`` to get four CPU devices instead.

    The module must live on ``devices[0]`` (checked on every forward); with a single device it is moved
    there for you. Outputs are gathered on ``output_device`` (default ``devices[0]``). In backward, each
    replica's gradient is **summed** into ``self.module``'s parameters. ``state_dict()`` keys start with
    ``module.`` because the wrapped model is the submodule called ``module``: save
    ``dp.module.state_dict()`` to get a checkpoint that loads into the bare model.
    """

    def __init__(
        self,
        module: nn.Module,
        devices: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DataParallel wraps an nn.Module, got {type(module).__name__}.")
        self.module = module
        self.dim = dim
        self.devices = as_devices(_all_gpus()) if devices is None else _checked_devices(devices, "DataParallel")
        if not self.devices:
            self.output_device = None
            return
        self.output_device = self.devices[0] if output_device is None else as_device(output_device)
        _check_balance(self.devices)
        if len(self.devices) == 1:
            self.module.to(self.devices[0])

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with torch.autograd.profiler.record_function("DataParallel.forward"):
            if not self.devices:
                return self.module(*inputs, **kwargs)
            _check_placement(self.module, self.devices[0])
            inputs, module_kwargs = self.scatter(inputs, kwargs, self.devices)
            if not inputs and not module_kwargs:
                inputs, module_kwargs = ((),), ({},)  # a call with no arguments runs once, on devices[0]
            if len(self.devices) == 1:
                return self.module(*inputs[0], **module_kwargs[0])
            replicas = self.replicate(self.module, self.devices[: len(inputs)])
            outputs = self.parallel_apply(replicas, inputs, module_kwargs)
            return self.gather(outputs, self.output_device)

    def scatter(self, inputs: tuple, kwargs: dict, devices: list[torch.device]) -> tuple[tuple, tuple]:
        return scatter_kwargs(inputs, kwargs, devices, dim=self.dim)

    def replicate(self, module: nn.Module, devices: list[torch.device]) -> list[nn.Module]:
        # Under torch.no_grad() there is no backward, so the copies need no autograd history.
        return replicate(module, devices, detach=not torch.is_grad_enabled())

    def parallel_apply(self, replicas: list[nn.Module], inputs: tuple, kwargs: tuple) -> list[Any]:
        return parallel_apply(replicas, inputs, kwargs, self.devices[: len(replicas)])

    def gather(self, outputs: list[Any], output_device: torch.device) -> Any:
        return gather(outputs, output_device, dim=self.dim)


def data_parallel(
    module: nn.Module,
    inputs: Any,
    devices: Sequence[DeviceLike] | None = None,
    output_device: DeviceLike | None = None,
    dim: int = 0,
    module_kwargs: dict | None = None,
) -> Any:
    """The functional form: one DataParallel forward of ``module`` on ``inputs``, with no wrapper kept.

    Unlike ``DataParallel`` there is no pass-through: ``devices=None`` means all GPUs, and with none it
    raises. The module is never moved, and replicas are always differentiable copies.
    """
    if not isinstance(inputs, tuple):
        inputs = () if inputs is None else (inputs,)
    if devices is None and not _all_gpus():
        raise RuntimeError(
            "data_parallel found no GPU to use. Pass devices=dpcourse.devices(n) to run on n CPU devices."
        )
    devices = _checked_devices(_all_gpus() if devices is None else devices, "data_parallel")
    output_device = devices[0] if output_device is None else as_device(output_device)
    _check_placement(module, devices[0])
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, devices, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    if len(devices) == 1:
        return module(*inputs[0], **module_kwargs[0])
    used = devices[: len(inputs)]
    replicas = replicate(module, used)
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, output_device, dim)
