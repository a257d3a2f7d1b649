# %% [markdown]
# # 10 · From DataParallel to DistributedDataParallel
#
# **After this lesson you will be able to explain**
# - why DistributedDataParallel (DDP) runs one process per device, and what that removes from every step;
# - how DDP combines the [ranks](00_start_here.ipynb#Glossary)' gradients, compared with DataParallel, and whether the result is always the
#   full-batch gradient;
# - what DDP copies once (the parameters, when you wrap the model) and what it sends every step (gradients,
#   and rank 0's buffers);
# - how bucketed [all-reduce](00_start_here.ipynb#Glossary) lets communication overlap backward;
# - which terms of a step's cost make DataParallel stop paying off, and how to launch DDP on one or
#   several machines.
#
# Everything below runs for real: DDP from `torch`, in **2 processes** talking through a [process group](00_start_here.ipynb#Glossary)
# backend, started from this notebook by `dpcourse.ddp` (`dpcourse/ddp/`):
# [NCCL](00_start_here.ipynb#Glossary) on the GPUs when the machine has a GPU for each rank, else gloo on
# the CPU (`dpcourse.ranks.backend_for`). The first launch starts a helper process that imports torch once;
# the later launches reuse it, so only the first one waits for that import.

# %%
import dataclasses
import inspect
import multiprocessing
import os
import textwrap

import torch
from IPython.display import display

import dpcourse
from dpcourse import costmodel, ddp, examples, exercises, quiz, viz, widgets

# %% [markdown]
# ## From threads to processes
# DataParallel is **one process**. At every forward it scatters the batch, builds a replica per device
# and runs each in a thread of that process (lessons 02–04). DDP starts **one process per device**,
# called a *rank*, and each rank keeps its own copy of the model for the whole run. Every rank runs the
# same script:
#
# ```python
# dist.init_process_group("gloo")          # join the others (the launcher sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)
# model = DistributedDataParallel(model)   # copies rank 0's weights and buffers to every rank, once
# loader = DataLoader(dataset, batch_size=b, sampler=DistributedSampler(dataset))   # this rank's share
# for x, y in loader:
#     optimizer.zero_grad()
#     loss_fn(model(x), y).backward()      # the ranks' gradients are combined during backward
#     optimizer.step()                     # every rank takes the same step on its own copy
# ```
#
# That first line is the setup DataParallel never needed: DDP's constructor requires an initialised
# process group (its docstring, `torch/nn/parallel/distributed.py`). Something must also start the
# processes; `torchrun` does it from a shell (last section), and `ddp.launch` does the same from a
# notebook: it starts 2 processes, sets the variables torchrun would set and calls `init_process_group`
# in each before running any experiment (`dpcourse/ranks/launcher.py`, `_run_rank`).
#
# Below, `ddp.train` trains the running example's MLP (8 → 16 → 4, mean-squared-error loss) for 3 steps
# under DDP, on 2 ranks with 8 of the 16 samples of each batch each, and prints the backend your machine
# used. For comparison, one DataParallel forward of the same model on `dpcourse.devices(2)`, traced:

# %%
training = ddp.train(world_size=2, steps=3, batch=16, lr=0.1)
for rank, record in enumerate(training.ranks):
    print(f"DDP rank {rank}: a process of its own: {record['pid'] != os.getpid()}, "
          f"device {record['device']}, process group backend {record['backend']}")
print("the two ranks are different processes:", training.ranks[0]["pid"] != training.ranks[1]["pid"])

devices = dpcourse.devices(2)
dp = dpcourse.DataParallel(examples.make_model().to(devices[0]), devices=devices)
with dpcourse.trace() as t:
    dp(examples.make_batch(8, device=devices[0])[0])
print("DataParallel: this process; the replicas' forwards ran in threads",
      sorted({span.thread for span in t.steps("forward")}))

