"""Lessons run on CPU devices, checked as if ``devices[0]`` were a GPU.

On CPU devices every tensor is on the one CPU, so a lesson that builds its model on the CPU and passes
``dpcourse.devices(n)`` runs fine here and crashes on a GPU machine, where ``devices(n)`` is
``[cuda:0, ...]``: "module must have its parameters and buffers on device cuda:0 (devices[0]) but found one
of them on device: cpu". This file makes such mistakes fail on the CPU too. IPython runs it in every kernel
that builds or tests a lesson (notebooks/conftest.py sets IPYTHONDIR=notebooks/kernel/ipython); tests load it with
``runpy`` and call ``install``.

Every tensor is either *placed* (it would be on the GPU) or not (it would stay on the CPU):

* placed: what ``.to(device)``, ``.cuda()``, a factory's ``device=`` or a module's ``.to(device)`` made,
  what ``scatter``, ``replicate`` and ``gather`` made, and every result computed from a placed tensor
  (a ``TorchFunctionMode`` follows each torch call of the notebook's thread);
* not placed: everything else, e.g. ``examples.make_model()`` and ``torch.randn(4, 8)`` as they come.

What fails, as it would on a GPU: a DataParallel, ``data_parallel`` or ``replicate`` of a module with an
unplaced parameter or buffer; one torch call mixing placed tensors with unplaced ones (a 0-dimensional
unplaced tensor may mix, as a CPU scalar may with CUDA tensors; an index may be unplaced); ``.numpy()`` of a
placed tensor. The course's idiom, torch's own rule: ``model.to(devices[0])`` before wrapping, and
``.to(devices[0])`` for what meets the gathered outputs.
"""

import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

PLACED = "_placed_on_a_stand_in_gpu"
CHOSEN: dict = {}  # id -> device, for every device dpcourse.devices(n) returned: these stand in for GPUs


def is_placed(value) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, PLACED, False)


def mark(value, placed=True):
    """Mark every tensor in ``value`` (nested lists, tuples, dicts) as placed (or not); return ``value``."""
    if isinstance(value, torch.Tensor):
        setattr(value, PLACED, placed)
    elif isinstance(value, (list, tuple)):
        for item in value:
            mark(item, placed)
    elif isinstance(value, dict):
        for item in value.values():
            mark(item, placed)
    return value


