# %% [markdown]
# # 18 · ZeRO-1: each rank keeps a shard of the optimizer state
#
# **After this lesson you will be able to explain**
# - why every DDP [rank](00_start_here.ipynb#Glossary) holds the whole of Adam's state, measured: n ranks, n
#   identical copies;
# - how [ZeRO](00_start_here.ipynb#Glossary)'s first [stage](00_start_here.ipynb#Glossary) removes them: the
#   parameters seen as one flat vector, cut into one [shard](00_start_here.ipynb#Glossary) per rank, and each
#   rank's Adam updating only its shard;
# - a ZeRO-1 training step: [all-reduce](00_start_here.ipynb#Glossary) the gradients, update the shard,
#   all-gather the updated shards, and why an uneven shard is padded for the all-gather;
# - what it saves (Adam's state per rank, about 1/n of DDP's, measured) and what it costs (an all-gather per
#   step on top of DDP's all-reduce);
# - how to check it: the same weights as Adam on one device, on 2, 3 and 4 ranks.
#
# Lesson 15 counted what one device holds for a training step: with Adam, the optimizer state alone is twice
# the parameters. Lesson 10 showed that DDP gives every rank a whole copy of the model; lesson 13 wrote the
# all-reduce and met the all-gather. This lesson puts them together. Everything runs on real ranks started from
# this notebook (`dpcourse/ranks/training.py`, on `dpcourse.ddp.launch`), gloo with CPU tensors unless every rank
# has a GPU of its own ([NCCL](00_start_here.ipynb#Glossary)). The backend here, by the number of ranks:

# %%
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from dpcourse import examples, exercises, quiz, ranks
from dpcourse.ranks import backend_for
from dpcourse.sharded import zero1
from dpcourse.viz.shards import shard_layout

print({f"{n} ranks": backend_for(n) for n in (2, 3, 4)})

# %% [markdown]
# ## The model, the data and the oracle
# The running MLP, widened and deepened a little, `examples.mlp(ranks.WIDTHS)`: its parameter count is not a
# multiple of 2, 3 or 4, so the ranks' shards below are never all the same size. Every step trains on a batch of 24
# samples from `examples.regression_batch`; on n ranks, rank r takes the r-th contiguous 24/n of them, its loss is
# the mean squared error over its own samples, and the ranks average their gradients, as DDP does. That makes every
# step equal to one step on the whole batch on one device (lesson 10), which `ranks.one_device` runs with
# `torch.optim.Adam`: the oracle every run below is compared with.

# %%
model = examples.mlp(ranks.WIDTHS)
numel = ranks.parameter_count()
print(model)
print(f"{numel} parameters in {len(list(model.parameters()))} tensors; numel % n for n = 2, 3, 4:",
      [numel % n for n in (2, 3, 4)])
expected = ranks.one_device(steps=3, lr=1e-2)

# %% [markdown]
# ## DDP keeps n copies of Adam's state
# Under DDP every rank has the same averaged gradient after the all-reduce, and every rank runs its own
# optimizer over all the parameters. What does that leave on each rank?

# %%
quiz.ask("18-ddp-state-copies")

# %% [markdown]
# `zero1.ddp_then_zero1` trains the model for 3 steps twice in one launch of the ranks: first torch's DDP with
# Adam, on a copy, then the ZeRO-1 of this lesson. `ranks.train_on_ranks` counts, in each rank, the optimizer
# state of every optimizer that stepped there (`torch.optim.optimizer.register_optimizer_step_post_hook`), and
# each program reports its own. One launch per number of ranks, and DDP first:

# %% tags=["reveals-answer"]
with quiz.reveal("18-ddp-state-copies"):
    runs = {n: ranks.train_on_ranks(zero1.ddp_then_zero1, n, steps=3, lr=1e-2) for n in (2, 3, 4)}
    one_device_state = zero1.one_device_state_bytes()
    print(f"Adam's state on one device: {one_device_state:,} bytes")
    for n, results in runs.items():
        ddp_state = [result["ddp"]["state_bytes"] for result in results]
        same = ranks.first_difference([result["ddp"] for result in results], expected) is None
        print(f"DDP on {n} ranks: {ddp_state} bytes per rank, {sum(ddp_state) // one_device_state} copies; "
              f"weights equal one-device Adam's: {same}")