# %% [markdown]
# The stored run used gloo on the CPU. So does a machine with one GPU: NCCL needs a GPU of its own for every
# rank, and two ranks on one GPU cannot use it, so the course gives them gloo and CPU tensors.
#
# Separate processes mean separate Python interpreters, each with its own [GIL](00_start_here.ipynb#Glossary): no replica waits for
# another's Python (lesson 04, *Threads and the GIL*), and nothing is rebuilt at every step (lesson 09).
# The DDP docstring says it "is proven to be significantly faster than DataParallel for single-node
# multi-GPU data parallel training", and DataParallel's own docstring recommends DDP "to do multi-GPU
# training, even if there is only a single node" (`torch/nn/parallel/data_parallel.py`). So the advice is
# DDP for any number of GPUs, not only "beyond two or three".
#
# A rank can also fail on its own. When one raises, `ddp.launch` stops the others and raises a
# `RankError` in the notebook that names the rank and carries its traceback, much as DataParallel
# re-raises "Caught ... in replica 1" (lesson 04). Your pids and paths will differ:

# %% tags=["nbval-ignore-output"]
try:
    ddp.crash("raise", rank=1)
except ddp.RankError as error:
    print(f"{type(error).__name__}, failing rank {error.rank}:")
    print("\n".join(str(error).splitlines()[:9]))
print("ranks still running:", multiprocessing.active_children())

# %% [markdown]
# ## How the ranks' gradients combine
# Each rank computes the loss of **its own shard** of the batch, a mean over its samples, and runs
# backward. DDP then combines the ranks' gradients so that every rank holds the same one. How?

# %%
quiz.ask("10-ddp-averages")

# %% [markdown]
# `ddp.gradients` runs one backward on 2 ranks, 4 samples each. It first runs the same backward inside
# `no_sync()`, which skips the communication, to show each rank's own gradient. The table shows the
# gradient of the last layer's bias:

# %% tags=["reveals-answer"]
with quiz.reveal("10-ddp-averages"):
    grads = ddp.gradients(world_size=2, batch=8)
    print(grads)

# %%
quiz.ask("10-unequal-shards")

# %% tags=["reveals-answer"]
with quiz.reveal("10-unequal-shards"):
    unequal = ddp.gradients(world_size=2, batch=8, sizes=[5, 3])
    print(unequal)

# %% [markdown]
# Equal averaged gradients, applied by the same optimizer, keep the ranks' copies equal. DataParallel
# has nothing to keep in sync: its replicas live for one forward. DDP's copies live for the whole run,
# so this is what stops them from drifting apart. After each of the 3 training steps above, both ranks'
# weights equal those of plain single-device training on the whole batch, although the ranks trained on
# different samples (their local losses differ):

# %%
for step, difference in enumerate(training.max_diff_to_single_device()):
    losses = [round(record["losses"][step], 4) for record in training.ranks]
    print(f"step {step + 1}: local losses {losses}, max |w_rank - w_single_device| over both ranks {examples.gap(difference)}")
print("weights equal single-device training:", training.matches_single_device())

# %% [markdown]
# ## Replicated once
# DataParallel copies the model to every device at every forward (lesson 03, *Replicated on every
# forward*). DDP copies it once: its constructor broadcasts rank 0's parameters and buffers to the other
# ranks (`_sync_module_states`, called from `DistributedDataParallel.__init__`). After that "parameters
# are never broadcast between processes" (the DDP docstring); only gradients travel.
#
# `ddp.train` built each rank's model from a different seed on purpose, so the ranks started out
# different. Then it wrapped them:

# %%
rank0_before = training.ranks[0]["before_wrap"]
for rank, record in enumerate(training.ranks):
    print(f"rank {rank}: max |w - rank 0's| before DDP(model) {(record['before_wrap'] - rank0_before).abs().max():.3f}, "
          f"after {(record['after_wrap'] - rank0_before).abs().max():.3f}")
print("the same parameter tensors on every rank through all 3 steps (never copied again):",
      all(record["same_storage"] for record in training.ranks))

# %% [markdown]
# The wrap made rank 1's weights equal rank 0's. After that, each rank's optimizer updated the same
# parameter tensors in place at every step: no rank ever received weights again.

