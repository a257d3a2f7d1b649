# %% [markdown]
# # 18 · ZeRO-1: each rank keeps a shard of the optimizer state
#
# **After this lesson you will be able to explain**
# - why every DDP [rank](00_start_here.ipynb#Glossary) holds the whole of Adam's state, measured: n ranks, n
#   identical copies;
# - how [ZeRO](00_start_here.ipynb#Glossary)'s first [stage](00_start_here.ipynb#Glossary) removes them: the
#   parameters seen as one flat vector, cut into one [shard](00_start_here.ipynb#Glossary) per rank, and each
#   rank's Adam updating only its shard;
# - a ZeRO-1 training step, in the course's first and simplest version: [all-reduce](00_start_here.ipynb#Glossary)
#   the gradients, update the shard, all-gather the updated shards, and why an uneven shard is padded for
#   gloo's all-gather;
# - what it saves (Adam's state per rank, about 1/n of DDP's, measured) and what it costs on the wire, counted for
#   three versions of ZeRO-1: this first one, the ZeRO paper's (a reduce-scatter in the all-reduce's place) and
#   torch's `ZeroRedundancyOptimizer`, and why each costs what it costs;
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
from dpcourse.sharded import zero1, zero1_wire
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
# `zero1_wire.every_program` trains the model for 3 steps four times in one launch of the ranks, each time from the
# same weights: first torch's DDP with Adam, then three versions of ZeRO-1 that this lesson compares. Each program
# reports the bytes of its own optimizer's state (`memory.accounting.state_tensors`, lesson 15). One launch per
# number of ranks, and DDP first:

# %% tags=["reveals-answer"]
with quiz.reveal("18-ddp-state-copies"):
    runs = {n: ranks.train_on_ranks(zero1_wire.every_program, n, steps=3, lr=1e-2) for n in (2, 3, 4)}
    one_device_state = zero1.one_device_state_bytes()
    print(f"Adam's state on one device: {one_device_state:,} bytes")
    for n, results in runs.items():
        ddp_state = [result["runs"]["DDP"]["state_bytes"] for result in results]
        same = ranks.first_difference([result["runs"]["DDP"] for result in results], expected) is None
        print(f"DDP on {n} ranks: {ddp_state} bytes per rank, {sum(ddp_state) // one_device_state} copies; "
              f"weights equal one-device Adam's: {same}")

# %% [markdown]
# ## One shard of the state per rank
# ZeRO-1 keeps one copy, cut into n pieces. See the parameters as one flat vector,
# `torch.nn.utils.parameters_to_vector(model.parameters())`, and give rank r a contiguous slice of it. Each
# rank's Adam steps only that slice, so it only keeps state for that slice. A slice crosses the parameters'
# boundaries where it likes: Adam works number by number, so it does not care which tensor a number came from.

# %% [markdown]
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
# This is the course's first ZeRO-1, the simplest to write: step 2 is DDP's all-reduce, unchanged. (Step 2 comes
# back below, where the bytes are counted.) `zero1.zero1_program` is these four steps (`dpcourse/sharded/zero1.py`);
# `runs` above trained it after DDP, as `"ZeRO-1, all-reduce"`. Before its numbers: how many bytes of state should
# each rank's Adam hold?
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
# The measured state of ZeRO-1 on every rank, next to the rule you wrote (once you have written it) and to DDP's:

# %%
try:
    rules = {n: [adam_state_bytes(numel, rank, n) for rank in range(n)] for n in runs}
except NotImplementedError:
    print("write adam_state_bytes above and run its check, then run this cell again")
else:
    for n, results in runs.items():
        zero1_runs = [result["runs"]["ZeRO-1, all-reduce"] for result in results]
        measured = [run["state_bytes"] for run in zero1_runs]
        same = ranks.first_difference(zero1_runs, expected) is None
        share = max(measured) / results[0]["runs"]["DDP"]["state_bytes"]
        print(f"{n} ranks: ZeRO-1 {measured} bytes per rank (your rule: {rules[n]}), {share:.3f} of DDP's; "
              f"weights equal one-device Adam's: {same}")

# %% [markdown]
# Each rank keeps two averages of its own slice and one step counter, where DDP keeps two averages of every
# parameter and a counter per tensor: the ratio printed above, close to 1/n. The weights are those of one-device
# Adam, within 1e-5 relative (`ranks.first_difference`), on every number of ranks, with slices of unequal sizes.
#
# ## What it costs on the wire: three versions of ZeRO-1
# Step 2 above receives the whole averaged gradient on every rank, and Adam uses 1/n of it. Two other versions do
# step 2 otherwise; `runs` trained both after the first, from the same weights:
#
# - **ZeRO-1, reduce-scatter** (`zero1.zero1_reduce_scatter_program`), as the ZeRO paper runs its stage 1
#   (Rajbhandari et al. 2020, section 7.2.1): a **reduce-scatter** (lesson 13, the ring all-reduce's first half)
#   leaves rank r with the sum of its own slice only, padded as the all-gather is (`reduce_scatter_padded` in
#   `dpcourse/sharded/collectives.py`). Steps 1, 3 and 4 are unchanged.
# - **torch's `ZeroRedundancyOptimizer`** under DDP (lesson 21): DDP all-reduces the gradients as always; each
#   rank's Adam steps the whole parameters it owns; then every owner broadcasts its updated parameters to the
#   others (`torch/distributed/optim/zero_redundancy_optimizer.py:1151`, `_sync_params` at :813-827 calling
#   `dist.broadcast` for each parameter in `_broadcast_params_from_rank`, :760-811).
#
# `ranks.traffic.counted` records every collective a program calls through `torch.distributed`, with the bytes of
# its whole tensor: the tensor all-reduced or broadcast, the all-gather's whole output, the reduce-scatter's whole
# input. DDP's reducer starts its all-reduces from C++ (`torch/csrc/distributed/c10d/reducer.cpp`), where that
# record cannot see them, so `zero1.ddp_program` (and the DDP under `ZeroRedundancyOptimizer`) all-reduces through
# torch's own comm hook `allreduce_hook`, which calls `dist.all_reduce` on each bucket from Python
# (`torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py:35-54`: "DDP results is expected to be same as
# the case where no hook was registered"). `zero1_wire.every_program` counted each program apart. Per step, on 4
# ranks:

# %%
for name, run in runs[4][0]["runs"].items():
    called = ", ".join(f"{count} x {kind} of {size:,} bytes" for kind, (count, size) in run["calls"].items())
    print(f"{name:<24} {called}")
print("the two ZeRO-1 versions of this lesson keep the same Adam state on every rank, on 2, 3 and 4 ranks:",
      all(result["runs"]["ZeRO-1, all-reduce"]["state_bytes"] == result["runs"]["ZeRO-1, reduce-scatter"][
          "state_bytes"] for results in runs.values() for result in results))

# %% [markdown]
# How many bytes does each rank send for them? That depends on the backend's algorithm, which runs inside gloo or
# NCCL, where `dpcourse.ranks.traffic` cannot count it. **A prediction**, if every collective ran as a ring
# (lesson 13, where the ring all-reduce's bytes were counted): an all-reduce of S bytes sends 2(n − 1)/n · S per
# rank; a reduce-scatter or an all-gather of S bytes (n − 1)/n · S, one half of the all-reduce; a broadcast of S
# bytes (n − 1)/n · S per rank on average, whatever its algorithm, since each of the n − 1 other ranks must receive
# the S bytes once (`zero1_wire.ring_bytes`):

# %%
for n, results in runs.items():
    calls = {name: run["calls"] for name, run in results[0]["runs"].items()}
    ddp_bytes = zero1_wire.ring_bytes(calls["DDP"], n)
    print(f"{n} ranks, predicted bytes per rank and step:")
    for name, called in calls.items():
        sent = zero1_wire.ring_bytes(called, n)
        print(f"  {name:<24} {sent:>6,.0f} = {sent / ddp_bytes:.3f} x DDP")

# %% [markdown]
# Why each costs what it costs:
#
# - **ZeRO-1, all-reduce**, this lesson's first: the whole all-reduce, as DDP, and then an all-gather of the
#   parameters, half an all-reduce more: 1.5 times DDP's bytes. The all-reduce's second half hands every rank the
#   finished sums of the other ranks' slices, which its Adam never reads.
# - **ZeRO-1, reduce-scatter**: a ring all-reduce *is* a reduce-scatter followed by an all-gather (lesson 13). This
#   ZeRO-1 runs the same two halves with Adam's step between them: the all-gather passes round updated
#   parameters instead of summed gradients. DDP's bytes, plus the few bytes of padding that make the vector a
#   multiple of n: the ZeRO paper's stage 1 costs no more traffic than DDP.
# - **`ZeroRedundancyOptimizer`**: DDP's whole all-reduce, then one broadcast per parameter, every parameter once:
#   1.5 times DDP's bytes, as the course's first ZeRO-1. It leaves DDP's all-reduce as it is and adds the
#   broadcasts after the optimizer step.
#
# The two ZeRO-1 versions of this lesson keep the same Adam state (printed above), and both run step 1 as DDP does, so
# after backward every rank holds the whole gradient in its `.grad`s. The course's cost model
# (`costmodel.formula("ZeRO-1")`, `dpcourse/costmodel/model.py`) uses the paper's ZeRO-1: DDP's bytes. Lesson 19
# keeps the reduce-scatter and frees the full gradients as well, bucket by bucket during backward: ZeRO-2.
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
# - A step, in the course's first version: backward, all-reduce and average the gradients, Adam on the shard,
#   all-gather the updated shards. gloo's all-gather refuses pieces of different sizes, so short shards are padded and the padding dropped.
# - The result is one-device Adam's, within float tolerance, on 2, 3 and 4 ranks with uneven shards. Adam forgives
#   a gradient summed instead of averaged; SGD, whose step follows the gradient's size, shows it.
# - The cost on the wire depends on how the gradients are averaged (predicted for rings, from the collectives
#   counted): the first version's all-gather on top of DDP's all-reduce, 1.5 times DDP's bytes; the ZeRO paper's
#   reduce-scatter then all-gather, the two halves of DDP's ring all-reduce, DDP's bytes plus a little padding;
#   torch's `ZeroRedundancyOptimizer` (lesson 21), DDP's all-reduce then a broadcast of every parameter, 1.5 times.
# - Lesson 19 shards the gradients too, lesson 20 the parameters.
#
# ## Exercises
# The three checked exercises are above: `shard_range`, `adam_state_bytes` and `zero1_training`. The capstone
# (lesson 12) ends with a ZeRO-1 written from nothing, checked the same way on a model you have not seen.
