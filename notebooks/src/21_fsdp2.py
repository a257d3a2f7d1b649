# %% [markdown]
# # 21 · FSDP2 and ZeroRedundancyOptimizer in practice
#
# **After this lesson you will be able to explain**
# - how `fully_shard` turns every parameter into a [DTensor](00_start_here.ipynb#Glossary) on a
#   [device mesh](00_start_here.ipynb#Glossary), which rows each [rank](00_start_here.ipynb#Glossary) keeps as its
#   [shard](00_start_here.ipynb#Glossary), and why each layer gets its own call;
# - what `reshard_after_forward` trades: all-gathers per step against full parameters held from the forward to
#   the backward, counted;
# - why FSDP2 training gives the same weights as DDP and as one device;
# - how a sharded checkpoint is written by every rank and read back by another number of ranks;
# - what `MixedPrecisionPolicy` changes, and what of it a CPU run shows;
# - how torch's `ZeroRedundancyOptimizer` shards Adam's state next to DDP, and how it differs from lesson 18's;
# - how much each rank holds under DP, DDP and the three [ZeRO stages](00_start_here.ipynb#Glossary), measured on
#   the course's model and predicted for a large one.
#
# Lessons 18 to 20 wrote [ZeRO](00_start_here.ipynb#Glossary) by hand. torch ships it twice:
# `torch.distributed.fsdp.fully_shard` ("FSDP2", [FSDP](00_start_here.ipynb#Glossary) rewritten on DTensors) keeps
# a shard of everything, and `torch.distributed.optim.ZeroRedundancyOptimizer` shards the optimizer's state
# only. Everything below runs on real ranks started
# from this notebook, with the course's model of lessons 18 to 20, 8 → 15 → 15 → 4, and Adam. They use gloo with
# CPU tensors unless every rank has a GPU of its own ([NCCL](00_start_here.ipynb#Glossary) needs one GPU per
# rank): with one GPU, the ranks use gloo and the CPU. The backend, by the number of ranks:

# %%
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from dpcourse import exercises, quiz, ranks
from dpcourse.memory import sized_mlp
from dpcourse.ranks import backend_for
from dpcourse.sharded import checkpoint_sharded, practice, side_by_side

print({f"{n} ranks": backend_for(n) for n in (2, 3)})

# %% [markdown]
# ## Sharding the model on a device mesh
# Each rank runs the same lines. The mesh lays the ranks out: one dimension of 3 ranks, on the ranks' device type
# (`"cpu"` under gloo). `fully_shard` is called on each `Linear` first, then on the whole model:
#
# ```python
# mesh = init_device_mesh("cpu", (3,))
# for layer in model:
#     if isinstance(layer, nn.Linear):
#         fully_shard(layer, mesh=mesh)     # this layer's parameters: sharded, gathered together when it runs
# fully_shard(model, mesh=mesh)             # the root: what is left (nothing here) and the step's bookkeeping
# optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)   # after fully_shard: the parameters are new
# ```
#
# `practice.tour` (`dpcourse/sharded/practice.py`) starts 3 ranks once and runs all of this lesson's training
# there: FSDP2 as above for 4 steps, saved with `torch.distributed.checkpoint` before its last step; the same with
# `reshard_after_forward=False`; with the root as its only unit; one step in mixed precision; DDP with Adam;
# DDP with `ZeroRedundancyOptimizer`. Each trains its own copy of the seeded model on the same batches: 24 samples
# per step, 8 per rank, each rank's loss a mean over its own. The last layer's weight has 4 rows of 15.

# %%
quiz.ask("21-empty-shard")

# %%
scratch = tempfile.TemporaryDirectory(prefix="dpcourse-lesson21-")
results = practice.tour(scratch.name, world_size=3)
print(f"{len(results)} ranks trained on {results[0]['backend']}")

# %% tags=["reveals-answer"]
with quiz.reveal("21-empty-shard"):
    print(practice.layout_table(results))

# %% [markdown]
# Why one `fully_shard` per layer? Each call makes one unit, all-gathered in one piece just before it runs. With
# the root as the only unit, the whole model is gathered at once, and a rank holds all of it while any layer
# runs. The tour watched the first step of both (`fsdp2.watched_step`): here the collectives of its forward, and
# the most bytes of full parameters a rank held (read just before each layer's forward):

# %%
print(f"the whole model: {ranks.parameter_count():,} float32 parameters, {4 * ranks.parameter_count():,} bytes")
for name, step in (("one unit per Linear", results[0]["step"]), ("the root only", results[0]["one_unit"]["step"])):
    print(f"{name:<20} {practice.collectives_line(step, parts=('forward',))}")
    print(f"{'':<20} most full parameter bytes held in the forward: {step['peak_full_bytes']:,}")

