"""Training programs for tests/test_zero1.py that run on real ranks: right ones, wrong ones and planted worlds.

They live apart from the tests so that a rank, which imports a program by its module's name, imports only this
small module (torch and nothing of the test suite).
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def gathers_into_one_tensor(model, batches, lr):
    shard = torch.ones(2)
    gathered = torch.empty(2 * dist.get_world_size())
    dist.all_gather_into_tensor(gathered, shard)
    return list(model.parameters())


def raises(model, batches, lr):
    raise ValueError("my own mistake")


def returns_shards(model, batches, lr):
    return [p[:1] for p in model.parameters()]


def only_rank_0_reduces(model, batches, lr):
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(3))
    return list(model.parameters())


def rank_0_steps_and_broadcasts(model, batches, lr):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr) if dist.get_rank() == 0 else None
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        if optimizer:
            optimizer.step()
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
    return list(model.parameters())


def sgd_sharded(model, batches, lr, average=True):
    """ZeRO-1's shape with SGD instead of Adam: the step is proportional to the gradient."""
    parameters = list(model.parameters())
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in parameters)
        dist.all_reduce(gradient)
        gradient /= dist.get_world_size() if average else 1
        with torch.no_grad():
            vector_to_parameters(parameters_to_vector(parameters) - lr * 50 * gradient, parameters)
    return parameters


def ddp_training(model, batches, lr):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        optimizer.step()
    return list(model.parameters())


def zero1(model, batches, lr, all_reduce=True, all_gather=True, split="ceil"):
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    numel, size = flat.numel(), math.ceil(flat.numel() / n)
    if split == "ceil":
        start, stop = min(rank * size, numel), min((rank + 1) * size, numel)
    else:  # numpy's array_split: the first numel % n ranks one longer; gathered as if every shard were ceil-sized
        base, extra = divmod(numel, n)
        start = rank * base + min(rank, extra)
        stop = start + base + (rank < extra)
    mine = flat[start:stop].clone().requires_grad_()
    optimizer = torch.optim.Adam([mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in parameters)
        if all_reduce:
            dist.all_reduce(gradient)
            gradient /= n
        mine.grad = gradient[start:stop]
        optimizer.step()
        with torch.no_grad():
            if all_gather:
                padded = mine.new_zeros(size)
                padded[: stop - start] = mine
                pieces = [torch.empty_like(padded) for _ in range(n)]
                dist.all_gather(pieces, padded)
                flat = torch.cat(pieces)[:numel]
            else:
                flat = parameters_to_vector(parameters).clone()
                flat[start:stop] = mine
            vector_to_parameters(flat, parameters)
    return parameters


def zero1_without(**flags):
    def zero1_training(model, batches, lr):
        return zero1(model, batches, lr, **flags)

    return zero1_training


def logged_bucket_bytes_before_and_after_a_rebuild():
    """DDP's own report of its buckets' bytes (``ddp.demos.memory.bucket_bytes``) after each of two steps of
    ``sharded.ddp_buckets.model()``, whose buckets DDP rebuilds after the first."""
    from dpcourse.ddp.demos.memory import bucket_bytes
    from dpcourse.sharded import ddp_buckets

    ddp_model = torch.nn.parallel.DistributedDataParallel(ddp_buckets.model(), bucket_cap_mb=ddp_buckets.BUCKET_CAP_MB)
    reported = []
    for _ in range(2):
        ddp_model(torch.ones(2, ddp_buckets.WIDTH)).sum().backward()
        reported.append(bucket_bytes(ddp_model))
    return reported
