# %% [markdown]
# # 00 · Start here: what DataParallel does, and how this course works
#
# **After this lesson you will be able to explain**
# - what data parallelism is, and why this course teaches `DataParallel` although torch recommends
#   `DistributedDataParallel`;
# - the four steps of every DataParallel forward, in order, and what each one does in backward;
# - which devices the course runs on here, and what CPU devices can and cannot show;
# - how lessons, quizzes, solutions and your saved progress work.

# %%
import inspect
import re
from itertools import groupby

import torch

import dpcourse
from dpcourse import examples, quiz, widgets

# %% [markdown]
# ## What DataParallel is for
# **Data parallelism** runs the *same* model on several devices at once, each device on a *different slice* of
# the batch, and then combines the slices' gradients into the single update the whole batch would have given.
# The model is never split; the batch is. `torch.nn.DataParallel` does this inside one Python process: "the
# module is replicated on each device, and each replica handles a portion of the input. During the backwards
# pass, gradients from each replica are summed into the original module" (docstring of
# `torch/nn/parallel/data_parallel.py`).
#
# The same docstring carries a warning: "It is recommended to use DistributedDataParallel, instead of this
# class, to do multi-GPU training, even if there is only a single node." The DDP tutorial
# (pytorch/tutorials, `intermediate_source/ddp_tutorial.rst`) gives the reasons: DataParallel is "usually
# slower than DDP even on a single machine due to [GIL](#Glossary) contention across threads, per-iteration
# replicated model, and additional overhead introduced by scattering inputs and gathering outputs". Lesson 09
# shows each of these costs on CPU devices, counting bytes and objects and timing dpcourse's steps, and
# lesson 10 puts them into a cost model of one training step under DataParallel and under DDP, whose GPU
# curves are predictions from published hardware numbers, not measurements. This course still starts with DataParallel because its four steps are the clearest picture of
# data parallelism there is: one process, one function call, and you can stop after each step and look at
# every chunk, copy and gradient. DDP does the same arithmetic, spread over processes (lesson 10).

# %% [markdown]
# ## The four steps
# Every DataParallel forward is four steps. Before you look, put them in order:

# %%
quiz.ask("00-four-steps")

# %% [markdown]
# Here is one training step of the course's model on 3 devices, recorded with `dpcourse.trace()`. Each replica's
# run inside `parallel_apply` is recorded as a `forward` span; consecutive spans of the same step are counted.

# %% tags=["reveals-answer"]
def in_order(spans):
    runs = [(step, len(list(group))) for step, group in groupby(s.step for s in spans)]
    return " → ".join(step if n == 1 else f"{step} ×{n}" for step, n in runs)


with quiz.reveal("00-four-steps"):
    devices = dpcourse.devices(3)
    model = examples.make_model().to(devices[0])  # the model goes to devices[0] before it is wrapped
    x, y = examples.make_batch(10, device=devices[0])
    dp = dpcourse.DataParallel(model, devices=devices)
    with dpcourse.trace() as t:
        loss = examples.loss_fn(dp(x), y)
        loss.backward()
    first_backward = next(i for i, s in enumerate(t.spans) if s.step == "gather-backward")
    print("forward: ", in_order(t.spans[:first_backward]))
    print("backward:", in_order(t.spans[first_backward:]))

# %% [markdown]
# | step | forward | backward |
# |---|---|---|
# | **scatter** | split the batch into chunks with `torch.chunk`, chunk i for device i | concatenate the chunks' gradients (only when the input needs one; here it does not) |
# | **replicate** | copy the model onto every device that got a chunk | **reduce-add**: sum the copies' gradients into the model's `.grad` |
# | **parallel_apply** | run replica i on chunk i, one thread per replica | each replica's own backward, through autograd |
# | **gather** | concatenate the outputs on one device | **gather-backward**: split the output's gradient back to the replicas |
#
# torch's `DataParallel.forward` and dpcourse's call the four steps in the same order, on the same arguments
# (torch names the devices `device_ids`). Note `[: len(inputs)]`: scatter runs first because the number of
# chunks decides how many replicas are built.

