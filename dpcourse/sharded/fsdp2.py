"""FSDP2, torch's ZeRO-3: ``fully_shard`` each layer of the course's model on a device mesh, train it, and look.

    mesh = init_device_mesh("cpu", (world_size,))      # one dimension: every rank holds one shard
    for layer in linear_layers(model):
        fully_shard(layer, mesh=mesh)                   # one unit: its parameters are gathered together
    fully_shard(model, mesh=mesh)                       # the root: whatever is left, and the step's bookkeeping
    optimizer = torch.optim.Adam(model.parameters())    # after fully_shard: the parameters are new objects

``fully_shard`` (``torch/distributed/fsdp/_fully_shard/_fully_shard.py``) replaces each parameter of the
module by a ``DTensor`` sharded on dim 0 (``Shard(dim=0)``): rank r keeps rows ``torch.chunk``'s piece r, the
same rule as lesson 18's ``shard_range`` applied to each parameter's rows, so a rank past the last row holds
an empty shard (``_fsdp_param.py: FSDPParam._init_sharded_param``). A forward pre-hook all-gathers a unit's
parameters and swaps plain, full ``nn.Parameter``s in; after the forward it frees them again unless
``reshard_after_forward=False``; the backward gathers them again (if freed) and reduce-scatters the gradients.

These are training programs for ``ranks.train_on_ranks``, with measurements for lesson 21:
``watched_step`` counts the collectives of one step and the bytes of full (gathered) parameters held.
"""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from ..examples import regression_loss
from ..memory.accounting import state_tensors
from ..ranks.launcher import device
from ..ranks.traffic import counted


def linear_layers(model: nn.Module) -> list[nn.Linear]:
    """The model's ``nn.Linear`` modules, in order: the units the course shards one by one."""
    return [module for module in model.modules() if isinstance(module, nn.Linear)]


def mesh_of_all_ranks() -> DeviceMesh:
    """A one-dimensional mesh over every rank, on this rank's device type (``cpu`` under gloo, ``cuda`` under NCCL)."""
    return init_device_mesh(device().type, (dist.get_world_size(),))


def shard_model(model: nn.Module, mesh: DeviceMesh, *, per_layer: bool = True, reshard_after_forward: bool = True,
                mp_policy: MixedPrecisionPolicy | None = None) -> nn.Module:
    """``fully_shard`` each Linear layer (if ``per_layer``), then the whole model; returns the same module.

    Children first: the root's call takes only the parameters no inner call took. With ``per_layer=False`` the
    root is one unit and every forward gathers the whole model at once.
    """
    options = {"mesh": mesh, "reshard_after_forward": reshard_after_forward,
               "mp_policy": mp_policy or MixedPrecisionPolicy()}
    if per_layer:
        for layer in linear_layers(model):
            fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: its shard for a DTensor, the tensor itself otherwise."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def full_bytes_held(model: nn.Module) -> int:
    """Bytes of the model's parameters that are full, gathered tensors right now (not sharded ``DTensor``s)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def layout(model: nn.Module) -> list[dict]:
    """Per parameter: its name, type, placements, the full shape and this rank's local shape."""
    return [{"name": name, "type": type(p).__name__, "placements": str(getattr(p, "placements", "")),
             "shape": tuple(p.shape), "local": tuple(local(p).shape)} for name, p in model.named_parameters()]


def local_bytes(tensors) -> int:
    """Bytes of this rank's parts of ``tensors`` (``None`` skipped)."""
    return sum(local(t).numel() * local(t).element_size() for t in tensors if t is not None)


def watched_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One training step, and what it did: the collectives of the forward and of the backward (names, in order),
    the largest bytes of full parameters held during the forward, and those still held when the backward starts."""
    peak = [0]

    def note(module, args):
        peak[0] = max(peak[0], full_bytes_held(model))

    hooks = [layer.register_forward_pre_hook(note) for layer in linear_layers(model)]  # after FSDP's: gathered
    optimizer.zero_grad()
    with counted() as forward:
        loss = regression_loss(model(x), y)
    held = full_bytes_held(model)
    with counted() as backward:
        loss.backward()
    optimizer.step()
    for hook in hooks:
        hook.remove()
    return {"forward": forward.collectives, "backward": backward.collectives, "peak_full_bytes": peak[0],
            "held_after_forward": held}


def fsdp2_program(model: nn.Module, batches: list, lr: float, per_layer: bool = True,
                  reshard_after_forward: bool = True, then: Callable[..., dict] | None = None) -> dict:
    """Train with FSDP2 and Adam; return the full parameters, the layout, the first step's watch and the bytes
    this rank holds: parameters, gradients and Adam's state, each only its shard. ``then(model, optimizer)``,
    if given, runs after the training (a checkpoint, say) and adds what it returns."""
    shard_model(model, mesh_of_all_ranks(), per_layer=per_layer, reshard_after_forward=reshard_after_forward)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = [watched_step(model, optimizer, x, y) for x, y in batches]
    more = then(model, optimizer) if then else {}
    return {**more, "parameters": [p.full_tensor() for p in model.parameters()], "layout": layout(model),
            "step": steps[0], "bytes": {"parameters": local_bytes(model.parameters()),
                      "gradients": local_bytes(p.grad for p in model.parameters()),
                      "optimizer state": local_bytes(state_tensors(optimizer))}}


def mixed_precision_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, str]:
    """One FSDP2 forward and backward under ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``:
    the dtypes the first layer computes with (seen from inside its forward), of its input and output, of the
    model's output, of the stored shard and of the gradient afterwards."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    shard_model(model, mesh_of_all_ranks(), mp_policy=policy)
    first = linear_layers(model)[0]
    seen = {}
    first.register_forward_pre_hook(lambda module, args: seen.update(weight=module.weight.dtype, input=args[0].dtype))
    first.register_forward_hook(lambda module, args, output: seen.update(output=output.dtype))
    output = model(x)
    regression_loss(output.float(), y).backward()
    dtypes = {"weight inside the forward": seen["weight"], "layer input": seen["input"],
              "layer output": seen["output"], "model output": output.dtype, "stored shard": first.weight.dtype,
              "gradient": first.weight.grad.dtype}
    return {name: str(dtype).removeprefix("torch.") for name, dtype in dtypes.items()}