# %% [markdown]
# Every rank holds exactly what one device holds: Adam's `exp_avg` and `exp_avg_sq` for every parameter and a
# step counter per tensor (lesson 15). And every rank computes the same update from the same gradient: n ranks
# do the same arithmetic n times, and keep its state n times.
#
# ## One shard of the state per rank
# ZeRO-1 keeps one copy, cut into n pieces. See the parameters as one flat vector,
# `torch.nn.utils.parameters_to_vector(model.parameters())`, and give rank r a contiguous slice of it. Each
# rank's Adam steps only that slice, so it only keeps state for that slice. A slice crosses the parameters'
# boundaries where it likes: Adam works number by number, so it does not care which tensor a number came from.
#
# Which slice? The rule here is `torch.chunk`'s: slices of `ceil(numel / n)` numbers, in rank order, and the
# last ones shorter (or empty, when there are too few numbers). FSDP2 cuts each parameter with `torch.chunk`
# too (`torch/distributed/fsdp/_fully_shard/_fsdp_param.py: FSDPParam._init_sharded_param`). On 4 ranks:

# %%
shard_layout([(name, p.numel()) for name, p in model.named_parameters()], world_size=4)

# %% [markdown]
# ### Exercise: which slice is mine?
# Write `shard_range(numel, rank, world_size)`, returning `(start, stop)`: rank `rank` owns
# `flat[start:stop]`. The check calls it for every rank, on the course model and on every vector of 0 to 40
# numbers over 1 to 8 ranks, and checks that the slices cover the vector in rank order, without gaps or
# overlaps, with `ceil(numel / world_size)` numbers each until the numbers run out.

# %% tags=["solution"]
def shard_range(numel, rank, world_size):
    """The (start, stop) of the slice of a flat vector of `numel` numbers that `rank` owns."""
    ### BEGIN SOLUTION
    size = math.ceil(numel / world_size)
    return min(rank * size, numel), min((rank + 1) * size, numel)
    ### END SOLUTION


# %%
exercises.check("shard_range", shard_range)

# %% [markdown]
# ## Sharing the updated parameters: the all-gather
# After its Adam step, rank r holds the new values of its slice only; the next forward needs all of them on
# every rank. That is an all-gather (lesson 13): every rank puts in its slice and receives everyone's, in rank
# order. Rank 3's slice above is shorter than the others. Can each rank simply ask for pieces of the true
# sizes?

# %%
quiz.ask("18-unpadded-all-gather")

# %% tags=["reveals-answer"]
with quiz.reveal("18-unpadded-all-gather"):
    for rank, answer in enumerate(zero1.uneven_all_gather(world_size=4)):
        print(f"rank {rank}, shard of {answer['sizes'][rank]}: {answer['error'] or 'received every shard'}")

# %% [markdown]
# gloo checks, on every rank, that each receiving piece has the size of the rank's own input, and refuses
# otherwise (`torch/distributed/distributed_c10d.py: all_gather` hands the lists to the backend). So every
# rank sends `ceil(numel / n)` numbers: a short slice is padded with zeros at its end, and the gathered vector
# is cut back to `numel` (`all_gather_padded` in `dpcourse/sharded/collectives.py`). The padding is what the
# hatched end of the figure above shows: at most n − 1 numbers, sent for nothing. FSDP2 pads the same way, each
# shard to the size of the first.
#
# ## A ZeRO-1 step
# On every rank, with the rank's own `(x, y)`:
#
# 1. forward and backward, as in DDP: every rank has the gradients of its own samples' loss;
# 2. flatten the gradients into one vector, **all-reduce** it and divide by n: every rank has the full-batch
#    gradient, as after DDP's backward;
# 3. **Adam on this rank's slice only**: an optimizer built once over `flat[start:stop]`, a tensor of its own,
#    given `gradient[start:stop]` as its `.grad`;
# 4. **all-gather** the updated slices, padded, and copy the vector into the parameters
#    (`vector_to_parameters`).
#
# `zero1.zero1_program` is these four steps (`dpcourse/sharded/zero1.py`); `runs` above trained it right after
# DDP. Before its numbers: how many bytes of state should each rank's Adam hold?
#
# ### Exercise: the state each rank keeps
# Write `adam_state_bytes(numel, rank, world_size)`: the bytes of Adam's state on `rank` when its optimizer
# steps one float32 tensor, its slice from your `shard_range`. Adam keeps `exp_avg` and `exp_avg_sq` (4 bytes
# per number each) and a 4-byte `step` per tensor it steps (`torch/optim/adam.py: Adam._init_group`). The check
# compares every rank's answer with the rule on every vector of 1 to 40 numbers over 1 to 6 ranks.