def tensors_in(values):
    """The tensors a torch call computes with: its tensor arguments and those in list arguments (``torch.cat``)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, torch.Tensor))


def unplaced_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"placement check (CPU devices standing in for GPUs): {what}. On a GPU machine, where "
        f"dpcourse.devices(n) is [cuda:0, ...], this line fails. Put it on devices[0] first: "
        f"model.to(devices[0]) before wrapping, tensors with .to(devices[0])."
    )


def _destination(args, kwargs) -> str | None:
    """Where ``.to(...)``-like arguments send a tensor: "gpu", "cpu", or None when they name no device (a dtype).

    A CUDA device or index is a GPU, and so is a device that ``dpcourse.devices(n)`` chose, or a placed tensor's
    device (``x.to(placed.device)``). The string ``"cpu"`` and any other CPU device name the real CPU, which a
    lesson may ask for on a GPU machine too; the meta device is no GPU either.
    """
    def where(a):
        if isinstance(a, torch.Tensor):
            return "gpu" if is_placed(a) else "cpu"
        if isinstance(a, torch.device):
            return "gpu" if a.type not in ("cpu", "meta") or CHOSEN.get(id(a)) is a else "cpu"
        if isinstance(a, str):
            return "cpu" if a.startswith(("cpu", "meta")) else "gpu"
        if isinstance(a, int) and not isinstance(a, bool):
            return "gpu"
        return None

    named = [where(a) for a in [*args, kwargs.get("device")] if a is not None]
    return next((place for place in named if place), None)


_MOVES = {torch.Tensor.to, torch.Tensor.cuda}
_LEAVES = {torch.Tensor.copy_}  # copy_ may copy across devices; the copy stays where it is
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}
_UNCHECKED = {torch._has_compatible_shallow_copy_type}  # nn.Module._apply asks it about a tensor and its move
# Arguments that stay on the CPU on any device: a packed sequence's lengths and batch sizes (nn.utils.rnn).
_ON_THE_CPU = {torch._pack_padded_sequence: 1, torch.lstm: 1, torch.gru: 1, torch.rnn_tanh: 1, torch.rnn_relu: 1}
_SHAPE_OF_SECOND = {torch.Tensor.view_as, torch.Tensor.reshape_as, torch.Tensor.expand_as}  # its size, not its data


class StandInGPU(TorchFunctionMode):
    """Follows placed tensors through every torch call and fails a call that mixes them with unplaced ones."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _MOVES or func is torch.Tensor.cpu:
            result = func(*args, **kwargs)
            destination = {torch.Tensor.cuda: "gpu", torch.Tensor.cpu: "cpu"}.get(func) or _destination(
                args[1:], kwargs)
            if destination is None:  # a dtype change: the copy stays where the tensor was
                return mark(result) if is_placed(args[0]) else result
            if result is args[0] and not isinstance(result, nn.Parameter):
                result = result.view_as(result)  # on a GPU a new tensor: the original keeps its place
            return mark(result, placed=destination == "gpu")
        if func in _LEAVES or func in _UNCHECKED:
            return func(*args, **kwargs)
        if func is torch.Tensor.numpy and is_placed(args[0]):
            raise unplaced_error("a tensor on devices[0] was turned into a numpy array (use .cpu() first)")
        # An index may stay on the CPU; view_as and the like read only their second tensor's shape.
        checked = [args[0], *args[2:]] if func in _INDEXING | _SHAPE_OF_SECOND else list(args)
        if func in _ON_THE_CPU and isinstance(args[_ON_THE_CPU[func]], torch.Tensor):
            checked.pop(_ON_THE_CPU[func])
        tensors = [*tensors_in(checked), *tensors_in(kwargs.values())]
        placed = any(is_placed(t) for t in tensors)
        if placed:
            stray = [t for t in tensors if not is_placed(t) and t.dim() > 0]
            if stray:
                name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
                raise unplaced_error(
                    f"{name} mixes tensors on devices[0] with one left on the CPU of shape {list(stray[0].shape)}")
        result = func(*args, **kwargs)
        if placed or _destination([], kwargs) == "gpu":  # computed from placed tensors, or made there
            mark(result)
        return result


