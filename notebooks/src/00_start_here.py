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


with quiz.reveal("00-four-steps", part=1):
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

# %% tags=["reveals-answer"]
def step_lines(forward):
    pattern = r"self\.(scatter|replicate|parallel_apply|gather)\("
    return [line.strip() for line in inspect.getsource(forward).splitlines() if re.search(pattern, line)]


with quiz.reveal("00-four-steps", part=2):
    pairs = zip(step_lines(torch.nn.DataParallel.forward), step_lines(dpcourse.DataParallel.forward))
    print("\n\n".join(f"torch:    {theirs}\ndpcourse: {ours}" for theirs, ours in pairs))

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
# | [12 Capstone](12_capstone.ipynb) | you write a whole DataParallel, forward and backward, from your own pieces, checked against dpcourse; after Parts III and IV, a sharded optimizer and a run that survives a killed process, from nothing |
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
# | **Part IV** | **data parallel when it goes wrong, and at scale** |
# | [22 Hangs](22_hangs.ipynb) | a rank that skips a collective, calls another one or another size: the timeout, `TORCH_DISTRIBUTED_DEBUG=DETAIL`, every rank's stack, the Flight Recorder; you name the rank that diverged |
# | [23 Stragglers](23_stragglers.ipynb) | one slow rank makes every rank's step slow; you find it from the time each rank reaches a collective |
# | [24 Resume](24_resume.ipynb) | a rank killed mid-epoch, the job restarted as `torchrun --max-restarts` does; you write the snapshot and the resume, checked bit for bit against a run never killed |
# | [25 Overlap and the α-β model](25_alpha_beta.ipynb) | buckets all-reduced during the backward, on a timeline; you time collectives on your ranks, fit α and β, and predict DDP's and ZeRO-3's step |
# | [26 HSDP](26_hsdp.ipynb) | `fully_shard` on a 2-D mesh: sharded along one dimension, replicated along the other; memory and bytes per dimension measured against FSDP2 and DDP |
#
# - **Predict, then run.** A quiz asks before the cell that shows the answer. Run that cell and its output
#   stays hidden: in its place a line says "The result appears here once you answer the quiz above (or press
#   Show)". Pick an answer and press *Check my answer*: the result appears under the cell, and the quiz shows
#   its explanation and a *Run the experiment* button, which runs dpcourse and measures the answer. Any answer,
#   right or wrong, shows the result; *Show the result without answering* shows it without one.
# - **Exercises** end every lesson. Each is a function to write: replace the line that raises
#   `NotImplementedError("Your code here ...")` with your code, run the cell, then the check cell below it,
#   which tries your function on several cases and says what differs. Until you write it, the check says "not
#   attempted yet". The instructor edition (`notebooks/*.ipynb`) holds the solutions.
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
# | **CUDA stream** | "a linear sequence of execution that belongs to a specific device, independent from other streams" (`torch/cuda/streams.py: Stream`): a queue of GPU work, kernels and copies. Python only appends work to a stream and goes on; the GPU runs one stream's work in the order it was queued, while work on different streams may overlap. `torch.cuda.current_stream(device)` is the stream a thread queues on by default; waiting on the host until a stream's work is done is a *synchronization* (`torch.cuda.synchronize()`). Lessons 09 and 10. |
# | **PCIe** | *PCI Express*: the bus between a GPU and the CPU's memory, and in many machines the only path between two GPUs. Its speed depends on generation and width: 16 lanes of PCIe 4.0, the link of NVIDIA's A100 PCIe card, carry about 31.5 GB/s in each direction (16 GT/s per lane, 128b/130b encoding; the A100 datasheet's "PCIe Gen4: 64GB/s" counts both directions). Lessons 09 and 10. |
# | **NVLink** | NVIDIA's direct link between GPUs, beside PCIe and much faster: 600 GB/s per A100 in its datasheet, both directions together, against PCIe 4.0's 64 GB/s. Lessons 09 and 10. |
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
# | **desync** | ranks that no longer call the same collectives in the same order with the same sizes: one skipped a call, or called another one, or another size. Nothing checks it by default, so it shows later, as a hang, a timeout, an aborted process or silently mixed data (lesson 22). |
# | **Flight Recorder** | torch's per-process ring buffer of the last collectives each rank called (operation, sizes, group, state), on by default with 2000 entries (`TORCH_FR_BUFFER_SIZE`, `torch/csrc/distributed/c10d/FlightRecorder.hpp`). It is dumped with `torch._C._distributed_c10d._dump_fr_trace()`, or to files on an NCCL timeout, and the ranks' dumps compared show where they diverged (lesson 22). |
# | **bucket** | a group of gradients that DDP all-reduces as one message, started as soon as the backward has produced all of them (`bucket_cap_mb`, 25 MiB by default; `torch/nn/parallel/distributed.py`). The buckets of the last layers are ready first, so their all-reduces run while the backward computes the earlier layers (lessons 19 and 25). |
# | **α-β model** | a collective's time as a fixed latency α per step of its algorithm plus the bytes each rank sends divided by the link bandwidth β: for a ring all-reduce of n bytes on p ranks, 2(p−1)·α + 2(p−1)/p·n/β. α and β are fitted to collectives timed on the machine (lesson 25). |
# | **straggler** | a rank slower than the others at some steps or all: a stalled data loader, a throttled GPU, a busy host. Under DDP every rank waits for it in each all-reduce, so every rank's step grows by its delay (lesson 23). |
# | **comm hook** | the function DDP calls for each bucket of gradients once the bucket is ready (`DistributedDataParallel.register_comm_hook`): it starts the bucket's collective and returns a future. The default all-reduces the bucket and divides by the world size (`torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py: allreduce_hook`); lessons 19 and 23 wrap it to watch the buckets and the ranks' arrivals. |
# | **snapshot** | what a training job writes every few steps so that a restarted job can go on where it was: the weights, the optimizer's state, every rank's random generators and where the data stood (epoch and batches done). A resumed run equals an uninterrupted one bit for bit only if nothing a step reads is missing (lesson 24). |
# | **HSDP** | *hybrid sharded data parallel*: FSDP on a 2-D device mesh that shards each parameter across one dimension (a shard group, usually the GPUs of one node) and replicates it across the other (the replicate groups). Gradients are reduce-scattered in the shard group, then each rank's gradient shard is all-reduced in its replicate group (lesson 26). |
# | **InfiniBand** | a high-bandwidth, low-latency network often used between the nodes of a GPU cluster. Per GPU it is slower than the links inside a node, such as NVLink, so the collectives that cross nodes cost more (lesson 26). |