# %% tags=["reveals-answer"]
def step_lines(forward):
    pattern = r"self\.(scatter|replicate|parallel_apply|gather)\("
    return [line.strip() for line in inspect.getsource(forward).splitlines() if re.search(pattern, line)]


with quiz.reveal("00-four-steps"):
    pairs = zip(step_lines(torch.nn.DataParallel.forward), step_lines(dpcourse.DataParallel.forward))
    print("\n\n".join(f"torch:    {theirs}\ndpcourse: {ours}" for theirs, ours in pairs))

# %% [markdown]
# **The guided tour.** The explorer below runs one real training step and keeps every intermediate tensor.
# Click **Next** to walk through it stage by stage, from the inputs to the optimizer step, and move the
# sliders to change the number of devices or the batch.
# It needs a running kernel: run the cell first.

# %%
widgets.StepThrough(devices=4, batch=10)

# %% [markdown]
# ## Your devices
# `torch.nn.DataParallel` needs GPUs. What does it do on a laptop without one?

# %%
quiz.ask("00-laptop-passthrough")

# %% [markdown]
# The cell below prints what *your* machine has, so its output differs from machine to machine. The stored
# output was made on a CPU-only machine.

# %% tags=["nbval-ignore-output", "reveals-answer"]
with quiz.reveal("00-laptop-passthrough"):
    print("GPUs visible to torch:         ", torch.cuda.device_count())
    print("torch.nn.DataParallel device_ids:", torch.nn.DataParallel(examples.make_model()).device_ids)
    print("dpcourse.devices(3):           ", dpcourse.devices(3))

# %% [markdown]
# Without a GPU, torch's wrapper keeps `device_ids = []` and its forward just calls your model
# (`torch/nn/parallel/data_parallel.py`, `__init__` and `forward`): nothing is split, copied or run in threads.
# With one GPU, `device_ids` is `[0]`: `__init__` moves your model to `cuda:0` itself, and forward moves the
# inputs there and calls the model, again without a split or a thread; the output is on `cuda:0`.
# That is why the course has its own implementation. `dpcourse.devices(n)` returns n devices for n replicas,
# in one of three modes (`dpcourse/devices.py`):
#
# - **n GPUs or more**: one replica per GPU, the real thing;
# - **fewer GPUs**: replicas share the GPUs round-robin, so every GPU is used; every copy, thread and sum
#   happens, and the replicas that share a GPU take turns on it, so expect little speed-up (none on one GPU);
# - **no GPU**: n CPU "devices": every replica is a real copy of the parameters, run in its own thread.
#
# CPU devices show everything DataParallel *computes*: how the batch is cut, the copies and which memory they
# share, lost attribute updates, the gradient sum, the threads. They cannot show what depends on separate
# memories: device-mismatch errors (all CPU memory is one device), the cost of moving data between GPUs, GPU
# speed, or device 0 filling up. The lessons say so each time. Setting the environment variable
# `DPCOURSE_DEVICES=cpu` gives CPU devices on a GPU machine too; the tests do, so the stored outputs match
# everywhere.

