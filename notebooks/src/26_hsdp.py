# %% [markdown]
# # 26 · HSDP: sharding on a 2-D mesh
#
# **After this lesson you will be able to explain**
# - how `fully_shard` on a two-dimensional [device mesh](00_start_here.ipynb#Glossary) shards each parameter
#   along one dimension and replicates it along the other ([HSDP](00_start_here.ipynb#Glossary)), and which
#   [rank](00_start_here.ipynb#Glossary) holds which [shard](00_start_here.ipynb#Glossary);
# - which collective runs in which [process group](00_start_here.ipynb#Glossary) of the mesh, and how many bytes
#   each moves, measured next to 1-D FSDP2 and DDP's [all-reduce](00_start_here.ipynb#Glossary);
# - why HSDP gives the same weights as one device, and what it costs in memory;
# - why it exists: which of its collectives would cross the slow links between the nodes of a GPU cluster, and
#   how many bytes they carry.
#
# Lesson 21's FSDP2 sharded every parameter over all the ranks of a one-dimensional mesh, and DDP (lesson 17)
# kept a whole copy on every rank. HSDP ("hybrid sharded data parallel") does both at once, on a mesh of R
# replicas of S shards. Everything below runs on 4 real gloo ranks started from this notebook, with lesson 21's
# model made a little wider, 8 → 16 → 16 → 4, so that every layer's rows split evenly over 2 and over 4 ranks;
# Adam, 24 samples per step, 6 per rank.

# %%
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from dpcourse import exercises, quiz, ranks
from dpcourse.sharded import hsdp, hsdp_tables
from dpcourse.viz.hsdp import mesh_figure

print(f"the model: {ranks.parameter_count(hsdp.WIDTHS):,} float32 parameters, "
      f"{4 * ranks.parameter_count(hsdp.WIDTHS):,} bytes; {hsdp.WORLD_SIZE} ranks on {ranks.backend_for(4)}")

# %% [markdown]
# ## A mesh of 2 × 2 ranks
# Each rank runs the same lines. `init_device_mesh` lays the 4 ranks out as a 2 × 2 grid and names its two
# dimensions; `fully_shard` takes the mesh as lesson 21's took the 1-D one:
#
# ```python
# mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
# for layer in model:
#     if isinstance(layer, nn.Linear):
#         fully_shard(layer, mesh=mesh)     # one unit per Linear, as in lesson 21
# fully_shard(model, mesh=mesh)             # the root
# optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
# ```
#
# `fully_shard`'s docstring says what it does with a 2-D mesh: parameters "are sharded across the 1st dim and
# replicated across the 0th dim (HSDP) with `(Replicate(), Shard(0))` placement"
# (`torch/distributed/fsdp/_fully_shard/_fully_shard.py: fully_shard`). The names are only labels; the order of
# the dimensions decides. `hsdp.tour` (`dpcourse/sharded/hsdp.py`) starts the 4 ranks once and trains three copies
# of the seeded model there, 3 steps each: HSDP as above, FSDP2 on a 1-D mesh of all 4 ranks, and DDP. Each one's
# first step is recorded collective by collective, with the ranks of the process group it ran on.

# %%
quiz.ask("26-rank-three-rows")

# %%
results = hsdp.tour()
print(f"{len(results)} ranks trained HSDP, FSDP2 and DDP on {results[0]['backend']}")

# %% tags=["reveals-answer"]
with quiz.reveal("26-rank-three-rows"):
    print(hsdp_tables.layout_table(results))

# %% [markdown]
# ## The same weights as one device
# Each rank's loss is the mean over its own 6 samples. HSDP must end with the weights of one-device Adam on the
# whole batch of 24, as FSDP2 and DDP do (`ranks.one_device`, the oracle of lessons 18 to 21):

# %%
one_device = hsdp.one_device()
for kind in hsdp.KINDS:
    print(f"{kind:<6} {hsdp.difference(hsdp.runs(results, kind), one_device) or 'every rank equals one-device Adam'}")