# %% [markdown]
# ## Buffers broadcast from rank 0
# Buffers such as BatchNorm's `running_mean` have no gradient, so averaging gradients cannot keep them in
# step. By default DDP broadcasts rank 0's buffers **at the start of every forward**. torch 2.13 names
# that option `forward_sync_buffers=True` and deprecates the old name `broadcast_buffers` with a
# `FutureWarning`. The two differ when switched off: `forward_sync_buffers=False` still copies the
# buffers once, in the constructor, while `broadcast_buffers=False` skipped that copy too
# (`torch/nn/parallel/distributed.py`, `__init__`).
#
# Here the model has a BatchNorm layer, and each rank fills its `running_mean` with its own rank number
# before wrapping. Two training steps follow, with each rank on its own shard:

# %%
print(ddp.buffers(world_size=2, sync_buffers=True))

# %% [markdown]
# After wrapping, rank 1 holds rank 0's zeros. Each forward updates the statistics from the rank's own
# shard, so the ranks differ after forward 1. At the start of forward 2 rank 1 holds rank 0's values again:
# its own update was overwritten. In the end only rank 0's updates carry forward, as only replica 0's do
# under DataParallel (lesson 03). The batch statistics used to normalise are each rank's own shard's,
# as in DataParallel; `SyncBatchNorm` computes them over the global batch (last section).
#
# With `forward_sync_buffers=False` each rank keeps its own statistics after the first copy:

# %%
separate = ddp.buffers(world_size=2, sync_buffers=False)
for rank, record in enumerate(separate.ranks):
    print(f"rank {rank}: after DDP(model) {[round(v, 4) for v in record['after_wrap'][:3].tolist()]}, "
          f"start of forward 2 {[round(v, 4) for v in record['at_start'][1][:3].tolist()]}")

# %% [markdown]
# ## Bucketed all-reduce
# How do the gradients get averaged without waiting for the whole backward? DDP's C++ `Reducer`
# (`torch/csrc/distributed/c10d/reducer.cpp`) does four things, and `ddp.GradientBuckets` does the same
# in about 60 lines of Python (`dpcourse/ddp/implementations/reducer.py`):
#
# 1. group the parameters into **buckets** of about 25 MiB (the first one 1 MiB), last layers first,
#    because backward produces their gradients first. (In the very first backward DDP uses a single
#    bucket, then rebuilds the buckets in the order the gradients really arrived:
#    `DistributedDataParallel._ddp_init_helper` and `Reducer::rebuild_buckets`.);
# 2. put a hook on every parameter that fires when its gradient is ready; by default the hook at once
#    copies that gradient into its slot of the bucket's flat buffer, divided by the number of ranks
#    (`Reducer::mark_variable_ready_dense`). With `batched_grad_copy=True` (`torch/nn/parallel/distributed.py:782`)
#    the copies and the division wait until the bucket is complete, which is what `ddp.GradientBuckets` does:
#    it flattens and divides a bucket when its last gradient arrives;
# 3. when a bucket's last gradient arrives, start an **asynchronous** `all_reduce` of it, which sums it
#    across the ranks while backward goes on;
# 4. after backward, wait for every bucket and copy the averages back into `.grad`.
#
# Buckets start strictly in order, because ranks match collectives by the order they are called in.
# This is the hook:

# %%
print(inspect.getsource(ddp.GradientBuckets._gradient_ready))

# %% [markdown]
# The lesson's model has only 848 bytes of gradients, so `bucket_bytes=300` is used to get several buckets.
# `ddp.check_buckets` runs one backward with real DDP and one with `GradientBuckets` on every rank and
# compares the gradients:

# %%
print(ddp.check_buckets(world_size=2, batch=8, bucket_bytes=300))

# %% [markdown]
# The same gradients as DDP's. The first two all-reduces started while backward still had gradients to
# produce: communication overlapped computation. DataParallel cannot do that: its reduce-add runs in
# `Broadcast.backward`, once every replica's gradients are in (lesson 06).

