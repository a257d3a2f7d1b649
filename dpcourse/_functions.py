# The core, mirror of torch/nn/parallel/_functions.py.
"""The four autograd Functions behind DataParallel, and why each backward is what it is.

Each forward moves data one way; its backward moves the gradient the opposite way:

=============  =====================================  =========================================
Function       forward                                backward
=============  =====================================  =========================================
Scatter        split a batch into chunks, one per      Gather: concatenate the chunks' gradients
               device                                  back on the input's device
Gather         concatenate replica outputs on one      Scatter: split the gradient with the same
               device                                  chunk sizes, back to each replica
Broadcast      copy parameters to every device         ReduceAdd: **sum** the copies' gradients
ReduceAdd      sum tensors from every device           Broadcast: copy the gradient to every device
=============  =====================================  =========================================

Because every backward is itself made of these Functions, double backward (a gradient penalty) works.
torch's versions live in ``torch/nn/parallel/_functions.py``.
"""

import warnings

import torch
from torch.autograd import Function

from .comm import broadcast_coalesced, reduce_add_coalesced

__all__ = ["Broadcast", "Gather", "ReduceAdd", "Scatter"]

SCALAR_GATHER_WARNING = (
    "Was asked to gather along dimension 0, but all input tensors were scalars; "
    "will instead unsqueeze and return a vector."
)


class Scatter(Function):
    """Split ``input`` along ``dim`` (``torch.chunk`` rule, or the given sizes) and move chunk i to devices[i]."""

    @staticmethod
    def forward(ctx, devices, chunk_sizes, dim, input):
        ctx.dim = dim
        ctx.input_device = input.device
        if chunk_sizes is None:
            chunks = input.chunk(len(devices), dim)
        else:
            chunks = input.split(chunk_sizes, dim)
        # .to() returns the chunk itself when it is already there: chunk 0 is then a view of the input.
        return tuple(chunk.to(device, non_blocking=True) for chunk, device in zip(chunks, devices, strict=False))

    @staticmethod
    def backward(ctx, *grad_chunks):
        return None, None, None, Gather.apply(ctx.input_device, ctx.dim, *grad_chunks)


class Gather(Function):
    """Concatenate one tensor per replica along ``dim`` into a new tensor on ``target_device``."""

    @staticmethod
    def forward(ctx, target_device, dim, *inputs):
        ctx.unsqueezed_scalar = dim == 0 and all(t.dim() == 0 for t in inputs)
        if ctx.unsqueezed_scalar:
            warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=2)
            inputs = tuple(t.view(1) for t in inputs)
        _check_same_shape_but_dim(inputs, dim)
        ctx.dim = dim
        ctx.input_devices = [t.device for t in inputs]
        ctx.input_sizes = [t.size(dim) for t in inputs]
        shape = list(inputs[0].shape)
        shape[dim] = sum(ctx.input_sizes)
        # Like torch: the result takes the first output's dtype (later outputs are cast as they are copied in)
        # and its memory format, if every output has that format.
        result = torch.empty(shape, dtype=inputs[0].dtype, device=target_device, memory_format=_common_format(inputs))
        for part, t in zip(result.split(ctx.input_sizes, dim), inputs, strict=True):
            part.copy_(t, non_blocking=True)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        grads = Scatter.apply(ctx.input_devices, ctx.input_sizes, ctx.dim, grad_output)
        if ctx.unsqueezed_scalar:
            grads = tuple(g[0] for g in grads)
        return (None, None) + tuple(grads)


def _memory_format(tensor: torch.Tensor) -> torch.memory_format:
    """``channels_last`` for a 4-d (``channels_last_3d`` for a 5-d) tensor laid out that way, else contiguous."""
    for dims, layout in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if tensor.dim() == dims and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=layout):
            return layout
    return torch.contiguous_format


def _common_format(inputs: tuple[torch.Tensor, ...]) -> torch.memory_format:
    """The first output's memory format if all share it, else contiguous (torch's C++ ``gather`` does the same)."""
    first = _memory_format(inputs[0])
    return first if all(_memory_format(t) == first for t in inputs[1:]) else torch.contiguous_format


def _check_same_shape_but_dim(inputs: tuple[torch.Tensor, ...], dim: int) -> None:
    first = inputs[0]
    for i, t in enumerate(inputs[1:], start=1):
        if t.dim() != first.dim():  # torch's C++ gather raises RuntimeError for these two as well
            raise RuntimeError(
                f"Cannot gather: replica {i} returned a {t.dim()}-d tensor but replica 0 a {first.dim()}-d one. "
                f"Every replica must return tensors of the same rank."
            )
    if first.dim() == 0:  # torch: "Dimension specified as ... but tensor has no dimensions" (IndexError)
        raise IndexError(
            f"Cannot gather scalar outputs along dim={dim}: a scalar has no dimension {dim}. "
            f"Gather scalars with dim=0 (they become a vector), or return tensors with a batch dimension."
        )
    if not -first.dim() <= dim < first.dim():
        raise IndexError(
            f"Cannot gather along dim={dim}: the outputs have {first.dim()} dimensions "
            f"(valid dims are {-first.dim()} .. {first.dim() - 1})."
        )
    expected = list(first.shape)
    del expected[dim]
    for i, t in enumerate(inputs[1:], start=1):
        shape = list(t.shape)
        del shape[dim]
        if shape != expected:
            raise RuntimeError(
                f"Cannot gather: replica {i} returned shape {list(t.shape)} but replica 0 returned "
                f"{list(first.shape)}. Outputs may differ only along the gather dim ({dim}); "
                f"make every replica return the same shape apart from its batch size."
            )


class Broadcast(Function):
    """Copy ``inputs`` (all on ``devices[0]``) to every device; returns them flat, device by device."""

    @staticmethod
    def forward(ctx, devices, *inputs):
        if not inputs:
            return ()
        ctx.num_inputs = len(inputs)
        ctx.input_device = inputs[0].device
        copies = broadcast_coalesced(inputs, devices)
        needs_grad = ctx.needs_input_grad[1:]
        frozen = [c for per_device in copies for c, needs in zip(per_device, needs_grad, strict=True) if not needs]
        ctx.mark_non_differentiable(*frozen)
        return tuple(c for per_device in copies for c in per_device)

    @staticmethod
    def backward(ctx, *grad_outputs):
        return (None,) + ReduceAdd.apply(ctx.input_device, ctx.num_inputs, *grad_outputs)


class ReduceAdd(Function):
    """Sum ``grads`` (``num_inputs`` tensors per device, device by device) onto ``destination``."""

    @staticmethod
    def forward(ctx, destination, num_inputs, *grads):
        per_replica = [grads[i : i + num_inputs] for i in range(0, len(grads), num_inputs)]
        ctx.devices = [replica_grads[0].device for replica_grads in per_replica]
        return tuple(reduce_add_coalesced(per_replica, destination))

    @staticmethod
    def backward(ctx, *grad_outputs):
        return (None, None) + Broadcast.apply(ctx.devices, *grad_outputs)
