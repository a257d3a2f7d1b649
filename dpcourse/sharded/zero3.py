"""ZeRO stage 3 by hand, FSDP's idea: each layer's parameters live as shards, whole only while the layer runs.

ZeRO-1 and ZeRO-2 shard the optimizer state and the gradients; every rank still holds all the parameters.
ZeRO-3 shards those too. Each layer's parameters are flattened into one vector and rank ``r`` keeps the slice
``shard_range`` gives it, and nothing else of the layer. Then, layer by layer:

1. **before its forward**, an all-gather puts the whole vector together on every rank (``gather_full``: the
   shards padded to one size, as in ZeRO-1); the layer runs on views of it (``torch.func.functional_call``);
2. **after its forward**, the vector's memory is given back (*reshard*): ``untyped_storage().resize_(0)``, which
   is FSDP2's ``free_storage`` (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``). Autograd still holds
   the views it saved for backward (a Linear saves its weight), but no longer their memory;
3. **before its backward**, a hook on the layer's output (FSDP registers the same kind,
   ``torch/distributed/fsdp/_runtime_utils.py: _register_pre_backward_hooks``) gives the storage its size back
   and all-gathers into it again, so the saved views read the weights again;
4. **its backward** ends in the backward of the all-gather, which is a **reduce-scatter**: each rank receives
   the sum of every rank's gradient for its own slice, divides it by the number of ranks (DDP's average,
   ``shard_of_gradient``) and frees the gathered vector again. Adam then updates each rank's slices: its state
   is 1/n of DDP's.

With ``prefetch=True`` the next layer's all-gather is started before the current layer runs (in forward, the
next layer; in backward, the previous one), so that it can travel while the current layer computes; two layers
are whole at once. ``reshard=False`` keeps each layer whole from its forward to its backward: one all-gather
per layer and step instead of two, and the memory of whole layers during backward (FSDP's
``reshard_after_forward=False``).

``program`` is a training program for ``ranks.train_on_ranks``. ``gather`` and ``scatter`` replace the
two collectives with a learner's own (lesson 20's exercises). The padding, the all-gather and the
reduce-scatter are ``collectives.py``'s, as ZeRO-1's and ZeRO-2's are; inside ``rings.ring_collectives()`` they
run as rings of point-to-point messages, whose bytes ``ranks.traffic.counted`` counts (lesson 20's measurements).
"""

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parameters_to_vector

from ..examples import regression_loss
from .collectives import all_gather_padded, reduce_scatter_padded, shard_range


def gather_full(shard: torch.Tensor, numel: int, into: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, dist.Work | None]:
    """Start the all-gather of every rank's ``shard`` of a vector of ``numel`` numbers (padded to one size, into
    ``into`` if given); return the vector, and the work to ``wait()`` for before reading it (``None`` when it is
    already there). Asynchronous, so that a prefetch can travel while a layer computes."""
    return all_gather_padded(shard, numel, into, async_op=True)


def shard_of_gradient(full_grad: torch.Tensor) -> torch.Tensor:
    """This rank's slice of the gradient averaged over the ranks: the reduce-scatter of the padded ``full_grad``
    sums, so divide by ``n``."""
    return reduce_scatter_padded(full_grad) / dist.get_world_size()