# %% [markdown]
# ## Timelines side by side
# The same training, traced both ways: the MLP widened to 4 layers of 512 (about 2 MiB of gradients), a
# batch of 64, 2 steps on 2 DDP ranks with 1 MiB buckets, and one step of DataParallel on
# `dpcourse.devices(2)` (every DataParallel step looks the same). Each DDP rank records its own spans; an all-reduce span starts when
# its bucket is full and ends when the average has arrived (`dpcourse/ddp/demos/traced_steps.py`). The top lane,
# the critical path, is drawn for one step: for DDP it shows the one-time `replicate` and the last step.
# The figures show the stored run; yours will differ in the details:

# %% tags=["nbval-ignore-output"]
ddp_trace = ddp.trace_ddp_steps(world_size=2, steps=2, batch=64, hidden=512, depth=4, bucket_cap_mb=1.0)
ddp_figure = viz.timeline(ddp_trace)
ddp_figure.suptitle(f"DDP, 2 ranks (processes): 2 steps, {ddp_trace.duration * 1e3:.1f} ms end to end (dotted line)")
dp_trace = ddp.trace_dp_steps(n=2, steps=1, batch=64, hidden=512, depth=4)
display(ddp_figure, viz.timeline(dp_trace))

# %% [markdown]
# What the figures show, counted from the traces:

# %%
for rank in (0, 1):
    spans = [span for span in ddp_trace.spans if span.replica == rank]
    backwards = [span for span in spans if span.step == "backward"]
    buckets = [span.bytes_copied for span in spans if span.step == "allreduce"]
    print(f"DDP rank {rank}: replicate x{sum(s.step == 'replicate' for s in spans)}, "
          f"forward x{sum(s.step == 'forward' for s in spans)}, all-reduced buckets (bytes) {buckets}; "
          f"each all-reduce started inside a backward: "
          f"{all(any(b.start <= s.start <= b.end for b in backwards) for s in spans if s.step == 'allreduce')}")
print(f"DataParallel, one step: {sorted({span.step for span in dp_trace.spans})}")
print(f"  in the threads {sorted({span.thread for span in dp_trace.spans})}")

# %% [markdown]
# - **DDP**: two processes, one lane each. `replicate` (the constructor's broadcast) happens once; each
#   step is forward, backward, optimizer on every rank in parallel. In step 1 DDP all-reduces all
#   2,127,888 bytes as one bucket; in step 2 the rebuilt buckets (about 1 MiB, 1 MiB and the rest) start
#   one after the other inside backward.
# - **DataParallel**: one process. The main thread scatters, replicates, gathers and sums (`reduce-add`)
#   at every step, and the forward runs in one thread per replica. On CPU devices both replicas' backward
#   runs on the main thread: the autograd engine uses the calling thread (on GPUs each device has a thread
#   of its own).
#
# With CPU devices, as stored, DDP and DataParallel share the machine's cores, and gloo sends the gradients
# through the loopback network, so the timings say nothing about GPUs. On a machine with one GPU the two
# figures do not compare either: DataParallel runs on the GPU while the DDP ranks, with gloo, run on the CPU.
# With a GPU per rank, NCCL runs the all-reduces on its own [CUDA stream](00_start_here.ipynb#Glossary).
# One DataParallel step on a real GPU ships with the course (`dpcourse.recording`, lesson 09): 3 replicas of
# lesson 09's MLP sharing one GPU. Next to the stored CPU run above, its backward runs on the autograd engine's
# thread for the GPU (`Dummy-1`), not on the main thread:

# %%
from dpcourse import recording

gpu = recording.load()
viz.timeline(gpu.traces[3][-1], gpu.label)

# %% [markdown]
# The course's GPU benchmark (`docs/benchmarks.md`, GPU section) also ran DDP with 2 processes sharing that
# one GPU (with gloo: the course uses NCCL only with a GPU per rank, `ranks.backend_for`) against
# DataParallel on `[0, 0]`; one GPU cannot show how either scales across GPUs.