# %% tags=["solution"]
def adam_state_bytes(numel, rank, world_size):
    """The bytes of Adam's state on `rank` under ZeRO-1: two averages of its slice, and one step counter."""
    ### BEGIN SOLUTION
    size = math.ceil(numel / world_size)
    start, stop = min(rank * size, numel), min((rank + 1) * size, numel)
    return 2 * 4 * (stop - start) + 4
    ### END SOLUTION


# %%
exercises.check("adam_state_bytes", adam_state_bytes)

# %% [markdown]
# The measured state of ZeRO-1 on every rank, next to the rule you wrote (`zero1.adam_state_bytes` is the
# same rule, so that this cell runs before you have written yours) and to DDP's:

# %%
for n, results in runs.items():
    measured = [result["state_bytes"] for result in results]
    predicted = [zero1.adam_state_bytes(numel, rank, n) for rank in range(n)]
    same = ranks.first_difference(results, expected) is None
    print(f"{n} ranks: ZeRO-1 {measured} bytes per rank (the rule: {predicted}), "
          f"{max(measured) / results[0]['ddp']['state_bytes']:.3f} of DDP's; weights equal one-device Adam's: {same}")

# %% [markdown]
# Each rank keeps two averages of its own slice and one step counter, where DDP keeps two averages of every
# parameter and a counter per tensor: the ratio printed above, close to 1/n. The weights are those of one-device
# Adam, within 1e-5 relative (`ranks.first_difference`), on every number of ranks, with slices of unequal sizes.
#
# ## What it costs: one more collective per step
# `ranks.train_on_ranks` records every collective a program calls through `torch.distributed`, with the bytes
# of its whole tensor: the tensor all-reduced, the all-gather's whole output (`ranks.traffic.counted`). DDP's
# reducer calls its all-reduces from C++ (`torch/csrc/distributed/c10d/reducer.cpp`), where that record cannot
# see them: the run below trained DDP for 3 steps, then ZeRO-1 for 3, and only ZeRO-1's collectives were
# recorded. DDP's buckets report their size instead (`ddp.demos.memory.bucket_bytes`), and every step it all-reduces
# each of them once. On 4 ranks:

# %%
calls = runs[4][0]["collectives"]
print("recorded in the whole run:", [name for name, _ in calls])
print("ZeRO-1, one step:", calls[:2])
print("DDP, one step: all-reduce of its buckets,", runs[4][0]["ddp"]["bucket_bytes"], "bytes")

# %% [markdown]
# ZeRO-1 all-reduces the same gradient as DDP, then all-gathers the whole parameter vector (padded). How many
# bytes does each rank send for them? That depends on the backend's algorithm, which runs inside gloo or NCCL,
# where `dpcourse.ranks.traffic` cannot count it. **A prediction**, if both ran as rings (lesson 13, where the
# ring all-reduce's bytes were counted): an all-reduce of S bytes sends 2(n − 1)/n · S per rank, an all-gather
# of an output of S bytes (n − 1)/n · S, the all-reduce's second half.

# %%
for n, results in runs.items():
    step = dict(results[0]["collectives"][:2])
    ddp_bytes = 2 * (n - 1) / n * results[0]["ddp"]["bucket_bytes"]
    zero1_bytes = 2 * (n - 1) / n * step["all_reduce"] + (n - 1) / n * step["all_gather"]
    print(f"{n} ranks, predicted per rank and step: DDP {ddp_bytes:,.0f} bytes, ZeRO-1 {zero1_bytes:,.0f} bytes "
          f"= {zero1_bytes / ddp_bytes:.2f} x DDP")

# %% [markdown]
# About one and a half times DDP's traffic, to keep 1/n of the optimizer state: the trade ZeRO-1 makes. Lesson
# 19 gets the half back: it replaces the all-reduce by a reduce-scatter, the half of it whose result ZeRO-1
# actually uses.
#
# ## A mistake Adam forgives
# Step 2 divides the all-reduced gradient by n. What if a program forgets?

# %%
quiz.ask("18-sum-not-mean")

