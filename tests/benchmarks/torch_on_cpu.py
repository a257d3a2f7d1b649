"""Run torch's own DataParallel Python code on N CPU "devices", for benchmarks and oracle tests only.

``torch.nn.parallel`` (``data_parallel.py``, ``scatter_gather.py``, ``replicate.py``, ``parallel_apply.py``,
``_functions.py``, ``comm.py``) is Python on top of a few CUDA-only pieces. Inside ``torch_on_cpu()`` this
module supplies CPU equivalents of exactly those pieces with ``unittest.mock.patch``, so that
``torch.nn.DataParallel(model, device_ids=range(n))`` and ``torch.nn.parallel.data_parallel`` run their
real Python code, with device index ``i`` meaning "CPU device i":

* ``torch._C._broadcast_coalesced``, ``_scatter`` and ``_gather`` exist only in CUDA builds. The versions
  here follow ``torch/csrc/cuda/comm.cpp`` step by step: broadcast returns the inputs themselves for
  ``devices[0]`` (replica 0 aliases the module) and flattened, copied, unflattened tensors for the others,
  bucketed like ``torch::utils::take_tensors``; scatter chunks and moves each chunk with
  ``.to(device, copy=False)`` (a no-op on the CPU, so chunks are views, like a chunk already on its GPU);
  gather allocates the result (keeping a common memory format) and copies each input into its slice.
* ``torch.device(type, index)`` as seen by ``data_parallel.py`` and ``comm.py``: a CPU tensor's device
  has no index, so ``torch.device("cpu", i)`` is made to mean ``torch.device("cpu")``; otherwise
  DataParallel's placement check fails and ``reduce_add`` cannot name its destination (``get_device()``
  is -1 for a CPU tensor).
* ``_get_available_device_type()`` as seen by ``data_parallel.py`` answers ``"cpu"``; with ``None`` the
  wrapper is a pass-through, which is what torch's DataParallel does on a machine without a GPU.
* ``torch.accelerator`` as seen by ``parallel_apply.py``: available, type ``cpu``, and streams and
  device guards that do nothing (the CPU has neither).
* Three guards that refuse CPU tensors (``Broadcast.forward``, ``Gather.forward``, ``comm.reduce_add``):
  these functions are recompiled from torch's own source with that one ``if ...: raise AssertionError``
  statement left out, so every other line is torch's.

Device ids are plain integers, as torch's code expects everywhere, so ``_get_device_index`` (which refuses
``"cpu"``) never sees a CPU device and needs no patch. Nothing outside ``torch.nn.parallel`` changes, and
dpcourse never imports ``torch.nn.parallel``, so dpcourse runs unaffected inside the context.
"""

import ast
import contextlib
import importlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

import torch
import torch.nn.parallel.comm as torch_comm
from torch._utils import _flatten_dense_tensors, _reorder_tensors_as, _unflatten_dense_tensors
from torch.nn.parallel._functions import Broadcast, Gather

# Not `import torch.nn.parallel.data_parallel as ...`: torch.nn.parallel's functions of the same names shadow them.
torch_data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
torch_parallel_apply = importlib.import_module("torch.nn.parallel.parallel_apply")

CPU = torch.device("cpu")


def _take_tensors(tensors: Sequence[torch.Tensor], size_limit: int) -> list[list[torch.Tensor]]:
    """Buckets of one dtype and layout; a bucket closes once it holds ``size_limit`` bytes (C++ take_tensors)."""
    results: list[list[torch.Tensor]] = []
    groups: dict[tuple, tuple[list[torch.Tensor], int]] = {}
    for tensor in tensors:
        key = (tensor.dtype, tensor.layout)
        group, size = groups.get(key, ([], 0))
        group.append(tensor)
        size += tensor.numel() * tensor.element_size()
        if size >= size_limit:
            results.append(group)
            group, size = [], 0
        groups[key] = (group, size)
    results.extend(group for group, _ in groups.values() if group)
    return results


def _broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[int], buffer_size: int) -> list[list]:
    if any(t.is_sparse for t in tensors):
        raise NotImplementedError("torch_on_cpu's broadcast_coalesced handles dense tensors only.")
    outputs: list[list[torch.Tensor]] = [list(tensors)] + [[] for _ in devices[1:]]
    buckets = _take_tensors(tensors, buffer_size)
    for bucket in buckets:
        flat = _flatten_dense_tensors(bucket)
        for device_outputs in outputs[1:]:
            # .data: a fresh version counter per tensor (NOTE [ Version Counter in comm.*_coalesced ]).
            device_outputs.extend(t.data for t in _unflatten_dense_tensors(flat.clone(), bucket))
    if len({(t.dtype, t.layout) for t in tensors}) > 1:
        outputs[1:] = [list(_reorder_tensors_as(o, tensors)) for o in outputs[1:]]
    return outputs


def _scatter(
    tensor: torch.Tensor, devices: Sequence[int], chunk_sizes: Sequence[int] | None, dim: int, streams: Any
) -> list[torch.Tensor]:
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(
            f"Expected devices and chunk_sizes to be of same length, but got len(devices) = {len(devices)} "
            f"and len(chunk_sizes) = {len(chunk_sizes)}"
        )
    chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None else tensor.chunk(len(devices), dim)
    return [c.to(CPU, non_blocking=True, copy=False, memory_format=torch.preserve_format) for c in chunks]