# %% [markdown]
# ## How the course works
# | lesson | what it is about |
# |---|---|
# | [00 Start here](00_start_here.ipynb) | this page: the four steps, your devices, how the course works |
# | [01 One device](01_one_device.ipynb) | the training step we parallelise, and the one-device oracle every result is checked against |
# | [02 Scatter](02_scatter.ipynb) | how the batch is cut: the `torch.chunk` rule, nested inputs, keyword arguments |
# | [03 Replicate](03_replicate.ipynb) | shallow copies of the model, replica 0's shared memory, lost attribute updates, BatchNorm |
# | [04 parallel_apply](04_parallel_apply.ipynb) | one thread per replica; grad mode and [autocast](#Glossary) in threads; errors from a replica |
# | [05 Gather](05_gather.ipynb) | concatenating outputs, nested outputs, scalar losses, where the output lands |
# | [06 Backward](06_backward.ipynb) | gradients split back and summed; why the sum is right; the mean-of-means pitfall |
# | [07 End to end](07_end_to_end.ipynb) | a training loop, checkpoints, placement, `output_device`, unlucky batches, RNNs |
# | [08 Myths](08_myths.ipynb) | popular claims about DataParallel, run and corrected |
# | [09 Performance](09_performance.ipynb) | where the time goes, replication, the GIL, device 0, scaling |
# | [10 DDP bridge](10_ddp_bridge.ipynb) | from threads to processes: what DistributedDataParallel does differently |
# | [11 Review](11_review.ipynb) | a mixed quiz, a recap table of the four steps, your progress |
# | [12 Capstone](12_capstone.ipynb) | you write a whole DataParallel, forward and backward, from your own pieces, checked against dpcourse |
# | **Part II** | **beyond DataParallel: what a DDP user needs next** |
# | [13 Collectives](13_collectives.ipynb) | broadcast, reduce, [all-reduce](#Glossary), all-gather, reduce-scatter on real [ranks](#Glossary); a ring all-reduce you write with send/recv; bytes per rank against reduce-then-broadcast |
# | [14 Gradient accumulation](14_accumulation.ipynb) | micro-batches under one device, DataParallel and DDP; `no_sync()`; global batch = micro-batch × steps × replicas |
# | [15 Memory per device](15_memory.ipynb) | parameters, gradients, optimizer state and activations per device; DataParallel's device-0 surplus against DDP's equal ranks |
# | [16 Mixed precision](16_mixed_precision.ipynb) | autocast in DataParallel's threads, GradScaler, DDP's bf16/fp16 gradient compression and the error it costs |
# | [17 DDP in practice](17_ddp_in_practice.ipynb) | DistributedSampler, checkpoints, uneven inputs, unused parameters, SyncBatchNorm, and a DataParallel script turned into a DDP script |
# | **Part III** | **sharded data parallel ([ZeRO](#Glossary), [FSDP](#Glossary)): every rank keeps only a [shard](#Glossary) of the training state** |
# | [18 ZeRO-1](18_zero1.ipynb) | you shard Adam's state over the ranks: each rank updates its shard, an all-gather brings the parameters back; checked against one-device Adam |
# | [19 ZeRO-2](19_zero2.ipynb) | gradients reduce-scattered in backward hooks, each rank keeping its shard; bytes on the wire measured against DDP's all-reduce |
# | [20 ZeRO-3](20_zero3.ipynb) | parameters sharded too: all-gather before each layer, free after; FSDP written by hand; memory per rank and traffic measured |
# | [21 FSDP2 in practice](21_fsdp2.ipynb) | `fully_shard` on a [device mesh](#Glossary), sharded checkpoints, mixed precision, `ZeroRedundancyOptimizer`, and DP / DDP / ZeRO / FSDP2 side by side |
#
# - **Predict, then run.** A quiz asks before the cell that shows the answer. Run that cell and its output
#   stays hidden: in its place a line says "The result appears here once you answer the quiz above (or press
#   Show)". Pick an answer and press *Check my answer*: the result appears under the cell, and the quiz shows
#   its explanation and a *Run the experiment* button, which runs dpcourse and measures the answer. Any answer,
#   right or wrong, shows the result; *Show the result without answering* shows it without one.
# - **Exercises** end every lesson. Their solution cells are collapsed (click the cell's bar or its `…` to open
#   one); try first, then run the check cell below it.
# - **Terms** such as [GIL](#Glossary), [NCCL](#Glossary) or [all-reduce](#Glossary) are defined in the
#   Glossary at the end of this page; every lesson links there where it first uses one.
# - **Your answers are saved** in `~/.dpcourse/progress.json` (or the file named by the environment variable
#   `DPCOURSE_PROGRESS`), outside the repository. Nothing is written until you submit an answer: opening or
#   running a lesson writes nothing. See it on a scratch file:

# %%
import tempfile
from pathlib import Path

with tempfile.TemporaryDirectory() as folder:
    scratch = Path(folder) / "progress.json"
    progress = quiz.Progress(scratch)
    print("after opening the progress file: file exists =", scratch.exists())
    question = quiz.find_question("00-four-steps")
    progress.record(question, question.answer, correct=True)  # what *Check my answer* does
    print("after recording an answer: file exists =", scratch.exists())

# %% [markdown]
# ## Your progress
# Your answers so far, per lesson (read from your progress file, so this output is yours; press *Refresh*
# after answering more).