# %% [markdown]
# ## Cost model
# What would happen on several real GPUs, then? The course has no measurement across GPUs, so it answers with
# a model, and says so: `dpcourse.costmodel` writes a training step's time as a sum of terms, one per line of a formula,
# for one device, DataParallel and DDP. Everything in this section is **predicted by the cost model**, not
# measured:

# %%
print(costmodel.FORMULAS["DataParallel"], costmodel.formula("DDP"), sep="\n\n")

# %% [markdown]
# DataParallel pays for Python (`N * M * o`, one GIL for every replica's modules) and for building the
# replicas (`N * M * r`) once per device, so those terms grow with N, and it copies the weights and
# reduces the gradients through device 0. DDP pays for Python once per process, all in parallel, and its
# all-reduce moves `2 (N-1)/N * S` bytes per rank, which stays below `2S` however many ranks there are.
# Part of it is hidden behind backward.
#
# Its assumptions: a step is the sum of these terms and nothing else (no memory limits, kernel fusion,
# uneven chunks or GPU scheduling); GPU arithmetic runs at a data-centre GPU's fp32 speed and memory
# bandwidth, and links at the A100's [PCIe](00_start_here.ipynb#Glossary) 4.0 or [NVLink](00_start_here.ipynb#Glossary) speed, all from published specifications; the Python cost per
# module call and per replicated module is an assumed order of magnitude, not measured on a GPU machine;
# DataParallel's copies are pipelined by NCCL. `costmodel.PRESETS` names the source of every number.
# ResNet-50 (`costmodel.EXAMPLE`) is the model. Its FLOPs are not typed in but counted from its layers
# (`costmodel.resnet50_flops`), by the one convention the whole cost model uses:

# %%
print(costmodel.__doc__[costmodel.__doc__.index("How FLOPs are counted"):].strip())
example = costmodel.EXAMPLE
print(f"\nResNet-50: {example.params:,} parameters, C = {example.flops:.3g} FLOPs per image, forward + backward")

# %% [markdown]
# Predicted for ResNet-50 on two of the presets, 8 GPUs linked by PCIe or by NVLink, at batch 256 and at a
# smaller batch, 64:

# %%
for batch in (256, 64):
    curves = [costmodel.predict_speedup(preset, dataclasses.replace(example, batch=batch))
              for preset in ("8 GPUs, PCIe", "8 GPUs, NVLink")]
    for curve in curves:
        print(f"predicted, {curve.hardware.name}, batch {batch}: DP is fastest on {curve.dp_best} GPUs, "
              f"{max(curve.dp):.2f}x, and {curve.dp[-1]:.2f}x on 8; DDP on 8: {curve.ddp[-1]:.2f}x")
        print(f"  the 8th GPU gains DP {curve.dp[-1] - curve.dp[-2]:+.2f}x and DDP {curve.ddp[-1] - curve.ddp[-2]:+.2f}x"
              f"; DDP gains on every added GPU: {all(b > a for a, b in zip(curve.ddp, curve.ddp[1:]))}")
    print(f"  batch {batch}: DP's peak is the same on both links: {curves[0].dp_best == curves[1].dp_best}")
for curve in curves:
    print(textwrap.fill(f"{curve.hardware.name}'s numbers: {curve.hardware.sources}", 110, subsequent_indent="    "))
viz.plot_speedup("8 GPUs, PCIe")

# %%
viz.plot_speedup("8 GPUs, NVLink")

# %% [markdown]
# In the model, with these presets, DDP gains on every added GPU on both machines, while DataParallel gains
# less from the 8th GPU than DDP does, or loses from it: compare the two gains the cell prints. Where
# DataParallel's curve turns down, if it does by 8 GPUs, is where the cell says it is fastest. The batch
# decides how soon: a smaller batch has less computation to share out, while the per-replica Python and
# replication work, which grows with N, stays the same, so DataParallel peaks at fewer GPUs. The faster
# link lifts DataParallel's curve; whether it moves the peak, the cell prints: in the model, NCCL's
# pipelined copies cost the same for any number of GPUs, and what grows with N does not depend on the link.
# These are predictions from assumed numbers: a measurement across GPUs could move the peak.
#
# ### The model against a real GPU
# Part of the model can be checked. The recording from lesson 09 also holds `costmodel.measure` runs of
# the lesson MLP at 8 sizes on that GPU: one device, and 2 to 4 replicas sharing it. `costmodel.fit_gpu`
# fits the GPU's terms to 6 of the sizes (`gpu.calibrated()`), and predicts the other 2, which it never saw:

# %%
calibration = gpu.calibrated()
h = calibration.hardware
print(gpu.label)
print(f"F = {h.flops / 1e12:.1f} TFLOP/s, mu = {h.memory_bandwidth / 1e9:,.0f} GB/s and "
      f"beta = {h.bandwidth / 1e9:,.0f} GB/s (both from a plain copy within the GPU)")
print(f"o = {h.module_time * 1e6:.0f} us, r = {h.replicate_time * 1e6:.0f} us, alpha = {h.latency * 1e6:.0f} us, "
      f"h = {h.step_overhead * 1e6:.0f} us, h_dp = {h.dp_overhead * 1e6:,.0f} us")
preset = costmodel.PRESETS["one GPU"]
print(f"the 'one GPU' preset assumed F = {preset.flops / 1e12:.0f} TFLOP/s, mu = {preset.memory_bandwidth / 1e9:,.0f} GB/s, "
      f"o = {preset.module_time * 1e6:.0f} us, h_dp = {preset.dp_overhead * 1e6:.0f} us")
print(calibration)
errors = [abs(r["predicted"] / r["measured"] - 1) for r in calibration.table if r["used"] == "held out"]
print(f"held out: predicted within {max(errors):.0%} of the measured step")

# %% [markdown]
# The printed table is predicted against measured, step by step. What the fit says about this GPU:
# - its arithmetic (F) and memory (mu) are faster than the preset assumed: the preset's numbers are an older
#   GPU's (the A100), and fp32;
# - its Python costs are larger: `o` is what one module costs per step, forward and backward, and `h_dp` what
#   every DataParallel step adds on top (threads, autograd bookkeeping). Both are CPU time, which a faster GPU
#   does not shrink;
# - `mu` and `beta` are not fitted but measured by one plain copy within the GPU (`mu` counts the bytes it
#   reads and writes, `beta` those that arrive): on one GPU the copies between replicas never leave its memory.
#
# The link terms for PCIe or NVLink stay assumptions: this recording has no second GPU. Try other machines,
# batches, model sizes and link speeds; the table lists each term for one device and for 2 and 8 devices, so
# you can see which one grows:

# %%
widgets.CostModelCalculator()