def install(patch=setattr) -> StandInGPU:
    """Put the checks in place and enter the mode; ``patch`` is ``setattr`` or pytest's ``monkeypatch.setattr``.

    Returns the mode: ``mode.__exit__(None, None, None)`` leaves it (the patches stay until undone).
    """
    import importlib


    # dpcourse.data_parallel and dpcourse.replicate are the functions: the modules of the same name are these.
    data_parallel, by_hand, replicate_module, scatter_gather, apply_module = (
        importlib.import_module(f"dpcourse.{name}")
        for name in ("data_parallel", "by_hand", "replicate", "scatter_gather", "parallel_apply"))
    module_to, module_cuda = nn.Module.to, nn.Module.cuda

    def to(self, *args, **kwargs):
        result = module_to(self, *args, **kwargs)
        destination = _destination(args, kwargs)
        if destination:
            mark([*self.parameters(), *self.buffers()], placed=destination == "gpu")
        return result

    def cuda(self, *args, **kwargs):
        result = module_cuda(self, *args, **kwargs)
        mark([*self.parameters(), *self.buffers()])
        return result

    # Only what dpcourse.devices(n) chose stands in for a GPU: DataParallel(m, devices=["cpu", "cpu"]) asks for
    # the real CPU, on a GPU machine too.
    devices_module = sys.modules["dpcourse.devices"]
    choose_devices, chosen = devices_module.devices, CHOSEN

    def devices(n):
        result = choose_devices(n)
        chosen.update((id(device), device) for device in result)
        return result

    def everywhere(original, replacement):
        """Put ``replacement`` wherever a loaded dpcourse module holds ``original``, under any name; a module
        imported later takes it from the module that defines it, which is patched here too."""
        for name, module in list(sys.modules.items()):
            if name == "dpcourse" or name.startswith("dpcourse."):
                for attribute, value in list(vars(module).items()):
                    if value is original:
                        patch(module, attribute, replacement)

    everywhere(choose_devices, devices)

    def stands_in_for_a_gpu(device):
        return chosen.get(id(device)) is device

    check_placement = data_parallel._check_placement

    def checked_placement(module, device):
        check_placement(module, device)
        if not stands_in_for_a_gpu(device):
            return
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if not is_placed(tensor):
                raise unplaced_error(f"{type(module).__name__}'s {name} was never moved to devices[0]")

    replicate = replicate_module.replicate

    def checked_replicate(module, devices, detach=False):
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if len(devices) and stands_in_for_a_gpu(devices[0]) and not is_placed(tensor):
                raise unplaced_error(f"replicate got {type(module).__name__} whose {name} is not on devices[0]")
        replicas = replicate(module, devices, detach)
        if not (len(devices) and stands_in_for_a_gpu(devices[0])):  # replicate(m, ["cpu", "cpu"]): the real CPU
            return replicas
        for replica in replicas:  # a replica's parameters are plain tensor attributes (see dpcourse.replicate)
            for m in replica.modules():
                mark([*vars(m).values(), *m._buffers.values()])
        return replicas

    def marking(original):
        def marked(*args, **kwargs):
            result = original(*args, **kwargs)
            if original.__name__ == "gather":  # gather(outputs, "cpu") or output_device="cpu": the real CPU
                target = kwargs.get("target_device", args[1] if len(args) > 1 else None)
                if not stands_in_for_a_gpu(target):
                    return mark(result, placed=False)
            if original.__name__ in ("scatter", "scatter_kwargs"):  # scatter(x, ["cpu", "cpu"]): the real CPU
                at = 2 if original.__name__ == "scatter_kwargs" else 1
                targets = kwargs.get("devices", args[at] if len(args) > at else None)
                if not any(stands_in_for_a_gpu(d) for d in targets or ()):
                    return result
            return mark(result)
        return marked

    parameter_new = nn.Parameter.__new__

    def new_parameter(cls, data=None, requires_grad=True):  # nn.Parameter(placed), and so deepcopy, stays placed
        parameter = parameter_new(cls, data, requires_grad)
        return mark(parameter) if is_placed(data) else parameter

    patch(nn.Parameter, "__new__", new_parameter)

    tensor_device = torch._C.TensorBase.device  # the attribute itself; a mode does not see it read

    def device(self):  # a placed tensor reports the device standing in for a GPU: x.to(placed.device) places x
        where = tensor_device.__get__(self)
        return next(iter(CHOSEN.values())) if where.type == "cpu" and is_placed(self) and CHOSEN else where

    patch(torch.Tensor, "device", property(device))

    load = torch.load

    def load_to(*args, **kwargs):  # a tensor's place travels with it through torch.save; map_location moves it
        loaded = load(*args, **kwargs)
        destination = _destination([kwargs.get("map_location")], {})
        return loaded if destination is None else mark(loaded, placed=destination == "gpu")

    patch(torch, "load", load_to)
    patch(nn.Module, "to", to)
    patch(nn.Module, "cuda", cuda)
    patch(data_parallel, "_check_placement", checked_placement)
    everywhere(replicate, checked_replicate)
    # One wrapper per function, so that dpcourse.trace() finds every reference to it; parallel_apply is wrapped
    # because the replicas run in threads, which the mode does not follow.
    for module, name in ((scatter_gather, "scatter"), (scatter_gather, "scatter_kwargs"),
                         (scatter_gather, "gather"), (apply_module, "parallel_apply")):
        everywhere(getattr(module, name), marking(getattr(module, name)))
    mode = StandInGPU()
    mode.__enter__()
    return mode


if __name__ == "__main__" and __file__.endswith("00_check_placement.py"):  # IPython, at kernel start
    install()
