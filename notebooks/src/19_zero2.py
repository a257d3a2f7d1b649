# %% [markdown]
# # 19 · ZeRO-2: gradients reduce-scattered, each rank keeps its shard
#
# **After this lesson you will be able to explain**
# - what [ZeRO](00_start_here.ipynb#Glossary)'s second [stage](00_start_here.ipynb#Glossary) shards that the
#   first does not: the gradients, so that each [rank](00_start_here.ipynb#Glossary) receives only the
#   [shard](00_start_here.ipynb#Glossary) of the averaged gradient that its optimizer updates;
# - how it gets there during backward: a hook on every parameter, buckets, and a reduce-scatter of each bucket as
#   soon as its last gradient exists, after which the full gradients are freed;
# - how torch's DDP cuts its buckets, read from a comm hook on real ranks: with its defaults, one bucket for the
#   first step, then rebuilt in the order the gradients arrived; the course's ZeRO-2 cuts them its own way;
# - how many gradient bytes a rank then holds, measured, and what the bucket in flight costs;
# - what it sends on the wire next to DDP's [all-reduce](00_start_here.ipynb#Glossary), counted with every
#   collective written as a ring, and why;
# - how to check a ZeRO-2 you wrote: the same weights as Adam on one device, on 2, 3 and 4 ranks.
#
# Lesson 18's first ZeRO-1 all-reduces the whole gradient, so every rank receives all of it, then steps only its
# shard and throws the rest away; its reduce-scatter version receives only the shard, but every rank still holds
# the whole gradient from backward until the step. ZeRO-2 frees it during backward: as soon as a group of
# gradients exists, it is reduce-scattered and dropped. As in lesson 18, every
# run starts real ranks from this notebook (`dpcourse/ranks/training.py`), gloo with CPU tensors unless every
# rank has a GPU of its own ([NCCL](00_start_here.ipynb#Glossary)). The backend here, by the number of ranks:

# %%
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from IPython.display import display

from dpcourse import examples, exercises, quiz, ranks
from dpcourse.ranks import backend_for
from dpcourse.sharded import ddp_buckets, zero2, zero2_measure
from dpcourse.viz.zero2 import gradient_bytes

print({f"{n} ranks": backend_for(n) for n in (2, 3, 4)})

# %% [markdown]
# ## The model and the oracle
# Lesson 18's model, `examples.mlp(ranks.WIDTHS)`, trained on batches of 24 samples: on n ranks rank r takes
# the r-th contiguous 24/n of each batch, its loss is the mean squared error over its own samples, and the
# ranks average their gradients. Each step then equals one step of `torch.optim.Adam` on the whole batch on one
# device, `ranks.one_device`: the oracle.

# %%
model = examples.mlp(ranks.WIDTHS)
numels = [p.numel() for p in model.parameters()]
for name, p in model.named_parameters():
    print(f"{name:<9} {p.numel():>4} values")
print(f"{sum(numels)} values in all")

# %% [markdown]
# ## Reduce-scatter in backward, bucket by bucket
# DDP does not wait for backward to end before it all-reduces: it groups the parameters into buckets and
# all-reduces a bucket as soon as backward has produced all of its gradients (lesson 10's `GradientBuckets`,
# `dpcourse/ddp/implementations/reducer.py`). ZeRO-2 uses the same machinery with a reduce-scatter in the all-reduce's place
# (`dpcourse/sharded/zero2.py`, `Zero2`):
#
# 1. **Buckets, the course's rule.** In `parameters()` order, a bucket closes once it holds at least the bucket
#    size; then the list of buckets is reversed, because backward produces the last layers' gradients first.
#    `zero2.bucket_indices` is that rule. It is DDP's with `find_unused_parameters=True` only; what DDP does by
#    default follows below.
# 2. **A hook on every parameter.** `param.register_post_accumulate_grad_hook(hook)` calls `hook(param)` "after
#    all gradients for a tensor have been accumulated, meaning that the .grad field has been updated"
#    (`torch/_tensor.py: Tensor.register_post_accumulate_grad_hook`): in the middle of backward. The hook copies
#    the gradient into its bucket's flat buffer and sets `param.grad = None`.
# 3. **The bucket's last gradient in: reduce-scatter.** The buffer is padded with zeros to n pieces of
#    `ceil(numel / n)` values, as FSDP pads (`torch/distributed/fsdp/_flat_param.py:
#    FlatParamHandle._get_unpadded_shard`), divided by n, and `dist.reduce_scatter(piece, list(flat.chunk(n)))`
#    leaves rank r with the average of piece r. The buffer is dropped. Rank r's piece r is lesson 18's
#    `shard_range` of the bucket, plus the padding.
# 4. **After backward:** Adam steps the rank's shards, and `dist.all_gather` of every bucket gives every rank
#    all the updated parameters, as in ZeRO-1.
#
# The buckets of the course model, with buckets of 100 values (400 bytes of float32, `zero2.LESSON_BUCKET_BYTES`), in
# the order they are reduce-scattered:

# %%
names = [name for name, _ in model.named_parameters()]
buckets = zero2.bucket_indices(numels, zero2.LESSON_BUCKET_BYTES // 4)
bucket_numels = [sum(numels[i] for i in bucket) for bucket in buckets]
for number, (bucket, size) in enumerate(zip(buckets, bucket_numels, strict=True)):
    print(f"bucket {number}: {[names[i] for i in bucket]}, {size} values; piece per rank on 4 ranks: "
          f"{math.ceil(size / 4)}")

# %% [markdown]
# ### What torch's DDP does with its buckets
# With `find_unused_parameters=True`, DDP cuts its buckets once, by the rule above:
# `dist._compute_bucket_assignment_by_size` in `parameters()` order, then `list(reversed(bucket_indices))`
# (`torch/nn/parallel/distributed.py:1433-1439`). With its defaults it does something else: the first step puts
# every parameter in one bucket (`if static_graph or not find_unused_parameters: bucket_size_limits =
# [sys.maxsize]`, :153-154), and after that step the reducer rebuilds the buckets from the order in which the
# gradients became ready ("bucket rebuild" bucketizes parameters based on its real execution order in backward
# graph", :1406-1407).
#
# `ddp_buckets.recorded` reads both on 2 real ranks. Its model is six `nn.Linear(100, 100)` under DDP with
# `bucket_cap_mb=0.1` (104,857 bytes per bucket), and a comm hook (`register_comm_hook`) that DDP hands every bucket
# it all-reduces: the hook notes the bucket's bytes and parameters (`bucket.buffer()`, `bucket.parameters()`), then
# all-reduces it as torch's own `allreduce_hook` does
# (`torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py:35-54`).
# Per step, each bucket's bytes in the order DDP all-reduced them, and the parameters of the first:

# %%
seen = ddp_buckets.recorded(world_size=2, steps=3)
for unused, steps in seen.items():
    print(f"find_unused_parameters={unused}:")
    for step, buckets_of_step in enumerate(steps):
        print(f"  step {step}: {[bucket['bytes'] for bucket in buckets_of_step]} bytes; the first holds "
              f"{', '.join(buckets_of_step[0]['parameters'])}")
six_numels = [p.numel() for p in ddp_buckets.model().parameters()]
cap = int(ddp_buckets.BUCKET_CAP_MB * 2**20) // 4  # values of float32
print("the course's rule on this model:",
      [4 * sum(six_numels[i] for i in bucket) for bucket in zero2.bucket_indices(six_numels, cap)], "bytes")

# %% [markdown]
# With the defaults, step 0 all-reduces one bucket of every gradient; from step 1 on, two buckets, the first
# holding the last three layers' parameters in the order their gradients arrived, `5.bias` first. With
# `find_unused_parameters=True`, the same three buckets every step, the course's rule's. The course's ZeRO-2 keeps
# that rule as its own choice: the buckets are known before the first backward, so each rank can cut its shards of
# them, and build Adam over those shards, once, in `Zero2.__init__`. Every step above all-reduces the same bytes
# in all: the rebuild regroups the gradients, it does not add any.
#
# ### Exercise: the order of the reduce-scatters
# Write `reduce_scatter_schedule(numels, bucket_numel)`: the buckets of parameter indices, in the order ZeRO-2
# reduce-scatters them, each with the number of gradients backward has still to produce when that bucket's
# reduce-scatter starts, as a list of `(indices, still_to_come)`. Backward produces the gradients from the last
# parameter to the first. You may call `zero2.bucket_indices`, or write the rule yourself. The check tries the
# course model with five bucket sizes, two small models, then 140 generated models and bucket sizes. Some
# buckets fill exactly, where "at least" and "more than" part.

# %% tags=["solution"]
def reduce_scatter_schedule(numels, bucket_numel):
    """Each bucket, in the order it is reduce-scattered, with the gradients still to come when it starts."""
    ### BEGIN SOLUTION
    schedule = []
    for bucket in zero2.bucket_indices(numels, bucket_numel):
        schedule.append((bucket, min(bucket)))  # the parameters before the bucket's first have no gradient yet
    return schedule
    ### END SOLUTION


# %%
exercises.check("reduce_scatter_schedule", reduce_scatter_schedule)

# %% [markdown]
# ## ZeRO-2 on real ranks
# The first bucket holds the last layers' parameters. When does its reduce-scatter start?

# %%
quiz.ask("19-reduce-scatter-when")

# %% [markdown]
# `zero2_measure.compare(4)` starts 4 ranks once. Each trains the model for 3 steps with three programs, from the
# same weights: with `zero2_measure.ddp_by_hand` (DDP's arithmetic: one all-reduce of the flat gradients, Adam on
# everything), with lesson 18's `zero1.zero1_program`, and with `zero2.train`, whose `Zero2` records, for every
# bucket, how many gradients were still to come when its reduce-scatter started. Each program's weights are
# compared with the one-device oracle's:

# %% tags=["reveals-answer"]
with quiz.reveal("19-reduce-scatter-when", part=1):
    compared = zero2_measure.compare(4)
    print("backend:", compared.backend)
    for program, difference in compared.differences.items():
        print(f"{program:<12} weights after 3 steps equal one-device Adam's: {difference or True}")
    for rank, still in enumerate(compared.ranks_of("ZeRO-2", "still_to_come")):
        print(f"rank {rank}: gradients still to come when each bucket was reduce-scattered, in order: {still}")

# %% tags=["reveals-answer"]
with quiz.reveal("19-reduce-scatter-when", part=2):
    try:
        predicted = [still for _, still in reduce_scatter_schedule(numels, zero2.LESSON_BUCKET_BYTES // 4)]
        print("predicted:", predicted, "| measured the same on every rank:",
              all(still == predicted for still in compared.ranks_of("ZeRO-2", "still_to_come")))
    except NotImplementedError:
        print("write reduce_scatter_schedule above, then run this cell again")

# %% [markdown]
# ## Gradient memory per rank
# Under DDP every rank ends backward holding the whole gradient, `.grad` for every parameter: it is what
# the all-reduce averages. What does a ZeRO-2 rank hold when backward has ended?

# %%
quiz.ask("19-gradient-bytes")

# %% [markdown]
# Each program counted, on each rank, the bytes of every gradient tensor it held (`storage_bytes`, lesson 15):
# the `.grad` tensors, the flat buffers being communicated and ZeRO-2's shards. "Most at once" is the largest
# count during the step (ZeRO-2 counts at every hook, `ddp_by_hand` at its all-reduce, where the gradients and
# their flat copy both exist); "end of backward" is what is left when backward has ended. The table also shows
# Adam's state, and the same for a deeper, larger model (`zero2_measure.DEEP`, the same input and output):

# %% tags=["reveals-answer"]
with quiz.reveal("19-gradient-bytes"):
    print(compared.memory_table())
    surplus = {}
    for deep, label in ((False, "the course model"), (True, "the deeper model")):
        ddp_end, zero2_end, zero2_most, ddp_most = (max(compared.ranks_of(program, key, deep)) for program, key in (
            ("DDP", "after_backward"), ("ZeRO-2", "after_backward"), ("ZeRO-2", "gradient_bytes"),
            ("DDP", "gradient_bytes")))
        surplus[label] = zero2_most - zero2_end
        state = max(compared.ranks_of("ZeRO-2", "state_bytes", deep)) / max(
            compared.ranks_of("DDP", "state_bytes", deep))
        print(f"{label}: at the end of backward ZeRO-2 holds {zero2_end / ddp_end:.3f} of DDP's gradient bytes "
              f"(1/4 = 0.25); at most {zero2_most:,} bytes at once, {surplus[label]:,} more than at the end, "
              f"{zero2_most / ddp_most:.2f} of DDP's most. Adam's state: {state:.3f} of DDP's")
    print("the same surplus on both models:", len(set(surplus.values())) == 1)
    display(gradient_bytes(compared.deep[0], "Rank 0's gradients during the first backward, the deeper model, "
                                             f"{compared.world_size} ranks"))

# %% [markdown]
# ## Bytes on the wire
# ZeRO-2 calls two collectives per bucket and step: the reduce-scatter of the gradients and the all-gather of
# the parameters. DDP calls one, the all-reduce.

# %%
quiz.ask("19-wire-bytes")

# %% [markdown]
# gloo runs `dist.all_reduce`, `dist.reduce_scatter` and `dist.all_gather` inside the backend, where
# `traffic.counted` cannot see what they send. So `compare` also trained every program for one step with the
# three replaced by rings written with `dist.isend` and `dist.recv` (`zero2_measure.ring_collectives`: lesson
# 13's `ring_all_reduce` and the two halves in `dpcourse/sharded/rings.py`); same arithmetic, and now every byte
# a rank sends is counted. Every step sends the same. Per step, rank by rank:

# %% tags=["reveals-answer"]
with quiz.reveal("19-wire-bytes", part=1):
    print(compared.bytes_table())

# %% [markdown]
# ### Exercise: bytes per step
# Write `zero2_bytes_per_step(bucket_numels, world_size)`: the bytes one rank sends in one ZeRO-2 step when both
# collectives are rings, for buckets of `bucket_numels` float32 values, each padded to `world_size` pieces of
# `ceil(numel / world_size)` values. The check tries generated bucket sizes on 1 to 6 ranks; then the cell after
# it compares your formula with what the ranks above counted.

# %% tags=["solution"]
def zero2_bytes_per_step(bucket_numels, world_size):
    """Bytes one rank sends per ZeRO-2 step: per bucket, a ring reduce-scatter and a ring all-gather."""
    ### BEGIN SOLUTION
    piece_bytes = [math.ceil(numel / world_size) * 4 for numel in bucket_numels]
    return sum(2 * (world_size - 1) * piece for piece in piece_bytes)
    ### END SOLUTION


# %%
exercises.check("zero2_bytes_per_step", zero2_bytes_per_step)

# %% tags=["reveals-answer"]
with quiz.reveal("19-wire-bytes", part=2):
    counted = [int(b) for b in compared.ranks_of("ZeRO-2", "wire")]
    try:
        print(f"your formula for the course model's buckets {bucket_numels} on 4 ranks: "
              f"{zero2_bytes_per_step(bucket_numels, 4):,} bytes; counted on each rank: {counted}")
    except NotImplementedError:
        print(f"counted on each rank: {counted}; write zero2_bytes_per_step above to compare")

# %% [markdown]
# ## Exercise: ZeRO-2, written by you
# Write `train_zero2(model, batches, lr)`. It runs on every rank, with the rank's model (the same seeded weights
# everywhere) and its `batches`, a list of `(x, y)`, one per step. Train with `torch.optim.Adam(..., lr=lr)` and
# the loss `F.mse_loss(model(x), y)`:
#
# - buckets of parameters, the course's rule (`zero2.bucket_indices` with 100 values per bucket is fine);
# - a `register_post_accumulate_grad_hook` on every parameter: once a bucket's last gradient is in, reduce-scatter
#   the bucket's gradients, padded and divided by n, into this rank's shard, and set the bucket's `.grad` to
#   `None`;
# - after backward, Adam on this rank's shards, then `dist.all_gather` the updated shards into the parameters.
#
# Return the final full parameters, `list(model.parameters())`. The check runs it on 2, 3 and 4 ranks
# (`dpcourse/sharded/zero2_check.py`; your function travels to the ranks as its source, as in lesson 13) and
# compares every rank's weights with one-device Adam's. It also watches your gradients from a hook of its own,
# and your optimizer when it steps: a rank that ever holds every parameter's full `.grad` at once, holds any
# when Adam steps, or keeps one after training, trains right but is not ZeRO-2; neither is one whose Adam keeps
# `exp_avg` and `exp_avg_sq` for the whole model (DDP's state, not its shard's), steps a view that keeps a whole
# padded bucket alive, or calls `dist.all_reduce`. Adam's weights barely notice a gradient summed instead of
# averaged (its step hardly depends on the gradient's scale), so the check also adds up the squares of the
# gradients your ranks' Adam steps with on the first step: together they must be one device's averaged gradient's.

# %% tags=["solution"]
def train_zero2(model, batches, lr):
    """ZeRO-2 with Adam: gradients reduce-scattered bucket by bucket during backward; shards stepped, gathered."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    device = parameters[0].device  # every tensor a collective moves must be on the rank's device (NCCL: its GPU)
    buckets = [[parameters[i] for i in group] for group in zero2.bucket_indices([p.numel() for p in parameters], 100)]
    pieces = [math.ceil(sum(p.numel() for p in bucket) / n) for bucket in buckets]

    def padded(tensors, piece):  # the tensors as one flat vector of n * piece values, zeros at the end
        flat = torch.zeros(n * piece, device=device)
        values = torch.cat([t.reshape(-1) for t in tensors])
        flat[:values.numel()] = values
        return flat

    shards = [padded([p.detach() for p in bucket], piece).chunk(n)[rank].clone()
              for bucket, piece in zip(buckets, pieces)]
    optimizer = torch.optim.Adam(shards, lr=lr)

    def when_full(bucket, shard, piece):
        def hook(param):
            if all(p.grad is not None for p in bucket):  # the bucket's last gradient has arrived
                flat = padded([p.grad for p in bucket], piece) / n
                shard.grad = torch.empty_like(shard)
                dist.reduce_scatter(shard.grad, list(flat.chunk(n)))
                for p in bucket:
                    p.grad = None
        return hook

    for bucket, shard, piece in zip(buckets, shards, pieces):
        for p in bucket:
            p.register_post_accumulate_grad_hook(when_full(bucket, shard, piece))
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        for bucket, shard, piece in zip(buckets, shards, pieces):
            flat = torch.empty(n * piece, device=device)
            dist.all_gather(list(flat.chunk(n)), shard.detach())
            with torch.no_grad():
                start = 0
                for p in bucket:
                    p.copy_(flat[start:start + p.numel()].view_as(p))
                    start += p.numel()
    return parameters
    ### END SOLUTION


# %%
exercises.check("train_zero2", train_zero2)

# %% [markdown]
# Your shards keep the padding (a piece of `ceil(numel / n)` values each): Adam steps the padding's zeros too,
# and they stay zero, since their gradient is zero. `Zero2` keeps `shard_range`'s slice only; both give the
# same weights.
#
# ## Summary
# - Lesson 18's first ZeRO-1 all-reduces the whole gradient and uses 1/n of it; its reduce-scatter version
#   receives only its shard but holds the whole gradient until the step. ZeRO-2 reduce-scatters bucket by bucket
#   during backward: each rank receives the average of its own shard only, and the full gradients are freed.
# - It happens during backward: a `register_post_accumulate_grad_hook` on every parameter, the course's buckets
#   (in `parameters()` order, reversed: last layers first; DDP's layout under `find_unused_parameters=True`, where
#   DDP by default starts with one bucket and rebuilds them in the order the gradients arrived), and a bucket's reduce-scatter as soon as its last gradient is in (measured: the first bucket
#   went while gradients were still to come). Each gradient is copied into its bucket and its `.grad`
#   set to `None`; the bucket is dropped after its reduce-scatter.
# - When backward ends, a rank holds 1/n of the gradient, plus padding; during backward, one bucket more. That
#   surplus does not grow with the model (measured on two models).
# - Bytes on the wire: a reduce-scatter plus an all-gather is a ring all-reduce cut in two, so ZeRO-2 sends
#   DDP's bytes, up to the padding (counted with both written as rings); lesson 18's first ZeRO-1 sends 1.5 times
#   as many.
# - Checked: the same weights as one-device Adam after 3 steps, on 4 ranks here and 2, 3 and 4 in your
#   exercise; each rank's Adam state is its shard's, as in ZeRO-1.
# - Lesson 20 shards the parameters as well, and all-gathers each layer's just before it runs.
#
# ## Exercises
# The three checked exercises are above: `reduce_scatter_schedule`, `zero2_bytes_per_step` and `train_zero2`.
# Two more to try:
# 1. Train `zero2.train` with one bucket for the whole model (`extra={"bucket_bytes": 10**6}` in
#    `ranks.train_on_ranks`) and compare its `gradient_bytes` with the table above. What was held at once, and
#    when?
# 2. With n ranks and buckets of B values, how many values of padding does a rank's shard hold at most? Check
#    your answer against `compared.runs[3]["ZeRO-2"]["shard_numels"]` (rank 3's shard of each bucket).