# %% [markdown]
# ## Summary
# - Data parallelism: the same model on every device, a different slice of the batch on each, the gradients
#   combined (DataParallel sums them into the original model).
# - torch recommends DistributedDataParallel; DataParallel is the clearest place to see the idea.
# - One forward is scatter → replicate → parallel_apply → gather; backward runs the mirror image, ending in a sum.
# - Without a GPU, `torch.nn.DataParallel` is a pass-through; `dpcourse.devices(n)` gives n CPU devices instead.
#
# ## Exercises
# 1. With a batch of 5 rows on 4 devices, how many replica forwards run? Write `replica_forwards(batch, n)`, which
#    counts the `forward` spans of a trace, then run the check.
# 2. With a single device, DataParallel takes a shortcut. Which steps does a trace record then? Write
#    `single_device_steps(model, x)`, the step of every span, in order.

# %%
from dpcourse import exercises


# %% tags=["solution"]
def replica_forwards(batch, n):
    ### BEGIN SOLUTION
    chosen = dpcourse.devices(n)
    x, _ = examples.make_batch(batch, device=chosen[0])
    with dpcourse.trace() as t:
        dpcourse.DataParallel(examples.make_model().to(chosen[0]), devices=chosen)(x)
    return len(t.steps("forward"))
    ### END SOLUTION


# %%
exercises.check("replica_forwards", replica_forwards)

# %% tags=["solution"]
def single_device_steps(model, x):
    ### BEGIN SOLUTION
    with dpcourse.trace() as t:
        dpcourse.DataParallel(model, devices=dpcourse.devices(1))(x)
    return [span.step for span in t.spans]
    ### END SOLUTION


# %%
exercises.check("single_device_steps", single_device_steps)
