"""How ``dpcourse.trace()`` watches the four steps without the steps knowing: timed stand-ins and autograd hooks.

While a trace is open, ``observed_steps`` puts a timed stand-in in place of ``scatter``, ``replicate``,
``parallel_apply`` and ``gather`` in every dpcourse module that refers to them (``dpcourse.gather``,
``DataParallel``'s module, ``scatter_kwargs``'s module, the quiz helpers ...), and puts the originals
back when it closes. Each stand-in calls the original, then hangs hooks on what the call made:

==================  ===================================================================================
forward step        what the stand-in records, and the backward it hooks
==================  ===================================================================================
scatter             the call; the ``ScatterBackward`` nodes of the chunks ("scatter-backward")
replicate           the call; the ``BroadcastBackward`` node of the parameter copies ("reduce-add")
parallel_apply      each replica's forward in its own thread; gradient hooks on its output and parameter
                    copies (that replica's "backward")
gather              the call; the ``GatherBackward`` nodes of the result ("gather-backward")
==================  ===================================================================================
"""

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .devices import as_device, as_devices

STEP_MODULES = {
    "scatter": "dpcourse.scatter_gather",
    "replicate": "dpcourse.replicate",
    "parallel_apply": "dpcourse.parallel_apply",
    "gather": "dpcourse.scatter_gather",
}


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors in ``obj``: a tensor, or a nested tuple/list/dict of them (other objects hold none)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for item in items for t in tensors_in(item)]


def bytes_of(obj: Any) -> int:
    """Bytes held by the dense tensors in ``obj`` (a tensor or a nested tuple/list/dict of them)."""
    return sum(0 if t.is_sparse else t.numel() * t.element_size() for t in tensors_in(obj))


def _nodes(tensors: list[torch.Tensor], name: str) -> list[Any]:
    """The distinct autograd nodes called ``name`` that made ``tensors``, in order of first appearance."""
    found = {id(t.grad_fn): t.grad_fn for t in tensors if t.grad_fn is not None and t.grad_fn.name() == name}
    return list(found.values())


def _observed_scatter(recorder, scatter: Callable) -> Callable:
    @functools.wraps(scatter)
    def scatter_observed(inputs: Any, devices: Any, dim: int = 0) -> Any:
        sources = tensors_in(inputs)
        with recorder.span("scatter", None, None, inputs) as span:
            entries = scatter(inputs, devices, dim)
        # scatter walks every entry in the same order as inputs, so each entry's tensors line up with the sources
        pairs = [pair for entry in entries for pair in zip(tensors_in(entry), sources, strict=True)]
        span.bytes_copied = sum(bytes_of(chunk) for chunk, source in pairs if chunk.device != source.device)
        for node in _nodes([chunk for chunk, _ in pairs], "ScatterBackward"):
            source = next(s for c, s in pairs if c.grad_fn is node)
            recorder.time_node(node, "scatter-backward", source.device, lambda _, grads: (grads, bytes_of(grads)))
        return entries

    return scatter_observed


def _observed_replicate(recorder, replicate: Callable) -> Callable:
    @functools.wraps(replicate)
    def replicate_observed(module: torch.nn.Module, devices: Any, detach: bool = False) -> list:
        tensors = list(module.parameters()) + list(module.buffers())
        first = as_devices(devices)[0] if len(devices) else None
        with recorder.span("replicate", first, None, tensors) as span:
            replicas = replicate(module, devices, detach)
            span.bytes_copied = max(0, len(replicas) - 1) * bytes_of(tensors)
        copies = [v for r in replicas for m in r.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        for node in _nodes(copies, "BroadcastBackward"):
            recorder.time_node(node, "reduce-add", first, functools.partial(_reduce_add_sizes, len(replicas)))
        return replicas

    return replicate_observed


def _reduce_add_sizes(replicas: int, _summed: tuple, grads: tuple) -> tuple[tuple, int]:
    """Broadcast's backward receives every replica's gradients, device by device: replica 0's are the first
    ``len(grads) // replicas``, and the others' are what reduce-add copies and adds into them."""
    per_replica = len(grads) // replicas
    return grads[:per_replica], bytes_of(grads[per_replica:])


class _TimedReplica:
    """Calls one replica and records its forward, in the thread parallel_apply runs it in."""

    def __init__(self, recorder, replica: int, module: torch.nn.Module, device: torch.device | None) -> None:
        self.recorder, self.replica, self.module, self.device = recorder, replica, module, device

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        device = self.device or next((t.device for t in tensors_in(args)), torch.device("cpu"))
        with self.recorder.span("forward", device, self.replica, args):
            output = self.module(*args, **kwargs)
        self.recorder.watch_backward(self.replica, device, output, self.module)
        return output


def _observed_parallel_apply(recorder, parallel_apply: Callable) -> Callable:
    @functools.wraps(parallel_apply)
    def parallel_apply_observed(modules, inputs, kwargs_tup=None, devices=None) -> list:
        known = as_devices(devices) if devices is not None else [None] * len(modules)
        timed = [_TimedReplica(recorder, i, m, d) for i, (m, d) in enumerate(zip(modules, known, strict=False))]
        return parallel_apply(timed, inputs, kwargs_tup, devices)

    return parallel_apply_observed


def _observed_gather(recorder, gather: Callable) -> Callable:
    @functools.wraps(gather)
    def gather_observed(outputs: Any, target_device: Any, dim: int = 0) -> Any:
        target = as_device(target_device)
        with recorder.span("gather", target, None, outputs) as span:
            span.bytes_copied = bytes_of(outputs)
            result = gather(outputs, target_device, dim)
        for node in _nodes(tensors_in(result), "GatherBackward"):
            recorder.time_node(node, "gather-backward", target, functools.partial(_sent_back, target))
        return result

    return gather_observed


def _sent_back(target: torch.device, per_replica: tuple, grads: tuple) -> tuple[tuple, int]:
    """Gather's backward splits the gradient and copies each replica's part that lives elsewhere back to it."""
    return grads, bytes_of([g for g in per_replica if g is not None and g.device != target])


OBSERVERS = {
    "scatter": _observed_scatter,
    "replicate": _observed_replicate,
    "parallel_apply": _observed_parallel_apply,
    "gather": _observed_gather,
}


@contextlib.contextmanager
def observed_steps(recorder) -> Iterator[None]:
    """Swap every dpcourse reference to the four steps for its timed stand-in, and swap back on exit."""
    swapped: list[tuple[Any, str, Callable]] = []
    stand_ins = {}  # id(original step) -> (original, its stand-in); the originals stay alive, so ids are theirs
    for step, module_name in STEP_MODULES.items():
        original = getattr(importlib.import_module(module_name), step)
        stand_ins[id(original)] = original, OBSERVERS[step](recorder, original)
    try:
        for module in [m for name, m in list(sys.modules.items()) if name.partition(".")[0] == "dpcourse"]:
            for attribute, value in list(vars(module).items()):
                if id(value) in stand_ins:
                    original, stand_in = stand_ins[id(value)]
                    setattr(module, attribute, stand_in)
                    swapped.append((module, attribute, original))
        yield
    finally:
        for module, attribute, original in swapped:
            setattr(module, attribute, original)
