# %% [markdown]
# # 12 · Capstone: write DataParallel yourself
#
# **After this lesson you will have written** a DataParallel of your own, forward and backward, from five
# pieces: scatter, an autograd Function that copies the parameters (its backward is the reduce-add), replicate
# with replica 0 sharing the original's buffers, one thread per replica, and gather. The last check runs it on
# 1 to 4 CPU devices next to `dpcourse.DataParallel`: same outputs, same gradients, same BatchNorm statistics,
# same rows per replica.
#
# Each piece has a stub cell to fill in and a check cell under it. A check runs your function on a few cases
# and says, for each, whether it passed, and if not, the first value that differs and a hint. Until you write
# a piece, its check says "not attempted yet". Lessons 02 to 06 show each step in dpcourse's code.

# %%
import threading

import torch

from dpcourse import exercises

# %% [markdown]
# ## 1. Scatter
# Split the batch `x` into the chunks of `n` replicas with `torch.chunk`'s rule (lesson 02): chunks of
# `ceil(B / n)` rows, so there can be fewer chunks than replicas.

# %% tags=["solution"]
def scatter(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    """The chunks of ``x`` for ``n`` replicas, views of ``x``."""
    ### BEGIN SOLUTION
    return list(x.chunk(n))
    ### END SOLUTION


# %%
exercises.check("capstone_scatter", scatter)

# %% [markdown]
# ## 2. Broadcast, and its backward: reduce-add
# An autograd Function whose forward returns `n` copies of the parameters, flat, replica after replica.
# Replica 0 gets the tensors themselves (as torch's `broadcast_coalesced` does), the others clones. Its
# backward receives one gradient per copy and returns, for each parameter, the **sum** over the replicas
# (lesson 06 shows why the sum is the full-batch gradient).

# %% tags=["solution"]
class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, n, *tensors):
        ### BEGIN SOLUTION
        ctx.count = len(tensors)
        return (*tensors, *[t.clone() for _ in range(n - 1) for t in tensors])
        ### END SOLUTION

    @staticmethod
    def backward(ctx, *grads):
        ### BEGIN SOLUTION
        per_replica = [grads[i : i + ctx.count] for i in range(0, len(grads), ctx.count)]
        return (None, *[sum(copies) for copies in zip(*per_replica, strict=True)])
        ### END SOLUTION


# %%
exercises.check("capstone_broadcast", Broadcast.apply)

# %% [markdown]
# ## 3. Replicate
# One replica per entry of `copies`, where `copies[i]` lists replica i's tensors in `module.parameters()`
# order. A replica is a shallow copy of every submodule, made with torch's own
# `module._replicate_for_data_parallel()` (lesson 03): plain attributes stay shared, and the copy owns no
# Parameters, so each parameter's copy is set as a plain attribute. Replica 0 keeps the original buffers;
# the others get clones.

# %% tags=["solution"]
def replicate(module: torch.nn.Module, copies: list[list[torch.Tensor]]) -> list[torch.nn.Module]:
    """``len(copies)`` replicas of ``module``; replica ``i`` computes with the tensors ``copies[i]``."""
    ### BEGIN SOLUTION
    replicas = []
    for i, tensors in enumerate(copies):
        clones = {id(m): m._replicate_for_data_parallel() for m in module.modules()}
        remaining = iter(tensors)
        for original in module.modules():
            replica = clones[id(original)]
            for name, child in original._modules.items():
                replica._modules[name] = clones[id(child)]
            for name in original._parameters:
                setattr(replica, name, next(remaining))
            if i > 0:
                for name, buffer in original._buffers.items():
                    replica._buffers[name] = buffer.clone()
        replicas.append(clones[id(module)])
    return replicas
    ### END SOLUTION


# %%
exercises.check("capstone_replicate", replicate)

# %% [markdown]
# ## 4. Parallel apply
# Call `functions[i](inputs[i])` in a new thread for each replica, wait for all of them, and return the
# outputs in replica order. An exception in a thread does not reach the caller on its own: Python prints it
# and the thread just ends. So keep it, and after joining every thread raise it again, as torch's
# parallel_apply does (lesson 04; torch also names the replica and device).