class _Gathered(torch.autograd.Function):
    """Forward: the layer's whole flat parameters, all-gathered. Backward: the reduce-scatter of their gradient."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, layer: "Layer") -> torch.Tensor:
        ctx.layer = layer
        return layer.wait()

    @staticmethod
    def backward(ctx, full_grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        layer = ctx.layer
        grad = layer.scatter(full_grad)
        layer.free()
        return grad, None


class Layer:
    """One module's parameters as a flat vector, of which this rank keeps its slice, ``shard``, and only that.

    The module keeps its code: ``to_empty(device="meta")`` replaces its own parameters with tensors that hold
    no memory, and it runs on views of the gathered vector instead.
    """

    def __init__(self, module: nn.Module, gather: Callable | None = None, scatter: Callable | None = None) -> None:
        self.module = module
        self.shapes = {name: p.shape for name, p in module.named_parameters()}
        flat = parameters_to_vector(module.parameters()).detach()
        self.numel = flat.numel()
        start, stop = shard_range(self.numel, dist.get_rank(), dist.get_world_size())
        self.shard = flat[start:stop].clone().requires_grad_()  # what this rank's optimizer updates
        self.gather, self.scatter_fn = gather, scatter
        self.full: torch.Tensor | None = None  # the gathered vector, from the first forward on
        self.ready: torch.Tensor | None = None  # a gather started, not yet waited for
        self.pending: dist.Work | None = None
        module.to_empty(device="meta")

    def start(self, into: torch.Tensor | None = None) -> None:
        """Start gathering the whole vector, into ``into``'s memory if given; ``wait()`` returns it."""
        if self.gather is None:
            self.ready, self.pending = gather_full(self.shard.detach(), self.numel, into)
            return
        full = self.gather(self.shard.detach(), self.numel)  # a learner's gather: synchronous, a new tensor
        if not isinstance(full, torch.Tensor) or full.shape != (self.numel,):
            got = tuple(full.shape) if isinstance(full, torch.Tensor) else type(full).__name__
            raise ValueError(f"gather returned {got} for a layer of {self.numel} parameters: return the whole "
                             f"vector, shape ({self.numel},), with the padding cut off.")
        self.ready = full if into is None else into[self.offset:self.offset + self.numel].copy_(full)

    def wait(self) -> torch.Tensor:
        """The vector the last ``start`` gathers (started now if none was), once it has arrived."""
        if self.ready is None:
            self.start()
        if self.pending is not None:
            self.pending.wait()
        ready, self.ready, self.pending = self.ready, None, None
        return ready

    def unshard(self) -> torch.Tensor:
        """The whole flat vector, as the output of ``_Gathered``: its backward reduce-scatters the gradient."""
        self.full = _Gathered.apply(self.shard, self)
        self.nbytes, self.offset = self.full.untyped_storage().nbytes(), self.full.storage_offset()
        return self.full

    def regather(self) -> None:
        """Give the freed vector its memory back and start gathering into it: the views autograd saved see it."""
        storage = self.full.untyped_storage()
        storage.resize_(self.nbytes)
        # A tensor on the same memory with a version counter of its own: writing through ``self.full`` itself
        # would tell autograd that the saved views were modified in place, and backward would refuse them.
        self.start(into=torch.empty(0, dtype=self.full.dtype, device=self.full.device).set_(storage))

    def free(self) -> None:
        """Reshard: give the gathered vector's memory back; the tensor object stays, holding nothing."""
        self.full.untyped_storage().resize_(0)

    def scatter(self, full_grad: torch.Tensor) -> torch.Tensor:
        """This rank's slice of the averaged gradient, by the library's reduce-scatter or the learner's."""
        if self.scatter_fn is None:
            return shard_of_gradient(full_grad)
        mine = self.scatter_fn(full_grad)
        if not isinstance(mine, torch.Tensor) or mine.shape != self.shard.shape:
            got = tuple(mine.shape) if isinstance(mine, torch.Tensor) else type(mine).__name__
            raise ValueError(f"scatter returned {got}; this rank's slice of a layer of {self.numel} parameters is "
                             f"{tuple(self.shard.shape)} (shard_range): cut the padding off.")
        return mine

    def views(self, full: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter of the module as a view of the flat vector, by name, for ``functional_call``."""
        views, offset = {}, 0
        for name, shape in self.shapes.items():
            numel = math.prod(shape)
            views[name] = full[offset:offset + numel].view(shape)
            offset += numel
        return views

    def gathered(self) -> list[torch.Tensor]:
        """The layer's whole parameters, gathered once more, in ``parameters()`` order (for the results)."""
        self.start()
        full = self.wait()
        return [view.detach().clone() for view in self.views(full).values()]


class Zero3:
    """Runs an ``nn.Sequential`` whose layers with parameters are ``Layer``s: gathered, run, freed, one by one."""

    def __init__(self, model: nn.Sequential, prefetch: bool = False, reshard: bool = True,
                 gather: Callable | None = None, scatter: Callable | None = None) -> None:
        self.model, self.prefetch, self.reshard = model, prefetch, reshard
        self.layers = [Layer(module, gather, scatter) for module in model if any(True for _ in module.parameters())]
        self.of = {id(layer.module): layer for layer in self.layers}

    def shards(self) -> list[torch.Tensor]:
        return [layer.shard for layer in self.layers]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.model:
            layer = self.of.get(id(module))
            if layer is None:  # a ReLU: nothing to gather
                x = module(x)
                continue
            full = layer.unshard()
            if self.prefetch:
                self._start_next(layer, +1)
            x = functional_call(module, layer.views(full), (x,))
            if self.reshard:
                layer.free()
            if x.requires_grad:
                x.register_hook(self._before_backward(layer))
        return x

    def _start_next(self, layer: Layer, direction: int) -> None:
        """Start the gather of the layer after (+1) or before (-1) ``layer``, if there is one."""
        index = self.layers.index(layer) + direction
        if 0 <= index < len(self.layers):
            after = self.layers[index]
            after.start() if direction > 0 else after.regather()

    def _before_backward(self, layer: Layer) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            """Runs when the gradient of the layer's output is ready, just before the layer's own backward."""
            if self.reshard:
                if layer.ready is None:  # not prefetched
                    layer.regather()
                layer.wait()
                if self.prefetch:
                    self._start_next(layer, -1)

        return hook

    def parameters(self) -> list[torch.Tensor]:
        """Every layer's whole parameters, gathered, in ``model.parameters()`` order."""
        return [p for layer in self.layers for p in layer.gathered()]


def program(model: nn.Sequential, batches: list, lr: float, prefetch: bool = False, reshard: bool = True,
            gather: Callable | None = None, scatter: Callable | None = None) -> dict:
    """ZeRO-3 training with Adam on this rank's slices: a program for ``ranks.train_on_ranks``."""
    sharded = Zero3(model, prefetch, reshard, gather, scatter)
    optimizer = torch.optim.Adam(sharded.shards(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(sharded(x), y).backward()
        optimizer.step()
    return {"parameters": sharded.parameters(), "shard_numels": [layer.shard.numel() for layer in sharded.layers]}