# %% tags=["nbval-ignore-output"]
quiz.ProgressSummary()

# %% [markdown]
# ## Glossary
# | term | what it means here |
# |---|---|
# | **rank** | one process of a distributed job, numbered 0, 1, … up to the world size − 1 (the number of processes). DDP runs one rank per GPU, each a separate Python process with its own copy of the model (lesson 10). |
# | **process group** | the ranks that communicate with each other, and the *backend* that carries their messages: NCCL between GPUs, gloo between CPUs. `torch.distributed.init_process_group(backend, rank=…, world_size=…)` makes the default one; collectives (see all-reduce) run within a group (lessons 10, 13). |
# | **GIL** | CPython's *global interpreter lock*: in one process, only the thread holding it runs Python code. A thread lets go when it waits, when it calls C code that releases the lock (most torch operations do while they compute), and otherwise after a switch interval (`sys.getswitchinterval()`), so threads overlap only in such C code. DataParallel's replicas are threads of one process (lesson 04); DDP's ranks are processes, each with its own GIL (lesson 10). |
# | **NCCL** | NVIDIA's *Collective Communications Library* ("nickel"): broadcast, reduce, all-reduce and more between GPUs, over NVLink, PCIe or the network. torch's DataParallel uses it to broadcast the parameters and reduce the gradients when every device is a separate GPU, and DDP uses it as the process-group backend for GPUs. It splits a transfer into pieces and passes them along a chain or ring of GPUs, so all links work at once. |
# | **P2P** | *peer-to-peer*: one GPU reading or writing another GPU's memory directly, over PCIe or NVLink, without a stop in host memory. NCCL uses it where the hardware allows; `NCCL_P2P_DISABLE=1` turns it off, a known workaround for machines where it hangs. |
# | **all-reduce** | a *collective* (an operation every rank of a process group calls together, lesson 13): every rank passes a tensor of the same shape and gets back, in place, the elementwise combination of all of them, the sum by default. It gives the same result as a reduce followed by a broadcast, or a reduce-scatter followed by an all-gather; a ring all-reduce sends 2(N−1)/N·S bytes per rank for a tensor of S bytes. DDP all-reduces gradients (lessons 10, 13). DataParallel's reduce-add is a *reduce*: the result goes to one device only, `devices[0]`. |
# | **coalesced** | many small tensors packed into one flat buffer, so that they travel in one transfer instead of many, and unpacked on arrival: `broadcast_coalesced` and `reduce_add_coalesced` in DataParallel, gradient buckets in DDP. |
# | **version counter** | a number each tensor carries (shared with its views) that every in-place operation increases. Autograd notes it when it saves a tensor for backward and raises "one of the variables needed for gradient computation has been modified by an inplace operation" if it changed. In torch's GPU `replicate`, replica 0's copies are views of your parameters and share their counters, while replicas 1, 2, … get fresh tensors with their own (`torch/csrc/cuda/comm.cpp`, NOTE [Version Counter in comm.*_coalesced]). dpcourse's copies for replicas 1, 2, … are views of one flat buffer per bucket (`dpcourse/comm.py`, `_copy_bucket`), so on CPU devices the copies of one replica share a single counter. |
# | **autocast** | `torch.autocast(device_type, dtype=…)`: a context in which operations that tolerate lower precision (matrix products, for instance) run in float16 or bfloat16 and precision-sensitive ones (softmax, losses) in float32: *mixed precision* (lesson 16). Its state, an on/off flag and a dtype per device type, belongs to the thread that entered it (lesson 04). |
# | **intra-op threads** | the threads one torch operation on the CPU splits its work over (a large matrix product, for instance), at most `torch.get_num_threads()`. Not DataParallel's replica threads, which each run a whole forward (lesson 04). |
# | **cuDNN** | NVIDIA's *CUDA Deep Neural Network* library: the GPU kernels torch calls for convolutions and recurrent layers (LSTM, GRU) on CUDA devices. Its RNN kernels want all of a layer's weights in one contiguous block of memory (lesson 07). CPU devices never use it. |
# | **FSDP** | *Fully Sharded Data Parallel* (`torch.distributed.fsdp`): data parallelism over ranks like DDP, but each rank keeps only a shard (about 1/N) of the parameters, gradients and optimizer state, and gathers a layer's full parameters just before it uses them (lessons 10, 13, 15). |
# | **ZeRO** | *Zero Redundancy Optimizer* (Rajbhandari et al., 2019, arXiv:1910.02054): removes the copies that every DDP rank keeps by sharding them over the ranks, in stages: 1 the optimizer state, 2 also the gradients, 3 also the parameters (what FSDP does). torch's `torch.distributed.optim.ZeroRedundancyOptimizer` does stage 1 (lessons 15, 18–21). |
# | **shard** | one rank's part of a tensor (or of a set of tensors) that is split over the ranks: with N ranks each keeps about 1/N of it and nothing of the rest. Sharded data parallelism shards the optimizer state, the gradients or the parameters instead of keeping a whole copy on every rank (lessons 18–21). |
# | **ZeRO stage** | how much of the training state ZeRO shards: stage 1 the optimizer state (each rank updates only its shard of the parameters, then an all-gather shares them), stage 2 also the gradients (a reduce-scatter instead of an all-reduce), stage 3 also the parameters (gathered before a layer runs, freed after). Lessons 18, 19, 20. |
# | **reshard** | to free the gathered full parameters of a layer once it has run, keeping only this rank's shard; they are all-gathered again when next needed. FSDP2's `reshard_after_forward=True` does it after the forward (and gathers again for the backward); `False` keeps them until the backward is done (lessons 20, 21). |
# | **device mesh** | `torch.distributed.device_mesh.DeviceMesh`: the ranks of a job laid out as an array (a line of N ranks here; a 2-D grid for data parallelism across and sharding within machines), each with its device type (`"cpu"` or `"cuda"`). FSDP2 shards over a mesh (lesson 21). |
# | **DTensor** | *distributed tensor* (`torch.distributed.tensor.DTensor`): a tensor that knows it is spread over a device mesh and how (`Shard(0)`: cut along dim 0; `Replicate()`: a whole copy per rank). Each rank stores only its local piece (`.to_local()`); `.full_tensor()` all-gathers the whole. FSDP2's parameters are DTensors (lesson 21). |

