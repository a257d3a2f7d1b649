# The core, mirror of torch/nn/parallel/replicate.py.
"""Step 2 of DataParallel: one copy of the module per device, rebuilt on every forward.

Mirrors ``torch/nn/parallel/replicate.py``. A replica is *not* ``copy.deepcopy(module)``. It is a
shallow copy of every submodule whose parameters are swapped for copies on the replica's device:

1. Copy every parameter and buffer to every device (``Broadcast``, so gradients flow back and are
   summed). Device 0's "copies" are the original tensors themselves.
2. For each submodule and device, make a shallow copy with ``module._replicate_for_data_parallel()``,
   which in ``torch/nn/modules/module.py`` is::

       replica = self.__new__(type(self))        # __init__ is not called
       replica.__dict__ = self.__dict__.copy()   # plain attributes: the same objects
       replica._parameters = {}                  # a replica owns no Parameters
       replica._buffers = replica._buffers.copy()
       replica._modules = replica._modules.copy()
       replica._is_replica = True

   (RNNs extend it to copy their ``_flat_weights`` list.)
3. Wire each replica's children, parameters and buffers to the copies on its device, with ``setattr``.

What follows, and what the course shows:

* ``replica.parameters()`` is empty: the copies are computed tensors (non-leaf, ``grad_fn`` set), so
  ``setattr`` stores them as plain attributes. ``next(self.parameters())`` in forward fails.
* Replica 0 shares the original's buffers and parameter storage, so in-place updates made by replica 0
  persist (BatchNorm's running statistics come from chunk 0 only) and the others' are lost.
* Plain attributes are shared by reference: ``self.counter += 1`` rebinds the name on the replica and
  is lost; ``self.log.append(x)`` mutates the one shared list from every thread.
"""

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ._functions import Broadcast
from .comm import broadcast_coalesced
from .devices import DeviceLike, as_devices

__all__ = ["replicate"]


def _broadcast(tensors: list[torch.Tensor], devices: list[torch.device], detach: bool) -> list[list[torch.Tensor]]:
    """``copies[j][i]`` = ``tensors[i]`` on ``devices[j]``; through autograd unless ``detach``."""
    if not tensors:
        return [[] for _ in devices]
    if detach:
        with torch.no_grad():
            return broadcast_coalesced(tensors, devices)
    flat = Broadcast.apply(devices, *tensors)
    n = len(tensors)
    return [list(flat[j * n : (j + 1) * n]) for j in range(len(devices))]


def _check_replicable(module: nn.Module, modules: list[nn.Module], params: list[torch.Tensor]) -> None:
    """Refuse what cannot be copied: compiled modules and parameters not yet created (lazy modules)."""
    if any(_is_compiled(m) for m in modules):
        name = next(name for name, m in module.named_modules() if _is_compiled(m))
        raise RuntimeError(
            f"replicate cannot copy {f'submodule {name!r}' if name else 'the module'}: it is a torch.compile'd "
            f"module (an OptimizedModule whose compiled code belongs to the original, not to copies). Wrap the "
            f"uncompiled module, and compile inside its forward instead: self.body = torch.compile(body_fn)."
        )
    if any(is_lazy(p) for p in params):
        raise RuntimeError(
            "Modules with uninitialized parameters can't be used with `DataParallel`. "
            "Run a dummy forward pass to correctly initialize the modules"
        )


def _unique(modules: list[nn.Module], kind: str) -> list[torch.Tensor]:
    """Every module's ``_parameters`` or ``_buffers`` values, each tensor once: ``module.parameters()`` and
    ``module.buffers()`` in one pass over an already listed ``module.modules()``."""
    seen: set[int] = set()
    found = []
    for m in modules:
        for tensor in getattr(m, kind).values():
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                found.append(tensor)
    return found


def _is_compiled(module: nn.Module) -> bool:
    # torch._dynamo.eval_frame.OptimizedModule, recognised without importing torch._dynamo (about 2 s).
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


def replicate(module: nn.Module, devices: Sequence[DeviceLike], detach: bool = False) -> list[nn.Module]:
    """Return one replica of ``module`` per entry of ``devices`` (``[]`` for an empty list, as in torch).

    ``detach=False`` copies parameters through ``Broadcast`` so that ``loss.backward()`` sums every
    replica's gradient into the original parameters' ``.grad``. ``detach=True`` (what DataParallel uses
    under ``torch.no_grad()``) copies without autograd; replica 0 then holds the original ``Parameter``
    objects. Buffers are always copied without autograd unless they require grad.

    All parameters and buffers must already be on ``devices[0]``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"replicate needs an nn.Module, got {type(module).__name__}. "
            f"Wrap the computation in an nn.Module subclass (or nn.Sequential)."
        )
    modules = list(module.modules())  # shared submodules appear once and stay shared in each replica
    params = _unique(modules, "_parameters")
    _check_replicable(module, modules, params)
    devices = as_devices(devices)
    if not devices:
        return []
    param_copies = _broadcast(params, devices, detach)
    buffers = _unique(modules, "_buffers")
    differentiable = [b for b in buffers if b.requires_grad and not detach]
    plain = [b for b in buffers if not (b.requires_grad and not detach)]
    buffer_copies = [
        rg + pl
        for rg, pl in zip(_broadcast(differentiable, devices, detach), _broadcast(plain, devices, True), strict=True)
    ]

    param_index = {id(p): i for i, p in enumerate(params)}
    buffer_index = {id(b): i for i, b in enumerate(differentiable + plain)}
    module_index = {id(m): i for i, m in enumerate(modules)}
    replicas = [[m._replicate_for_data_parallel() for m in modules] for _ in devices]

    for j, device_replicas in enumerate(replicas):
        for original, replica in zip(modules, device_replicas, strict=True):
            for key, child in original._modules.items():
                if child is None:
                    replica._modules[key] = None
                else:
                    setattr(replica, key, device_replicas[module_index[id(child)]])
            for key, param in original._parameters.items():
                if param is None:
                    replica._parameters[key] = None
                else:
                    # A copy is no leaf (it has a grad_fn), so setattr stores it as a plain attribute.
                    setattr(replica, key, param_copies[j][param_index[id(param)]])
            for key, buffer in original._buffers.items():
                if buffer is None:
                    replica._buffers[key] = None
                else:
                    setattr(replica, key, buffer_copies[j][buffer_index[id(buffer)]])
    return [device_replicas[0] for device_replicas in replicas]