# %% tags=["reveals-answer"]
with quiz.reveal("18-sum-not-mean"):
    summed = ranks.train_on_ranks(zero1.zero1_program, 4, steps=3, lr=1e-2, extra={"average": False})
    gap = max((got - want).abs().max().item() for got, want in zip(summed[0]["parameters"], expected, strict=True))
    print("the weights differ from one-device Adam's:", gap > 0)
    print("by less than a hundredth of one step (lr = 0.01):", gap < 1e-2 / 100)

# %% [markdown]
# Adam divides its running average of the gradients by the square root of the running average of their squares
# (`torch/optim/adam.py: _single_tensor_adam`): a gradient n times too large gives the same step, but for
# Adam's `eps`. So the weights differ by far less than one step. With SGD, `p -= lr * g`
# (`torch/optim/sgd.py: _single_tensor_sgd`), the same mistake makes every step n times too long.
#
# ## Exercise: ZeRO-1, written by you
# Write `zero1_training(model, batches, lr, optimizer_class)`. It runs on every rank, with the rank's model (the
# same seeded weights everywhere) and its `batches`, a list of `(x, y)`, one per step. Build this rank's optimizer
# as `optimizer_class([shard], lr=lr)`, as torch's `ZeroRedundancyOptimizer` takes its `optimizer_class` (lesson
# 21), train with the loss `F.mse_loss(model(x), y)`, as the four steps above say, and return the final full
# parameters, `list(model.parameters())`.
#
# The check runs it on 2, 3 and 4 ranks (`ranks.train_on_ranks`; your function travels to the ranks as its
# source, as in lesson 13: what it uses from outside must be a module, a plain value or a function of yours),
# twice: with `torch.optim.Adam`, and with `torch.optim.SGD`, which does not forgive the mistake above. It
# compares every rank's weights with one-device training's under each. It also measures the optimizer state
# each rank's optimizers hold: Adam over all the parameters, as DDP does, trains right but is not ZeRO-1.

# %% tags=["solution"]
def zero1_training(model, batches, lr, optimizer_class):
    """ZeRO-1 on this rank: all-reduce the gradients, step this rank's shard, all-gather the shards."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    numel = flat.numel()
    size = math.ceil(numel / n)
    start, stop = min(rank * size, numel), min((rank + 1) * size, numel)
    mine = flat[start:stop].clone().requires_grad_()
    optimizer = optimizer_class([mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in parameters)
        dist.all_reduce(gradient)
        mine.grad = gradient[start:stop] / n
        optimizer.step()
        padded = mine.detach().new_zeros(size)
        padded[: stop - start] = mine.detach()
        pieces = [torch.empty_like(padded) for _ in range(n)]
        dist.all_gather(pieces, padded)
        with torch.no_grad():
            vector_to_parameters(torch.cat(pieces)[:numel], parameters)
    return parameters
    ### END SOLUTION


# %%
exercises.check("zero1_training", zero1_training)

# %% [markdown]
# ## Summary
# - Under DDP every rank runs the same optimizer on the same averaged gradients: n ranks keep n identical copies
#   of Adam's state, each as large as one device's (measured).
# - ZeRO-1 sees the parameters as one flat vector and gives each rank a contiguous shard, `ceil(numel / n)`
#   numbers, the last ones shorter. Each rank's Adam steps its shard only: its state is about 1/n of DDP's.
# - A step: backward, all-reduce and average the gradients, Adam on the shard, all-gather the updated shards.
#   gloo's all-gather refuses pieces of different sizes, so short shards are padded and the padding dropped.
# - The result is one-device Adam's, within float tolerance, on 2, 3 and 4 ranks with uneven shards. Adam forgives
#   a gradient summed instead of averaged; SGD, whose step follows the gradient's size, shows it.
# - The cost: an all-gather on top of the all-reduce. If both run as rings, the all-gather sends half of what
#   the all-reduce sends: 1.5 times DDP's bytes per rank (a prediction, from the sizes measured here).
# - torch has ZeRO-1 built in, `torch.distributed.optim.ZeroRedundancyOptimizer` (lesson 21); lesson 19 shards
#   the gradients too, lesson 20 the parameters.
#
# ## Exercises
# The three checked exercises are above: `shard_range`, `adam_state_bytes` and `zero1_training`. The capstone
# (lesson 12) ends with a ZeRO-1 written from nothing, checked the same way on a model you have not seen.
