# %% [markdown]
# # 17 · DDP in practice: data, checkpoints, uneven inputs, unused parameters, BatchNorm, and a script converted
#
# **After this lesson you will be able to explain**
# - what each DDP [rank](00_start_here.ipynb#Glossary) trains on with and without a `DistributedSampler`, and what its
#   seed and `set_epoch` are for;
# - how to save a checkpoint on rank 0 and load it on every rank, and what the barrier and `map_location` are for;
# - what happens when one rank has an extra batch, and what `join()` changes;
# - what DDP does when a parameter gets no gradient in a step, and what `find_unused_parameters=True` costs;
# - how per-replica BatchNorm and SyncBatchNorm differ, in numbers;
# - how a DataParallel script becomes a DDP script, line by line, and how `torchrun` runs it.
#
# Lesson 10 showed what DistributedDataParallel (DDP) does inside: one process per rank, averaged gradients,
# weights copied once, bucketed [all-reduce](00_start_here.ipynb#Glossary). This lesson is about the script
# around it. Every experiment runs on real ranks: 2 processes started from this notebook by `ddp.launch`
# (`dpcourse/ranks/launcher.py`), which stops every rank on any error or timeout. They talk through gloo with CPU
# tensors unless every rank has a GPU of its own: [NCCL](00_start_here.ipynb#Glossary) needs one GPU per rank,
# so on a machine with one GPU the 2 ranks use gloo and the CPU (the backend is printed below). As in lesson 10,
# the first launch waits for a helper process to import torch.

# %%
import difflib
import inspect
import multiprocessing
import tempfile
from pathlib import Path

import torch
from IPython.display import display
from torch.utils.data import DistributedSampler, RandomSampler

from dpcourse import examples, exercises, quiz, viz
from dpcourse.ddp.demos import batchnorm, checkpoint, sampling, uneven, unused
from dpcourse.ddp.implementations import syncbn
from dpcourse.ranks import backend_for, torchrun
from dpcourse.scripts import common, train_ddp, train_dp

print("the backend of 2 DDP ranks here:", backend_for(2))

# %% [markdown]
# ## Which samples each rank trains on
# DDP wraps the model; it does not touch the data. Every rank runs the same script, so every rank builds the
# same `DataLoader`. Take a single-device script's loader, `DataLoader(dataset, batch_size=3, shuffle=True)`,
# unchanged into a DDP script, seeded the same on every rank as reproducible scripts are:

# %%
quiz.ask("17-no-sampler")

# %% [markdown]
# `torch.utils.data.DistributedSampler` is the sampler made for DDP: it shuffles the indices with a seed that
# every rank shares, and gives rank r every second index from position r (with 2 ranks). It shuffles with a
# new generator seeded with `seed + epoch` each time it is iterated (`torch/utils/data/distributed.py`,
# `DistributedSampler.__iter__`). And `epoch` changes only when the loop says so:

# %%
quiz.ask("17-set-epoch")

# %% [markdown]
# `sampling.coverage` runs four loaders on 2 real ranks, over 12 samples for 2 epochs, and records which
# samples each rank trains on, in order (`dpcourse/ddp/demos/sampling.py`):
#
# - **no sampler**: `DataLoader(shuffle=True)`, seeded the same on both ranks;
# - **a seed per rank**: `DistributedSampler(dataset, seed=rank)`, as if each rank needed a seed of its own;
# - **no set_epoch**: `DistributedSampler(dataset)`, and the loop never calls `set_epoch`;
# - **set_epoch**: `DistributedSampler(dataset)` and `sampler.set_epoch(epoch)` at the start of every epoch.

# %% tags=["reveals-answer"]
with quiz.reveal("17-no-sampler", "17-set-epoch", part=1):
    coverage = sampling.coverage(samples=12, epochs=2)
    print(coverage)

# %% tags=["reveals-answer"]
with quiz.reveal("17-no-sampler", "17-set-epoch", part=2):
    display(viz.sampler_coverage(coverage.samples, coverage.orders))

# %% [markdown]
# ### Exercise: a rank's samples in a given epoch
# Write `epoch_indices(samples, rank, world, epoch, seed)`: the indices `DistributedSampler(shuffle=True,
# seed=seed)` gives rank `rank` of `world` ranks after `set_epoch(epoch)`, in order, for a data set of
# `samples` samples. Shuffle with `torch.randperm`, then pad and split as in lesson 10's exercise.

