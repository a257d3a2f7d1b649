"""Lesson 21's planted mistakes in ``train_with_fsdp2``, in a module of their own: the ranks import it by name (as
they import any importable training program, ``ranks.train_on_ranks``), so it imports little."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def fsdp2(model, batches):
    mesh = init_device_mesh(batches[0][0].device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return [type(p).__name__ for p in model.parameters()]


def optimizer_before_fully_shard(model, batches, lr):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    types = fsdp2(model, batches)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": [p.full_tensor() for p in model.parameters()], "types": types}


def loss_divided_by_ranks(model, batches, lr):
    types = fsdp2(model, batches)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        (F.mse_loss(model(x), y) / dist.get_world_size()).backward()
        optimizer.step()
    return {"parameters": [p.full_tensor() for p in model.parameters()], "types": types}


def no_zero_grad(model, batches, lr):
    types = fsdp2(model, batches)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": [p.full_tensor() for p in model.parameters()], "types": types}


def returns_local_shards(model, batches, lr):
    types = fsdp2(model, batches)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": [p.to_local() for p in model.parameters()], "types": types}


def never_sharded(model, batches, lr):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": list(model.parameters()), "types": [type(p).__name__ for p in model.parameters()]}