# %% [markdown]
# ## Going further: several machines
# DataParallel cannot span machines at all: it is one process, and its devices are the GPUs that process
# sees (`torch/nn/parallel/data_parallel.py`). So on several machines the device 0 bottleneck does not go
# away; DataParallel just cannot run there. Multi-machine data parallelism means DDP (or [FSDP](00_start_here.ipynb#Glossary)).
#
# The running example's training as a DDP script, `dpcourse/scripts/train_ddp.py` (lesson 17 builds it from a
# DataParallel script). On one machine, `torchrun` starts one process per GPU (or per CPU rank):
#
# ```bash
# torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --epochs 2
# ```
#
# On several machines, run the same command on every machine. Here 2 machines with 8 GPUs each give 16
# ranks; HOST is one of the machines, reachable from the others, and the c10d rendezvous assigns the ranks:
#
# ```bash
# torchrun --nnodes=2 --nproc_per_node=8 --rdzv_id=job1 --rdzv_backend=c10d \
#          --rdzv_endpoint=HOST:29400 -m dpcourse.scripts.train_ddp --epochs 100
# ```
#
# or with fixed machine numbers (`--node_rank=0` on HOST, `--node_rank=1` on the other):
#
# ```bash
# torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \
#          -m dpcourse.scripts.train_ddp --epochs 100
# ```
#
# What changes on several machines (details in `dpcourse/ddp/__init__.py`):
#
# - **Ranks.** `RANK` (0–15 here) picks the data shard; `LOCAL_RANK` (0–7) picks the GPU on its machine.
#   Only rank 0 should print and save checkpoints, to storage every machine can read.
# - **The network.** NCCL (GPUs) and gloo (CPUs) pick a network interface themselves; set
#   `NCCL_SOCKET_IFNAME=eth0` (or `GLOO_SOCKET_IFNAME`) when they pick the wrong one. `NCCL_DEBUG=INFO`
#   prints which transport NCCL chose (NVLink inside a machine, InfiniBand or sockets between machines),
#   and `NCCL_IB_DISABLE=1` forces sockets. The machines must reach each other on the rendezvous port and
#   on the ports NCCL and gloo open. `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks that all ranks call the same
#   collectives.
# - **BatchNorm.** Each rank normalises with its own shard's statistics, as above.
#   `torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)`, before wrapping, computes them over the global
#   batch: every forward all-gathers each rank's mean, inverse standard deviation and count, and every
#   backward all-reduces two sums of the gradient (`torch/nn/modules/_functions.py: SyncBatchNorm`). It
#   runs on GPUs (and a few other accelerators), never on CPU tensors: in training under a process group it
#   refuses them (`torch/nn/modules/batchnorm.py: SyncBatchNorm.forward`; lesson 17 runs one written for the CPU).
# - **Data.** The global batch is the per-rank batch times `WORLD_SIZE`: 16 ranks × 32 samples make 512,
#   and the learning rate usually has to be rescaled for it. Call `sampler.set_epoch(epoch)` on the
#   `DistributedSampler` at the start of every epoch, or every epoch reuses the first epoch's shuffle.
# - **Clocks.** Each machine has its own clock, so timelines from different machines cannot be lined up
#   like the ones above.
#
# DataParallel cannot help a model that does not fit on one GPU: every replica holds all of it, on one
# device. DDP can be combined with model parallelism: a rank's module may itself span several GPUs (leave
# `device_ids` unset; the DDP tutorial's "Combining DDP with Model Parallelism"), but every rank still holds
# a whole copy of the model across its GPUs. Spreading one copy's parameters, gradients and optimizer
# state over the ranks takes sharding (FSDP).

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: a ring all-reduce
# DDP sums gradients with an all-reduce; NCCL's classic algorithm is a ring. Simulate it on a list:
# `tensors[r]` is rank r's gradient. Cut every tensor into n pieces (`tensor_split(n)`, which gives n pieces
# whatever the length, some of them empty). In **reduce-scatter**, n - 1 steps, every rank sends one piece to
# rank r + 1 (mod n), which adds it to its own; afterwards each rank holds one piece of the total. In
# **all-gather**, n - 1 more steps pass the finished pieces around the ring.
# Write `ring_all_reduce(tensors, send)` returning every rank's final tensor. A rank sends a piece by calling
# `send(r, (r + 1) % n, piece)`, which returns what arrives at rank r + 1 (a copy). The check passes its own
# `send` and watches every message: who sends to whom, how many, how large, and what each holds at that step.
# To try yours first, pass one that only copies: `lambda source, target, piece: piece.clone()`.

# %% tags=["solution"]
def ring_all_reduce(tensors, send):
    """A ring all-reduce, simulated: every rank ends with the sum, after sending 2(n - 1) pieces to rank r + 1."""
    ### BEGIN SOLUTION
    n = len(tensors)
    pieces = [list(t.tensor_split(n)) for t in tensors]  # pieces[rank][k]
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            # rank r sends piece k; all ranks send at once, so every piece is sent before any is changed
            k_of = [(r - step) % n if phase == "reduce-scatter" else (r + 1 - step) % n for r in range(n)]
            arrived = [send(r, (r + 1) % n, pieces[r][k_of[r]]) for r in range(n)]
            for r in range(n):
                receiver, k = (r + 1) % n, k_of[r]
                pieces[receiver][k] = pieces[receiver][k] + arrived[r] if phase == "reduce-scatter" else arrived[r]
    return [torch.cat(p) for p in pieces]
    ### END SOLUTION