# %% tags=["solution"]
def parallel_apply(functions: list, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """``[functions[i](inputs[i]) ...]``, each call in a thread of its own."""
    ### BEGIN SOLUTION
    outputs = [None] * len(functions)

    def run(i: int) -> None:
        try:
            outputs[i] = functions[i](inputs[i])
        except Exception as error:  # kept for the caller: on its own it would only end this thread
            outputs[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(functions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for output in outputs:  # the first failure in replica order, as torch raises it
        if isinstance(output, Exception):
            raise output
    return outputs
    ### END SOLUTION


# %%
exercises.check("capstone_parallel_apply", parallel_apply)

# %% [markdown]
# ## 5. Gather
# Concatenate the outputs along dim 0, replica 0 first. `torch.cat` is differentiable: its backward splits the
# gradient with the same sizes and sends each part back to its replica.

# %% tags=["solution"]
def gather(outputs: list[torch.Tensor]) -> torch.Tensor:
    """The replicas' outputs as one batch."""
    ### BEGIN SOLUTION
    return torch.cat(outputs)
    ### END SOLUTION


# %%
exercises.check("capstone_gather", gather)

# %% [markdown]
# ## 6. All together
# `data_parallel(module, x, n)`: scatter `x`, copy the parameters with `Broadcast` for as many replicas as
# there are chunks, replicate, run the replicas in parallel, gather. The check trains one step of a model with
# BatchNorm next to `dpcourse.DataParallel` on the same number of CPU devices, `["cpu"] * n`, on any machine:
# your pieces compute where the model's tensors are, and the check's model is on the CPU.

# %% tags=["solution"]
def data_parallel(module: torch.nn.Module, x: torch.Tensor, n: int) -> torch.Tensor:
    """One DataParallel forward of ``module`` on ``x`` over ``n`` replicas; backward flows to ``module``."""
    ### BEGIN SOLUTION
    chunks = scatter(x, n)
    parameters = list(module.parameters())
    flat = Broadcast.apply(len(chunks), *parameters)
    copies = [list(flat[i : i + len(parameters)]) for i in range(0, len(flat), len(parameters))]
    return gather(parallel_apply(replicate(module, copies), chunks))
    ### END SOLUTION


# %%
exercises.check("capstone_data_parallel", data_parallel)

# %% [markdown]
# ## What you built, and what torch adds
# Your `data_parallel` is DataParallel's forward and backward. torch's adds: copies in buckets of 10 MiB
# (`torch/nn/parallel/comm.py`), [CUDA streams](00_start_here.ipynb#Glossary) and devices per thread, grad mode and
# [autocast](00_start_here.ipynb#Glossary)'s on/off flag carried into the threads, not its dtype (`torch/nn/parallel/parallel_apply.py:77-80, 109`; lessons 04 and
# 16), errors re-raised with the replica's number, kwargs and nested inputs (lesson 02), nested outputs
# (lesson 05), and the shortcut for a single device.

# %% [markdown]
# ## Part III: ZeRO-1 from nothing
# This part is for after lesson 18, where you wrote each piece of [ZeRO](00_start_here.ipynb#Glossary)-1 with
# the lesson's help: come back to it once you have done that lesson. Now write the whole of it again, from
# nothing, in one function.
#
# `zero1(model, batches, lr, optimizer_class)` runs on every [rank](00_start_here.ipynb#Glossary), with the
# rank's copy of the model (the same seeded weights on every rank) and its `batches`, a list of `(x, y)`, one per
# step: this rank's share of each step's batch. It builds this rank's optimizer as `optimizer_class([shard],
# lr=lr)`, trains with the loss `F.mse_loss(model(x), y)` and returns the final full parameters, in
# `model.parameters()` order. Each rank's optimizer must step only this rank's shard of the flat parameter vector;
# the ranks average their gradients, as DDP does, and share the updated shards with an all-gather, padded where a
# shard is short.
#
# The check starts 2, 3 and 4 ranks (lesson 18's `dpcourse.ranks.train_on_ranks`) on a model lesson 18
# did not use, whose parameters never split evenly, runs your function with `torch.optim.Adam` and again with
# `torch.optim.SGD` (where a gradient summed instead of averaged moves the weights n times too far, a mistake
# Adam hides), and compares every rank's weights with the same optimizer's on one device training on each whole
# batch. It also measures each rank's optimizer state: a whole copy of Adam's state on every rank is DDP, not
# ZeRO-1. Your function travels to the ranks as its source: what it uses from outside must be a module, a plain
# value or a function of yours.

# %%
import math

import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters


# %% tags=["solution"]
def zero1(model, batches, lr, optimizer_class):
    """ZeRO-1 training on this rank: optimizer state for this rank's shard only; the final full parameters."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    numel = flat.numel()
    size = math.ceil(numel / n)
    start, stop = min(rank * size, numel), min((rank + 1) * size, numel)
    shard = flat[start:stop].clone().requires_grad_()
    optimizer = optimizer_class([shard], lr=lr)
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in parameters)
        dist.all_reduce(gradient)
        shard.grad = gradient[start:stop] / n
        optimizer.step()
        padded = torch.zeros_like(flat[:size])
        padded[: stop - start] = shard.detach()
        pieces = [torch.empty_like(padded) for _ in range(n)]
        dist.all_gather(pieces, padded)
        with torch.no_grad():
            vector_to_parameters(torch.cat(pieces)[:numel], parameters)
    return parameters
    ### END SOLUTION


# %%
exercises.check("capstone_zero1", zero1)


# %% [markdown]
# ## Part IV: a run that survives a killed rank
# This part is for after lesson 24. There the lesson told you what a resumed run needs; here you write the pair
# again from nothing, in one cell.
#
# `snapshot(directory, model, optimizer, epoch, done)` runs on every [rank](00_start_here.ipynb#Glossary) after
# every 5th step of a DDP job training with Adam and dropout, with the position of its next batch (`done` batches
# of epoch `epoch` finished). `resume(directory, model, optimizer)` runs on every rank before the first step of
# each attempt, and returns the position the run goes on from, or `None` when nothing was saved yet. The check
# starts 2 ranks under lesson 24's restarting launcher, kills rank 1 as step 14 starts, restarts both, and
# compares every rank's weights, Adam's state and random generators right after `resume`, and its weights at the
# end, with a run that was never killed: bit for bit.

# %%
import os
import random
from pathlib import Path


# %% tags=["solution"]
def snapshot(directory, model, optimizer, epoch, done):
    """Everything this rank's next step reads, saved in one file of its own, replaced atomically."""
    ### BEGIN SOLUTION
    path = Path(directory) / f"rank-{dist.get_rank()}.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(), "position": (epoch, done)},
               path.with_suffix(".partial"))
    os.replace(path.with_suffix(".partial"), path)
    ### END SOLUTION


def resume(directory, model, optimizer):
    """This rank's snapshot loaded back; the (epoch, done) it was taken at, or None without one."""
    ### BEGIN SOLUTION
    path = Path(directory) / f"rank-{dist.get_rank()}.pt"
    if not path.exists():
        return None
    saved = torch.load(path)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["torch_rng"])
    random.setstate(saved["python_rng"])
    return saved["position"]
    ### END SOLUTION


# %%
exercises.check("capstone_resume", (snapshot, resume))