# %% [markdown]
# `hsdp.difference` compares within a relative 1e-5 and an absolute 1e-5: the ranks add their gradients in
# another order than one device does, and Adam, which divides each entry by its running RMS, magnifies the
# rounding where a gradient is near zero. With torch 2.13 and 2.14.1 the weights above end within 3e-8 of one
# device's; torch 2.8.0's FSDP2 averages with other rounding, and they end up to 6e-6 away (measured with this
# lesson's run), above lesson 21's absolute 1e-6.
#
# ### Exercise: train with HSDP
# Write `train_with_hsdp(model, batches, lr)`, run on each of 4 ranks with its batches, a list of `(x, y)`:
# build the mesh above on the model's device type (`init_device_mesh(next(model.parameters()).device.type, (2, 2),
# mesh_dim_names=("replicate", "shard"))`), `fully_shard` each `nn.Linear` on it and then the model, train with
# `torch.optim.Adam(lr=lr)`, one step per batch, loss `F.mse_loss(model(x), y)`, and return the full parameters,
# `[p.full_tensor() for p in model.parameters()]`. The check runs it on 4 ranks (`ranks.train_on_ranks`) and compares with one-device Adam;
# then it looks at what the program built: every parameter a DTensor on a (2, 2) mesh placed
# `(Replicate(), Shard(dim=0))`, every Linear its own unit, and the collectives each group ran. Lesson 21's 1-D
# FSDP2 reaches the same weights, and fails.