# %%
exercises.check("ring_all_reduce", ring_all_reduce)

# %% [markdown]
# ### Exercise: DistributedSampler's shards
# Write `distributed_indices(batch, rank, world)`: the indices `DistributedSampler(range(batch),
# num_replicas=world, rank=rank, shuffle=False)` gives rank `rank`, computed by hand. Every rank gets the same
# number of samples, so the list of indices is first padded by repeating its start.

# %% tags=["solution"]
def distributed_indices(batch, rank, world):
    """Rank `rank`'s share of `batch` samples over `world` ranks, padded so every rank gets as many."""
    ### BEGIN SOLUTION
    per_rank = -(-batch // world)
    padded = [i % batch for i in range(per_rank * world)]  # 0..batch-1, then again from 0
    return padded[rank::world]
    ### END SOLUTION


# %%
exercises.check("distributed_indices", distributed_indices)


# %% [markdown]
# ## Summary
# - DDP runs one process per device. Each keeps one copy of the model for the whole run, with its own
#   Python and its own GIL; `init_process_group` and a launcher (`torchrun`) are the price.
# - DDP **averages** the ranks' gradients; DataParallel **sums** its replicas'. DataParallel's sum is the
#   full-batch gradient for one mean loss over the gathered output; DDP's average is, for per-rank mean
#   losses, only when the shards are equal.
# - The model is copied once, when it is wrapped; after that only gradients travel, and by default rank
#   0's buffers at every forward (`forward_sync_buffers`, formerly `broadcast_buffers`).
# - Gradients travel in buckets whose all-reduces start during backward, so communication overlaps
#   computation.
# - In the cost model, DataParallel's Python and replication terms grow with the number of devices and
#   DDP's do not: predicted, each added GPU gains DataParallel less, and with a small batch it peaks and then
#   slows down, while DDP keeps scaling (the presets' numbers
#   are published specifications and assumptions, not GPU measurements).
#
# ## Exercises
# 1. With shards of 5 and 3 samples, rebuild the full-batch gradient from the two ranks' own gradients
#    (`unequal.local`): write `full_batch_gradient(local, sizes)`.
# 2. `DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)` gives rank `r` its indices
#    without any process group. Which samples do the 3 ranks see twice in one epoch of 10 samples? Write
#    `seen_twice(samples, ranks)`.
# 3. With the cost model, find the smallest batch in `(32, 64, 128, 256, 512, 1024)` at which DDP on
#    "8 GPUs, PCIe" is at least 6 times faster than one GPU for ResNet-50 (`costmodel.EXAMPLE` with
#    another batch): write `smallest_batch(target, preset)`.

# %% tags=["solution"]
def full_batch_gradient(local, sizes):
    ### BEGIN SOLUTION
    return sum(size * gradient for gradient, size in zip(local, sizes)) / sum(sizes)
    ### END SOLUTION


# %%
exercises.check("full_batch_gradient", full_batch_gradient)

# %% tags=["solution"]
from torch.utils.data import DistributedSampler


def seen_twice(samples, ranks):
    ### BEGIN SOLUTION
    seen = [i for r in range(ranks) for i in DistributedSampler(range(samples), num_replicas=ranks, rank=r,
                                                                 shuffle=False)]
    return sorted({i for i in seen if seen.count(i) > 1})
    ### END SOLUTION


# %%
exercises.check("seen_twice", seen_twice)

# %% tags=["solution"]
def smallest_batch(target, preset):
    ### BEGIN SOLUTION
    for batch in (32, 64, 128, 256, 512, 1024):
        if costmodel.predict_speedup(preset, dataclasses.replace(costmodel.EXAMPLE, batch=batch)).ddp[-1] >= target:
            return batch
    return None
    ### END SOLUTION


# %%
exercises.check("smallest_batch", smallest_batch)