# %% [markdown]
# With the root as its only unit, a rank gathers the whole model at once. Per layer, the most it holds is the
# largest layer's. AG is one all-gather of a unit's shards into one tensor (lesson 13's all-gather; the
# collective's name changes between torch versions), RS one reduce-scatter of its gradients. A model of billions
# of parameters fits on a rank only if one layer at a time does.
#
# ## Reshard after the forward, or hold on
# After a unit's forward FSDP2 can [reshard](00_start_here.ipynb#Glossary) it, freeing the full parameters, and
# gather them again for the backward; or keep them until the backward has used them.

# %%
quiz.ask("21-reshard-gathers")

# %% tags=["reveals-answer"]
with quiz.reveal("21-reshard-gathers"):
    for flag, step in ((True, results[0]["step"]), (False, results[0]["kept"]["step"])):
        print(f"reshard_after_forward={flag!s:<6} {practice.collectives_line(step)}")
        print(f"{'':<26} full parameter bytes still held when the backward starts: {step['held_after_forward']:,}")

# %% [markdown]
# ## The same weights as DDP and as one device
# FSDP2 reduce-scatters the gradients and divides them by the number of ranks, so that each rank gets the mean
# for its rows (`torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce`), as DDP's
# [all-reduce](00_start_here.ipynb#Glossary) gives every rank the mean of all of them; Adam then updates each
# rank's rows. So every variant of the tour should end with the weights of one-device
# Adam on the whole batch, after 4 steps (`ranks.one_device`, the oracle of lessons 18 to 20):

# %%
one_device = ranks.one_device(steps=practice.STEPS)
for part, label in (("fsdp2", "FSDP2, one unit per Linear"), ("kept", "FSDP2, reshard_after_forward=False"),
                    ("one_unit", "FSDP2, the root only"), ("ddp", "DDP + Adam"),
                    ("zero", "DDP + ZeroRedundancyOptimizer")):
    runs = results if part == "fsdp2" else practice.runs(results, part)
    print(f"{label:<36} {ranks.first_difference(runs, one_device) or 'every rank equals one-device Adam'}")

# %% [markdown]
# `first_difference` compares within a relative 1e-5 (float sums in another order differ in the last bits).
#
# ### Exercise: train with FSDP2
# Write `train_with_fsdp2(model, batches, lr)`, run on every rank with its batches, a list of `(x, y)`: shard
# each `nn.Linear` of `model` and then the model with `fully_shard` on a one-dimensional mesh of all the ranks
# (`init_device_mesh(x.device.type, (dist.get_world_size(),))`), record the parameters' type names, train with
# `torch.optim.Adam(lr=lr)`, one step per batch, loss `F.mse_loss(model(x), y)`, and return
# `{"parameters": [p.full_tensor() for p in model.parameters()], "types": types}`. The check runs it on 3 ranks
# (`ranks.train_on_ranks`, the function travels as its source as in lesson 13) and compares with one-device
# Adam.