# %% tags=["solution"]
def epoch_indices(samples, rank, world, epoch, seed):
    """The samples rank `rank` trains on in `epoch`: one shared shuffle, padded, every `world`-th from `rank`."""
    ### BEGIN SOLUTION
    generator = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(samples, generator=generator).tolist()
    total = -(-samples // world) * world  # the next multiple of world
    order = (order * (total // samples + 1))[:total]  # pad with the permutation's own first indices
    return order[rank:total:world]
    ### END SOLUTION


# %%
exercises.check("epoch_indices", epoch_indices)

# %% [markdown]
# ## Checkpoints: rank 0 writes, then every rank reads
# The ranks' weights are equal (lesson 10), so one copy is enough. Save the wrapped model's `module`, whose
# keys have no `module.` prefix (lesson 07). The PyTorch DDP tutorial's recipe ("Save and Load
# Checkpoints") saves on one rank to reduce "write overhead", and adds two precautions:
#
# ```python
# if rank == 0:
#     torch.save({"step": step, "model": ddp_model.module.state_dict()}, path)
# dist.barrier()                                  # nobody reads before rank 0 has finished writing
# state = torch.load(path, map_location=device)    # onto this rank's device
# ddp_model.module.load_state_dict(state["model"])
# ```
#
# `checkpoint.checkpoints` trains 2 DDP steps and then saves and loads twice. First **without the
# barrier**, in the unlucky order: rank 1 reads while rank 0 has not written yet, so the file still holds
# the previous checkpoint, from step 0. A message forces that order every time; on a real, slow, shared
# file system it happens by chance. Then **with the barrier**. Each rank loads what it read into its wrapped
# model and trains one more step (`dpcourse/ddp/demos/checkpoint.py`):

# %%
checkpoints = checkpoint.checkpoints(steps=2)
print(checkpoints)

# %% [markdown]
# - **Without the barrier**, rank 1 resumed from step 0 and rank 0 from step 2: their weights now differ.
#   One more DDP step later they still differ by about as much, and nothing raised. DDP averages the
#   gradients, but it broadcasts rank 0's weights only in its constructor, where it compares the ranks'
#   parameter *shapes*, not their values (`_verify_param_shape_across_processes` and `_sync_module_states`,
#   `torch/nn/parallel/distributed.py:1064-1073`; lesson 10, *Replicated once*), so from here on
#   the ranks train different models. (Loading *before* wrapping would have let the constructor copy rank
#   0's weights over rank 1's stale ones, but not its stale step counter.)
# - **With the barrier**, every rank read the step-2 checkpoint: the same weights as the trained model,
#   on both ranks.
# - **`map_location`**: the file records the device each tensor was saved from, and `torch.load` puts it
#   back there unless `map_location` says otherwise (`torch/serialization.py`: `default_restore_location`).
#   On gloo every rank runs on the CPU, so nothing moves. On GPUs, rank 0 saves from `cuda:0`, and without
#   `map_location` every rank would load onto `cuda:0`: the DDP tutorial warns of "all processes on the
#   same machine using the same set of devices". `map_location=device`, or
#   `map_location={"cuda:0": f"cuda:{local_rank}"}`, loads onto the rank's own GPU.
# - **Saving on every rank** would write the same bytes once per rank (the last line): the "write
#   overhead" the tutorial's one-rank save avoids.

# %% [markdown]
# ## Uneven inputs and join()
# `DistributedSampler` gives every rank as many samples. Other ways of batching do not: batches built by a
# token budget, data split by file, or a stream per rank give ranks different numbers of batches. Rank 0 has
# 3 batches, rank 1 has 2:

# %%
quiz.ask("17-uneven-no-join")

# %% [markdown]
# `uneven.uneven` trains that way three times: without `join()`, with `ddp_model.join()`, and with
# `ddp_model.join(divide_by_initial_world_size=False)`. Each way runs on a [process group](00_start_here.ipynb#Glossary) of its own, created
# with the short timeout passed below (the default, printed last, is much longer); `launch` would stop both ranks at its own deadline anyway (`dpcourse/ddp/demos/uneven.py`):

# %% tags=["reveals-answer"]
with quiz.reveal("17-uneven-no-join", part=1):
    steps = uneven.uneven(batches=(3, 2), timeout=1.0)
    print(steps)
    print("rank processes still running:", multiprocessing.active_children())
    print("a process group's default timeout under gloo:", torch.distributed.constants.default_pg_timeout)

# %% tags=["reveals-answer"]
with quiz.reveal("17-uneven-no-join", part=2):
    notes = {mode: f"rank 0's step 3 used {steps.last_step_scale(mode):.2f} x its own gradient"
             for mode in uneven.MODES[1:]}
    display(viz.uneven_steps(steps.batches, {m: steps.steps(m) for m in uneven.MODES},
                     {m: [e is not None for e in steps.errors(m)] for m in uneven.MODES}, notes))

# %% [markdown]
# ## A parameter without a gradient: find_unused_parameters
# DDP's reducer finishes a bucket's all-reduce when every parameter in it has its gradient (lesson 10,
# *Bucketed all-reduce*). What if `forward` does not use a parameter at all? `unused.TwoHeads` has a second
# head, `spare`, that its forward never calls, as a multi-task model that skips a task would:

# %%
quiz.ask("17-unused-parameter")

# %% [markdown]
# `unused.unused` trains `TwoHeads` for 3 steps on 2 ranks, with the default options, with
# `find_unused_parameters=True` and with `static_graph=True` (`dpcourse/ddp/demos/unused.py`):

# %% tags=["reveals-answer"]
with quiz.reveal("17-unused-parameter"):
    found = unused.unused()
    print(found)
    print("\ntorch's message on rank 0:\n" + found.error)
    print("\nparameter indices:", list(enumerate(name for name, _ in unused.TwoHeads().named_parameters())))

# %% [markdown]
# What the option costs is that walk, at every step. When it finds nothing, torch says so, on the rank's standard
# error (captured here from rank 0 for a model whose parameters are all used):

# %%
print(found.warning)

# %% [markdown]
# Measured on rank 0 for a 10-layer MLP, per training step (CPU, gloo; the number depends on the machine
# and the model, and is larger for models with many small layers):

# %% tags=["nbval-ignore-output"]
ratio = found.overhead()
print(f"time per step with find_unused_parameters=True / without: {ratio:.2f}")
print("the walk costs time here" if ratio > 1.05 else "here the walk is lost in this machine's noise: small next to the step")

# %% [markdown]
# ## SyncBatchNorm against per-replica BatchNorm
# Under DDP, as under DataParallel, a `BatchNorm` layer normalises each rank's shard with that shard's mean
# and variance. When the shards differ (data sorted by class or by source), so do the statistics.
# `nn.SyncBatchNorm` normalises with the *global* batch's statistics: every rank computes its shard's mean,
# inverse standard deviation and count, an all-gather brings every rank's to every rank, and each rank
# combines them, weighting each rank by its count (`torch/nn/modules/_functions.py`:
# `SyncBatchNorm.forward`). How do two shards' variances combine?

# %%
quiz.ask("17-global-variance")

# %% [markdown]
# `batchnorm.global_variance` runs that question on 2 ranks: one channel, `[-1, 1]` on rank 0 and `[1, 3]`
# on rank 1, gathered and combined (`dpcourse/ddp/demos/batchnorm.py`):

# %% tags=["reveals-answer"]
with quiz.reveal("17-global-variance"):
    print(batchnorm.global_variance([[-1, 1], [1, 3]]))

# %%
try:
    torch.batch_norm_stats(torch.randn(4, 2), 1e-5)
except NotImplementedError as error:
    print("NotImplementedError:", str(error).split(". ")[0])

# %% [markdown]
# So this course writes the same arithmetic with `dist.all_gather` and ordinary tensor operations,
# `syncbn.SyncBatchNorm1d`, which runs on the CPU under gloo. It gathers each rank's variance where torch
# gathers the inverse standard deviation, the same information:

# %%
print(inspect.getsource(syncbn.global_stats))
print(inspect.getsource(syncbn.combine_stats).split('"""')[0] + "...")

# %% [markdown]
# `batchnorm.batchnorm` trains `Linear(8, 4) -> BatchNorm(4)` for one DDP step on 2 ranks with 8 samples
# each, the second half of the batch shifted and stretched so that the shards differ: once with
# `nn.BatchNorm1d` (per replica), once with `SyncBatchNorm1d`. It also tries torch's `nn.SyncBatchNorm` on
# the CPU. Next to them, one device trains the same step with `nn.BatchNorm1d` on all 16 samples:

# %%
norms = batchnorm.batchnorm(world_size=2, batch=16)
print(norms)

# %%
viz.batchnorm_stats(norms.reference, [rank["per-replica BatchNorm1d"] for rank in norms.ranks],
                    norms.ranks[0]["SyncBatchNorm1d"])

# %% [markdown]
# - **Per-replica BatchNorm**: each rank's running statistics follow its own shard, and neither equals
#   one device's; its outputs were normalised with the shard's statistics and differ from one device's, and
#   so does the step the averaged gradients took. DDP then broadcasts rank 0's buffers at the next forward
#   (lesson 10), so rank 1's statistics are lost.
# - **SyncBatchNorm1d**: every rank holds one device's running mean and variance, its outputs and weights
#   equal one device's to float rounding. The running variance takes the *unbiased* variance of the global
#   batch, as `nn.BatchNorm1d` does on one device.
# - **torch's `nn.SyncBatchNorm` on the CPU**: the `ValueError` above. On GPUs, one per rank,
#   `nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping swaps every BatchNorm layer for it.
#
# The price is communication inside every forward: one all-gather per BatchNorm layer, and in backward one
# all-reduce of two sums of the gradient (`torch/nn/modules/_functions.py`: `SyncBatchNorm.backward`).

# %% [markdown]
# ### Exercise: the global batch's statistics
# Write `global_batch_stats(means, variances, counts)`: `means` and `variances` are `(ranks, channels)`, each
# rank's shard mean and biased variance, and `counts` is `(ranks,)`. Return `(mean, variance)`, each
# `(channels,)`: the mean and biased variance of every rank's samples together. Then compare yours with
# `syncbn.combine_stats`.

# %% tags=["solution"]
def global_batch_stats(means, variances, counts):
    """Combine per-rank (mean, biased variance, count) into the global batch's mean and biased variance."""
    ### BEGIN SOLUTION
    weights = counts[:, None] / counts.sum()
    mean = (weights * means).sum(0)
    variance = (weights * (variances + (means - mean) ** 2)).sum(0)
    return mean, variance
    ### END SOLUTION


# %%
exercises.check("global_batch_stats", global_batch_stats)

# %% [markdown]
# ## From a DataParallel script to a DDP script
# `dpcourse/scripts/train_dp.py` trains the running example with DataParallel, as a script from the first lessons
# would: one process, every batch split over the devices. It calls `dpcourse.DataParallel`, which takes the
# arguments `torch.nn.DataParallel` takes and also splits over CPU "devices" (torch's would just call the model on a
# machine without GPUs). `dpcourse/scripts/train_ddp.py` is the same training converted to DDP. Both take the model,
# the data and the loss from the running example (`dpcourse.examples`, as in the DDP lessons: the MLP 8 → 16 → 4,
# mean squared error) and the settings from `dpcourse/scripts/common.py`, so the diff below shows only what the
# conversion changes, line by line:

# %%
dp_lines, ddp_lines = (inspect.getsource(script).splitlines() for script in (train_dp, train_ddp))
print("\n".join(difflib.unified_diff(dp_lines, ddp_lines, "train_dp.py", "train_ddp.py", n=1, lineterm="")))

# %% [markdown]
# What changed, from the top:
#
# 1. **How it starts.** `torchrun` starts one process per device; the script no longer counts devices
#    (`--devices` goes: `--nproc_per_node` decides; `--nproc` only says how many ranks to start when the script
#    is run without torchrun, and then it runs torchrun itself). Each process reads its `RANK`, `WORLD_SIZE` and
#    `LOCAL_RANK` from the environment torchrun sets, takes one device and joins the others with
#    `init_process_group`. NCCL needs a GPU of its own for every rank, so a rank takes GPU number `LOCAL_RANK`
#    with NCCL only when every rank on the machine has one (`backend_for`, the rule `ddp.launch` follows);
#    otherwise, 2 ranks on one GPU for instance, every rank runs on the CPU with gloo. Rank 0 prints which.
# 2. **The wrapper.** `DistributedDataParallel(model, device_ids=[device])` instead of `DataParallel(model,
#    devices)`: one device per process, given on GPUs only.
# 3. **The data.** A `DistributedSampler` made once, `set_epoch(epoch)` every epoch, and a per-rank batch
#    of `BATCH // world_size`, so that a step still trains on `BATCH` samples in all.
# 4. **What is printed.** Each rank's loss covers its own share, so the script all-reduces it and rank 0
#    prints the average.
# 5. **The end.** Rank 0 saves, a barrier, and `destroy_process_group`.
# 6. **A check** that real scripts leave out: before the barrier, rank 0 trains the same batches, each whole,
#    on one device (`train_dp.train` on one device, where DataParallel calls the model itself) and prints how
#    far its weights are from DDP's; the script exits with status 1 if they differ by more than rounding.
#
# The model, the optimizer, the loss and the training step did not change.
#
# Both scripts should reach the same weights. The DataParallel script draws each epoch's order from a
# `RandomSampler` seeded with `SEED + epoch`: the same permutation `DistributedSampler` draws after
# `set_epoch(epoch)` (both call `torch.randperm` with a generator seeded that way). Rank r keeps every
# second position, so the ranks' k-th batches together are the DataParallel script's k-th batch:

# %%
dataset, epoch = common.make_dataset(), 1
dp_order = RandomSampler(dataset, generator=torch.Generator().manual_seed(common.SEED + epoch))
dp_batches = torch.tensor(list(dp_order)).split(common.BATCH)
rank_batches = []
for rank in (0, 1):
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, seed=common.SEED)
    sampler.set_epoch(epoch)
    rank_batches.append(torch.tensor(list(sampler)).split(common.BATCH // 2))
print(f"epoch {epoch}: every DataParallel batch is rank 0's batch plus rank 1's batch:",
      all(set(dp.tolist()) == set(r0.tolist()) | set(r1.tolist())
          for dp, r0, r1 in zip(dp_batches, *rank_batches, strict=True)))

# %% [markdown]
# Now run both: the DataParallel script here, on 2 CPU devices, and the DDP script with torchrun, in 2
# processes started by a torchrun agent. `torchrun.torchrun` runs the command with a deadline and stops the
# agent and its workers if it passes (`dpcourse/ranks/torchrun.py`). Each of the 3 new processes imports
# torch, which makes this the slowest cell of the lesson; the automatic checks of the course skip it
# (`nbval-skip`) and run the same two scripts in `tests/test_ddp_practice.py` instead. The output below is
# the stored run; yours should print the same losses:

# %% tags=["nbval-skip"]
with tempfile.TemporaryDirectory(prefix="dpcourse-scripts-") as scripts_folder:
    folder = Path(scripts_folder)
    print("$ python -m dpcourse.scripts.train_dp --devices 2 --out dp.pt")
    train_dp.main(["--devices", "2", "--out", str(folder / "dp.pt")])
    ran = torchrun.torchrun("dpcourse.scripts.train_ddp", ["--out", str(folder / "ddp.pt")], nproc=2, timeout=120)
    print("\n$ torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --out ddp.pt")
    print(ran.stdout + f"exit code {ran.returncode}" + ("" if ran.returncode == 0 else "\n" + ran.stderr[-2000:]))
    # map_location: on a GPU machine the DataParallel script saved from cuda:0, the DDP ranks may have run on the CPU
    dp_weights, ddp_weights = (torch.load(folder / name, map_location="cpu") for name in ("dp.pt", "ddp.pt"))
print(f"\nmax |w_DDP - w_DataParallel| over all weights: "
      f"{examples.gap(max((ddp_weights[k] - dp_weights[k]).abs().max().item() for k in dp_weights))}")

# %% [markdown]
# The two runs printed the same losses, and their weights agree to float rounding: the conversion changed
# how the work is spread, not what is computed.

# %% [markdown]
# ## Summary
# - DDP does not split the data. Give every rank a `DistributedSampler` with the same seed (the default),
#   and call `set_epoch(epoch)` every epoch; without it every epoch repeats the first one's order.
# - Save on rank 0 (`ddp_model.module.state_dict()`), then `dist.barrier()`, then load on every rank with
#   `map_location` set to the rank's device. A rank that reads too early resumes from an old checkpoint,
#   silently, and DDP never re-syncs the weights.
# - Every backward ends in all-reduces that every rank must join: a rank with an extra batch waits until
#   the process group times out. `with ddp_model.join():` lets ranks that ran out shadow the others; by
#   default their zeros still count in the average.
# - A parameter that gets no gradient stops DDP's reduction; the next forward raises "Expected to have
#   finished reduction in the prior iteration". `find_unused_parameters=True` fixes it by walking the graph
#   every iteration; `static_graph=True` does it once.
# - Per-replica BatchNorm uses each shard's statistics; SyncBatchNorm all-gathers every rank's mean,
#   spread (torch: inverse standard deviation; this course's copy: variance) and count and combines them,
#   reproducing one device's BatchNorm on the whole batch. In torch it needs GPUs or another accelerator
#   (XPU, HPU, a privateuse1 backend), not the CPU.
# - A DataParallel script becomes a DDP script in a handful of lines: process group, wrapper, sampler,
#   per-rank batch, rank-0 printing and saving. `torchrun` starts it.