def _suggest_memory_format(tensor: torch.Tensor) -> torch.memory_format:
    """Python's stand-in for C++ ``Tensor::suggest_memory_format``: channels-last strides, else contiguous."""
    for dims, channels_last in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if tensor.dim() == dims and tensor.is_contiguous(memory_format=channels_last) and not tensor.is_contiguous():
            return channels_last
    return torch.contiguous_format


def _gather(tensors: Sequence[torch.Tensor], dim: int, destination: int | None) -> torch.Tensor:
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    if not -max(first.dim(), 1) <= dim < max(first.dim(), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-first.dim()}, {first.dim() - 1}])")
    dim = dim % max(first.dim(), 1)
    expected = list(first.shape)
    memory_format = _suggest_memory_format(first)
    for i, tensor in enumerate(tensors):
        if tensor.dim() != len(expected):
            raise RuntimeError(
                f"Expected all input tensors to have the same number of dimensions, but tensor at index {i} "
                f"has {tensor.dim()} dimensions, (expected {len(expected)})"
            )
        expected[dim] = tensor.size(dim)
        if list(tensor.shape) != expected:
            raise RuntimeError(
                f"Input tensor at index {i} has invalid shape {list(tensor.shape)}, but expected {expected}"
            )
        if memory_format != torch.contiguous_format and _suggest_memory_format(tensor) != memory_format:
            memory_format = torch.contiguous_format
    expected[dim] = sum(t.size(dim) for t in tensors)
    result = torch.empty(expected, dtype=first.dtype, device=CPU, memory_format=memory_format)
    for part, tensor in zip(result.split([t.size(dim) for t in tensors], dim), tensors, strict=True):
        part.copy_(tensor)
    return result


def _cpu_device(kind: Any, index: int | None = None) -> torch.device:
    """``torch.device``, except that "cpu" with any index (a CPU tensor's ``get_device()`` is -1) is the CPU."""
    if str(kind).startswith("cpu"):
        return CPU
    return torch.device(kind) if index is None else torch.device(kind, index)


# The CPU has no streams and no current device: entering one, or waiting on one, does nothing.
_CPU_ACCELERATOR = types.SimpleNamespace(
    is_available=lambda: True,
    current_accelerator=lambda: CPU,
    current_stream=lambda device=None: contextlib.nullcontext(),
    device_index=lambda device: contextlib.nullcontext(),
)


def _torch_with(**overrides: Any) -> types.ModuleType:
    """A stand-in for the ``torch`` module as one file of torch.nn.parallel sees it: torch, bar ``overrides``."""

    class TorchView(types.ModuleType):
        def __getattr__(self, name: str) -> Any:  # torch's lazily loaded submodules
            return getattr(torch, name)

    view = TorchView("torch")
    view.__dict__.update(vars(torch))  # a copy, so lookups cost what they cost on torch itself
    view.__dict__.update(overrides)
    return view


def _without_cpu_guard(function: Callable) -> Callable:
    """``function`` recompiled from torch's source with its one "not on CPU" ``raise AssertionError`` left out."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    definition = tree.body[0]
    definition.decorator_list = []
    removed = 0

    class DropGuard(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> ast.AST | None:
            nonlocal removed
            body = node.body[0]
            if len(node.body) == 1 and isinstance(body, ast.Raise) and "AssertionError" in ast.unparse(body):
                if "CPU" in ast.unparse(body):
                    removed += 1
                    return None
            return self.generic_visit(node)

    DropGuard().visit(definition)
    if removed != 1:
        raise RuntimeError(f"Expected one CPU guard in {function.__qualname__}, found {removed}: torch changed.")
    _, first_line = inspect.getsourcelines(function)
    ast.increment_lineno(tree, first_line - 1)
    namespace: dict[str, Any] = {}
    code = compile(ast.fix_missing_locations(tree), inspect.getsourcefile(function), "exec")
    exec(code, function.__globals__, namespace)
    return namespace[function.__name__]


@contextlib.contextmanager
def torch_on_cpu() -> Iterator[None]:
    """Inside this block torch's DataParallel runs its real code on CPU devices ``device_ids=range(n)``.

    Build the ``torch.nn.DataParallel`` inside the block too: outside it, with no GPU, the constructor
    makes a pass-through wrapper.
    """
    patches = [
        mock.patch.object(torch._C, "_broadcast_coalesced", _broadcast_coalesced, create=True),
        mock.patch.object(torch._C, "_scatter", _scatter, create=True),
        mock.patch.object(torch._C, "_gather", _gather, create=True),
        mock.patch.object(torch_data_parallel, "torch", _torch_with(device=_cpu_device)),
        mock.patch.object(torch_data_parallel, "_get_available_device_type", lambda: "cpu"),
        mock.patch.object(torch_comm, "torch", _torch_with(device=_cpu_device)),
        mock.patch.object(torch_parallel_apply, "torch", _torch_with(accelerator=_CPU_ACCELERATOR)),
        mock.patch.object(Broadcast, "forward", staticmethod(_without_cpu_guard(Broadcast.forward))),
        mock.patch.object(Gather, "forward", staticmethod(_without_cpu_guard(Gather.forward))),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        # After the torch view of comm.py is in place: the recompiled reduce_add looks torch up there.
        stack.enter_context(mock.patch.object(torch_comm, "reduce_add", _without_cpu_guard(torch_comm.reduce_add)))
        yield