# %% tags=["solution"]
def train_with_fsdp2(model, batches, lr):
    """FSDP2 on every Linear and the model, Adam, one step per batch; the full parameters and their types."""
    ### BEGIN SOLUTION
    mesh = init_device_mesh(batches[0][0].device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    types = [type(p).__name__ for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # after fully_shard: it must see the DTensors
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return {"parameters": [p.full_tensor() for p in model.parameters()], "types": types}
    ### END SOLUTION


# %%
exercises.check("train_with_fsdp2", train_with_fsdp2)

# %% [markdown]
# ## Mixed precision: MixedPrecisionPolicy
# `fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))`
# asks for bfloat16 computation with float32 gradient reduction (`torch/distributed/fsdp/_fully_shard/
# _fsdp_api.py: MixedPrecisionPolicy`). Unlike [autocast](00_start_here.ipynb#Glossary) (lesson 16), which
# chooses a dtype per operation, it casts per module. The tour ran one such step on the CPU ranks and looked at
# the first layer from inside its forward (a forward pre-hook, after FSDP2's own) and afterwards.

# %%
quiz.ask("21-mixed-precision")

# %% tags=["reveals-answer"]
with quiz.reveal("21-mixed-precision"):
    for name, dtype in results[0]["mixed"].items():
        print(f"{name:<26} {dtype}")

# %% [markdown]
# ## Sharded checkpoints
# Every rank holds a different piece of the model, so no single rank can `torch.save` it. The tour saved FSDP2's
# model and Adam with `torch.distributed.checkpoint` (DCP) after step 3, every rank writing its own shards
# (`checkpoint_sharded.save`, `dpcourse/sharded/checkpoint_sharded.py`):
#
# ```python
# model_state, optimizer_state = get_state_dict(model, optimizer)     # DTensors: this rank's shards
# dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)
# ```

# %% [markdown]
# The directory holds one file per rank and a `.metadata` file that records which rows of which tensor each file
# holds:

# %%
print("files:", list(checkpoint_sharded.files(scratch.name)))
print("rows of model.0.weight in each saved chunk:", checkpoint_sharded.saved_rows(scratch.name, "model.0.weight"))
print("rows of model.4.weight in each saved chunk:", checkpoint_sharded.saved_rows(scratch.name, "model.4.weight"))
print("keys of the full state dict on each rank:",
      [len(result["full_state_dict_keys"]) for result in results])

# %% [markdown]
# The last line is the other way out: `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
# cpu_offload=True))` all-gathers every parameter and hands the full tensors to rank 0 only, the others getting
# an empty dict: a file that `torch.save` can write and a single-device script can load, at the cost of the
# whole model in rank 0's memory.
#
# A job that resumes does not always have as many ranks. The sharded checkpoint was written by 3:

# %%
quiz.ask("21-load-elsewhere")

# %% [markdown]
# `practice.resume` starts 2 ranks, builds the model with every weight zero, shards it, loads the checkpoint into
# the model and its Adam (`dcp.load`, then `set_state_dict`) and runs step 4, which the 3-rank run also ran after
# saving:

# %% tags=["reveals-answer"]
with quiz.reveal("21-load-elsewhere"):
    resumed = practice.resume(scratch.name, world_size=2)
    print("rank 0's local shapes on 2 ranks:", resumed[0]["local"])
    print("after step 4:", ranks.first_difference(resumed, results[0]["parameters"])
          or "every parameter equals the 3-rank run's after its step 4")

# %% [markdown]
# ### Exercise: which saved rows does a rank read?
# Write `rows_to_read(rows, saved_ranks, rank, ranks)`. A tensor of `rows` rows was saved by `saved_ranks` ranks,
# sharded on dim 0 by `torch.chunk`'s rule (`ceil(rows / n)` rows per rank, the last ones fewer or none). Rank
# `rank` of `ranks` loads it, sharded by the same rule. Return one `(saved_rank, first, end)` per saved shard that
# overlaps this rank's rows, in saved-rank order: the global rows `first ... end - 1` it takes from that file. The
# check tries the cases above and every grid up to 10 rows and 4 ranks.

# %% tags=["solution"]
def rows_to_read(rows, saved_ranks, rank, ranks):
    """The (saved_rank, first, end) pieces that rank `rank` of `ranks` reads from a checkpoint of `saved_ranks`."""
    ### BEGIN SOLUTION
    def rows_of(r, n):
        size = -(-rows // n)  # ceil(rows / n)
        return min(r * size, rows), min((r + 1) * size, rows)

    first, end = rows_of(rank, ranks)
    pieces = []
    for saved_rank in range(saved_ranks):
        saved_first, saved_end = rows_of(saved_rank, saved_ranks)
        if max(first, saved_first) < min(end, saved_end):
            pieces.append((saved_rank, max(first, saved_first), min(end, saved_end)))
    return pieces
    ### END SOLUTION


# %%
exercises.check("rows_to_read", rows_to_read)

# %% [markdown]
# ## ZeroRedundancyOptimizer: ZeRO-1 next to DDP
# torch's stage 1 is an optimizer wrapper. DDP all-reduces the gradients as always; each rank's
# `ZeroRedundancyOptimizer` steps a plain Adam (`optimizer.optim`) over the parameters it owns, then every
# owner broadcasts its updated parameters to the others (`torch/distributed/optim/zero_redundancy_optimizer.py:
# ZeroRedundancyOptimizer.step`):
#
# ```python
# model = DistributedDataParallel(model)
# optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2)
# ```
#
# Which parameters does each rank own?

# %%
quiz.ask("21-zero-owners")

# %% tags=["reveals-answer"]
with quiz.reveal("21-zero-owners"):
    for rank, result in enumerate(results):
        print(f"rank {rank}: Adam over {result['zero']['owned']}, {result['zero']['state_bytes']:,} bytes of state "
              f"(DDP's plain Adam: {result['ddp']['state_bytes']:,} bytes on every rank)")

# %%
print(results[0]["zero"]["consolidated_entries"])

# %% [markdown]
# ### Exercise: who owns what
# Write `zero_owners(sizes, world_size)`: given the parameters' sizes (numbers of elements), in order, the rank
# that owns each under `ZeroRedundancyOptimizer`. Go through them from the largest to the smallest (equal sizes
# in their order: Python's `sorted` is stable) and give each to the rank that owns the fewest elements so far,
# the lowest such rank on a tie. The check also runs 60 generated cases.

# %% tags=["solution"]
def zero_owners(sizes, world_size):
    """The rank that owns each parameter: largest first, each to the least loaded rank."""
    ### BEGIN SOLUTION
    owned, owners = [0] * world_size, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        rank = owned.index(min(owned))
        owners[index] = rank
        owned[rank] += sizes[index]
    return owners
    ### END SOLUTION


# %%
exercises.check("zero_owners", zero_owners)

# %% [markdown]
# ## DP, DDP and the ZeRO stages side by side
# How much does each rank hold? `side_by_side.measured` counts it with the course's two counters, on the
# course's model and 3 ranks, batch 24, Adam: lesson 15's `memory.measure` for DataParallel (one process, 3 CPU
# devices) and `sharded.memory.measure_sharded` for the rest, in one start of the ranks (ZeRO-1 is DDP with
# `ZeroRedundancyOptimizer`; "FSDP2, no reshard" and ZeRO-3 are FSDP2 with `reshard_after_forward` False and
# True). Parameters
# include the full layers gathered while a step runs; the total also counts activations, outputs and DDP's
# buckets. Next to it, `memory.predict` from its formulas:

# %%
measured = side_by_side.measured(ranks=3, batch=24)
print("measured\n" + side_by_side.table(measured))
print("\npredicted\n" + side_by_side.table(side_by_side.predicted(side_by_side.course_model(), 3, 24)))

# %% [markdown]
# The predictions are the formulas of `dpcourse/memory/sharding.py`. With P the parameter bytes and S the
# optimizer state's (Adam: 2 P, plus a 4-byte step per tensor), per rank on n ranks:
#
# | | parameters | gradients | optimizer state |
# |---|---|---|---|
# | DDP | P | P | S |
# | ZeRO-1 | P | P | S / n (flat slices) |
# | ZeRO-2 (the paper's stage 2; not measured here) | P | P / n + one layer's full | S / n (flat slices) |
# | ZeRO-3 (FSDP2) | P / n + one layer gathered | P / n + one layer's full | S / n |
# | FSDP2, no reshard | P / n + every layer gathered | P / n + one layer's full | S / n |
#
# where P / n is FSDP2's padded rows. The measured ZeRO-1 row is torch's `ZeroRedundancyOptimizer`, whose
# busiest rank owns 2.weight whole: more than S / n, as the exercise above showed. FSDP2 without resharding holds
# every layer gathered at the turn from forward to backward, beside its shards: more parameter bytes than DDP,
# at any size; what it saves is gradients and optimizer state. The paper's ZeRO-2 keeps DDP's P of parameters. At the size of a large model the formulas say
# where the bytes go: a **prediction**, not measured here, for the model below on 8 ranks (GiB per rank):

# %%
large = sized_mlp(features=4096, width=4096, depth=48, classes=32000)
print(f"{large.parameters:,} parameters, 8 ranks, batch 64, Adam (predicted)")
print(side_by_side.table(side_by_side.predicted(large, 8, 64), "GiB", 2**30))

# %%
scratch.cleanup()

# %% [markdown]
# ## Summary
# - `fully_shard` makes each parameter a DTensor sharded on its rows by `torch.chunk`'s rule (a rank can hold
#   none); one call per layer makes one unit, gathered just before it runs.
# - `reshard_after_forward=True` gathers each layer twice per step and frees it in between (ZeRO-3);
#   `False` gathers once and holds it to the backward (FSDP2's stand-in for ZeRO-2, holding P / n more parameter
#   bytes than the paper's stage 2). Both reduce-scatter the gradients.
# - FSDP2, DDP and DDP with `ZeroRedundancyOptimizer` end with one-device Adam's weights.
# - `torch.distributed.checkpoint` writes a file per rank plus metadata, and any number of ranks reads it back;
#   a full state dict gathers everything on rank 0.
# - `MixedPrecisionPolicy` computes with a low-precision gathered copy and keeps float32 shards; on the CPU it
#   runs, its speed and memory gains are a GPU matter.
# - `ZeroRedundancyOptimizer` shards Adam's state by whole parameters, largest first, to the least loaded rank.
# - Per rank, each ZeRO stage removes one more full copy; the formulas say how much at any size.