# %% [markdown]
# ## Summary
# - Data parallelism: the same model on every device, a different slice of the batch on each, the gradients
#   combined (DataParallel sums them into the original model).
# - torch recommends DistributedDataParallel; DataParallel is the clearest place to see the idea.
# - One forward is scatter → replicate → parallel_apply → gather; backward runs the mirror image, ending in a sum.
# - Without a GPU, `torch.nn.DataParallel` is a pass-through; `dpcourse.devices(n)` gives n CPU devices instead.
#
# ## Exercises
# 1. With a batch of 5 rows on 4 devices, how many replica forwards run? Count the `forward` spans of a trace.
# 2. With a single device, DataParallel takes a shortcut. Which steps does a trace record then?

# %% tags=["solution"]
devices4 = dpcourse.devices(4)
with dpcourse.trace() as t1:
    x5, _ = examples.make_batch(5, device=devices4[0])
    dpcourse.DataParallel(examples.make_model().to(devices4[0]), devices=devices4)(x5)
replica_forwards = len(t1.steps("forward"))

# %%
assert replica_forwards == len(x5.chunk(4)), (
    f"replica_forwards is {replica_forwards}: count the forward spans of the trace, one per replica that ran")
print("exercise 1: right, one replica forward per chunk that scatter made")

# %% tags=["solution"]
devices1 = dpcourse.devices(1)
with dpcourse.trace() as t2:
    dpcourse.DataParallel(examples.make_model().to(devices1[0]), devices=devices1)(x)
single_device_steps = [s.step for s in t2.spans]

# %%
one_device = dpcourse.devices(1)
with dpcourse.trace() as reference:  # the check runs the shortcut itself and compares the steps recorded
    dpcourse.DataParallel(examples.make_model().to(one_device[0]), devices=one_device)(x)
assert single_device_steps == [s.step for s in reference.spans], (
    f"single_device_steps is {single_device_steps}: list the step of every span the trace recorded, in order")
print("exercise 2: only", single_device_steps, "- then the model itself is called: no replicate, no threads, no gather")