# %% tags=["solution"]
def train_with_hsdp(model, batches, lr):
    """HSDP on a (2, 2) mesh: every Linear, then the model; Adam, one step per batch; the full parameters."""
    ### BEGIN SOLUTION
    mesh = init_device_mesh(next(model.parameters()).device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
    linears = [layer for layer in model if isinstance(layer, nn.Linear)]
    for module in [*linears, model]:  # each Linear, then the root
        fully_shard(module, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # after fully_shard: it must see the DTensors
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.full_tensor() for p in model.parameters()]
    ### END SOLUTION


# %%
exercises.check("train_with_hsdp", train_with_hsdp)

# %% [markdown]
# ## Which group runs which collective
# The mesh makes two kinds of process group for every rank: its row (ranks 0 and
# 1, or 2 and 3), the *shard group*, and its column (ranks 0 and 2, or 1 and 3), the *replicate group*. Lesson 21
# counted FSDP2's all-gathers and reduce-scatters, all of them on one group of every rank. On the 2-D mesh:

# %%
quiz.ask("26-replicate-collective")

# %% tags=["reveals-answer"]
with quiz.reveal("26-replicate-collective"):
    print("rank 0, the first step's collectives by group:\n" + hsdp_tables.dimension_lines(results[0]))

# %% [markdown]
# ## Bytes per dimension, against FSDP2 and DDP
# Each collective was recorded with its size: the full output of an all-gather, the full input of a
# reduce-scatter, the tensor of an all-reduce (the convention of `ranks.traffic.counted`, lesson 18). DDP's
# all-reduce moves all the gradients, 1,936 bytes here, in one [bucket](00_start_here.ipynb#Glossary).

# %%
quiz.ask("26-replicate-bytes")

# %% tags=["reveals-answer"]
with quiz.reveal("26-replicate-bytes"):
    print(hsdp_tables.traffic_table(results))
    print(hsdp_tables.all_reduce_share(results))
    display(mesh_figure(results))

# %% [markdown]
# ## Why shard in one dimension and replicate in the other
# What follows about GPUs is **read, not measured here**. A GPU cluster is built of nodes of several GPUs each.
# Inside a node the GPUs are joined by fast links ([NVLink](00_start_here.ipynb#Glossary)); the nodes are
# joined by a network ([InfiniBand](00_start_here.ipynb#Glossary) or Ethernet) that gives each GPU less
# bandwidth. FSDP's all-gathers and reduce-scatters run for every layer in every step; DDP's all-reduce once per
# bucket. The DeviceMesh recipe (https://docs.pytorch.org/tutorials/recipes/distributed_device_mesh.html) builds
# HSDP's mesh for this: "a 2D mesh that connects the devices within each host, and connects each device with its
# counterpart on the other hosts", an `init_device_mesh("cuda", (nodes, GPUs per node))`, so that a shard group
# is one node and a replicate group holds one GPU of each node. FSDP1's `ShardingStrategy.HYBRID_SHARD` states the
# point: "expensive all-gathers and reduce-scatters are only done within a node"
# (`torch/distributed/fsdp/api.py: ShardingStrategy`). With [NCCL](00_start_here.ipynb#Glossary), each group of
# the mesh is a communicator of its own.
#
# What the gloo ranks above do show: on a (R, S) mesh, only the replicate group's collectives would cross
# between nodes, and they are one all-reduce per unit, of the gradient shard, P / S bytes for P bytes of
# gradients; everything else stays in the shard group. With DDP or 1-D FSDP2 on the same ranks, every collective
# spans all of them, and so crosses between nodes.
#
# ### Exercise: the groups of a mesh
# Write `hsdp_groups(world_size, shard_size)`: the ranks of every shard group and every replicate group of
# `init_device_mesh(..., (world_size // shard_size, shard_size))`, as `{"shard": [...], "replicate": [...]}`,
# each a list of groups (lists of ranks in order), in the order of their first ranks. The mesh is
# `torch.arange(world_size).view(R, S)` (`torch/distributed/device_mesh.py: init_device_mesh`). The check
# tries every mesh of up to 16 ranks; `tests/test_hsdp.py` checks the rule against the groups the ranks above
# were given.

# %% tags=["solution"]
def hsdp_groups(world_size, shard_size):
    """The shard groups (rows of the mesh) and the replicate groups (its columns), by global rank."""
    ### BEGIN SOLUTION
    rows = world_size // shard_size  # the mesh is R x S, filled row by row: rank = row * S + column
    shard = [[row * shard_size + column for column in range(shard_size)] for row in range(rows)]
    replicate = [[row * shard_size + column for row in range(rows)] for column in range(shard_size)]
    return {"shard": shard, "replicate": replicate}
    ### END SOLUTION


# %%
exercises.check("hsdp_groups", hsdp_groups)

# %% [markdown]
# ### Exercise: bytes per rank and per dimension
# Write `traffic_per_rank(parameter_bytes, replicate, shard)`: the bytes one rank sends in one training step of
# FSDP2 on a `(replicate, shard)` mesh, with every Linear its own unit, `reshard_after_forward=True` (each unit
# gathered in the forward and again in the backward, lesson 21) and every row count divisible by `shard`. Use the
# ring rule of lesson 13: on n ranks, an all-gather of B bytes (its full output) or a reduce-scatter of B bytes
# (its full input) sends (n - 1) / n · B per rank, an all-reduce of B bytes twice that. Return
# `{"shard": bytes, "replicate": bytes}`. The table above is the measurement of one case: (2, 2), and, as the
# corners of the rule, (1, 4) for FSDP2 and (4, 1) for DDP. The check tries 100 more meshes and sizes.

# %% tags=["solution"]
def traffic_per_rank(parameter_bytes, replicate, shard):
    """Bytes sent per rank per step: in the shard group, and in the replicate group."""
    ### BEGIN SOLUTION
    shard_bytes = (shard - 1) / shard * (2 * parameter_bytes + parameter_bytes)  # 2 all-gathers, 1 reduce-scatter
    replicate_bytes = 2 * (replicate - 1) / replicate * parameter_bytes / shard  # all-reduce of the shard
    return {"shard": shard_bytes, "replicate": replicate_bytes}
    ### END SOLUTION


# %%
exercises.check("traffic_per_rank", traffic_per_rank)

# %% [markdown]
# ## Memory per rank
# The tour also counted what rank 0 holds after training: its parameters, gradients and Adam's state, each only
# its shard under FSDP2 and HSDP.

# %%
quiz.ask("26-memory")

# %% tags=["reveals-answer"]
with quiz.reveal("26-memory"):
    print(hsdp_tables.memory_table(results))
    print(hsdp_tables.memory_ratios(results))

# %% [markdown]
# ## What to remember
# - `fully_shard` on a 2-D mesh places every parameter `(Replicate(), Shard(0))`: each row of the mesh (a shard
#   group) splits the rows of every parameter, and each column (a replicate group) holds the same shard on every
#   rank. `init_device_mesh` fills the mesh row by row: a shard group is S consecutive ranks.
# - In a step, the shard group all-gathers and reduce-scatters as FSDP2 on S ranks does; the replicate group
#   all-reduces each rank's gradient shard, P / S bytes, and nothing else. The weights equal one-device Adam's.
# - A rank holds 1/S of the parameters, gradients and optimizer state: more than FSDP2 on all R S ranks, less than
#   DDP.
# - (Read, not measured here.) Put a shard group inside a node and the replicate groups across nodes, and only
#   the all-reduce of the gradient shards uses the slower links between nodes.
