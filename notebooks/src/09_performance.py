# %% [markdown]
# # 09 · Performance: where a DataParallel step spends its time
#
# **After this lesson you will be able to explain**
# - which parts of a step are the model's work and which are DataParallel's own, and how to see them;
# - how often DataParallel copies the model, and how many bytes and objects that costs;
# - why threads cannot speed up a model made of many small layers;
# - why device 0 holds more than the others, and what to do about it;
# - when adding devices helps, and why CPU devices sharing a few cores show little of it.
#
# Timings change from run to run and machine to machine. So most cells below print **bytes and counts**,
# which do not change. The cells that time something take turns between the variants they compare, repeat
# for several rounds and keep the median, so that a busy spell hits every variant alike; they print their
# numbers, which are yours, and every conclusion that rests on a time is printed by the cell that measured
# it. Timings on CPU devices measure CPU work: they cannot show GPU speed or the cost of a [PCIe](00_start_here.ipynb#Glossary) or [NVLink](00_start_here.ipynb#Glossary)
# transfer. They time `dpcourse`'s code, which starts and joins a thread per replica on every forward as
# torch's does (lesson 04), and shares the cores among CPU replicas, which torch never has to do: torch's own
# DataParallel cannot run on CPU devices at all, so nothing here times it. On a machine with one GPU,
# `dpcourse.devices(n)` puts every replica on that GPU and the same cells time it; the stored outputs come
# from CPU devices.
#
# One setting first: this lesson gives torch **one thread per operation**, so that one CPU device is one
# core, as one GPU is one GPU. By default a single matrix product already spreads over every core, and
# the replicas would only fight over them (and timings on a busy machine scatter wildly).

# %%
import collections
import os
import statistics
import textwrap
import threading

import torch
from torch import nn

import dpcourse
from dpcourse import costmodel, exercises, quiz, viz, widgets
from dpcourse.timing import interleaved, synchronized_clock, wall_time
from dpcourse.trace import STEPS
from dpcourse.widgets.timing import busy_seconds


def mlp():
    """The lesson's compute-heavy model: two matrix products per sample, 262,912 parameters (1 MiB)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))


torch.set_num_threads(1)  # one thread per operation, in the replicas' threads too
devices = dpcourse.devices(4)  # devices[0], the same for any n, is where every model and batch below starts
clock = synchronized_clock(devices)  # on a GPU, waits for its queued work before reading the time
x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)).to(devices[0])

# %% [markdown]
# ## Where the time goes
# One training step of the MLP on 3 devices, batch 256, traced: forward (scatter, replicate, the replicas'
# forward, gather), a loss, and backward (gather's backward, the replicas' backward, reduce-add). A first,
# untraced step pays once for starting threads and allocating memory.

# %%
model = mlp().to(devices[0])
dp = dpcourse.DataParallel(model, devices=dpcourse.devices(3))
dp(x).pow(2).mean().backward()  # warm-up
traces = []
for _ in range(3):
    model.zero_grad()
    with dpcourse.trace() as t:
        dp(x).pow(2).mean().backward()
    traces.append(t)

for step in STEPS:
    spans = t.steps(step)
    if spans:
        print(f"{step:16s} x{len(spans)}  threads {sorted({s.thread for s in spans})}  "
              f"bytes copied {sum(s.bytes_copied for s in spans):>9,}")
viz.timeline(t)

# %% [markdown]
# Read the threads column first. Only the replicas' **forward** runs on threads of their own, one per
# replica. In forward, scatter, replicate and gather run on the main thread, the one that called `dp(x)`,
# working from `devices[0]`. Even the forwards overlap only when cores are free and the threads are
# awake: handing work to a thread and waking it takes time of its own, so on a busy machine they can end
# up taking turns.
#
# Backward is run by torch's autograd engine, which picks the thread by device. CPU work runs on the
# thread that called `backward()`: on CPU devices gather's backward, every replica's backward and reduce-add
# all run on the main thread, one after another: the stacked backward bars in the MainThread lane. On GPUs
# the engine gives each GPU a worker thread of its own and runs every step on the thread of the device
# its incoming gradients are on (`torch/csrc/autograd/engine.cpp`, the note on `worker_device`, and
# `Node::device` in `torch/csrc/autograd/function.h`). So there the replicas' backward passes run side by
# side, each on its GPU's thread, while gather's backward and reduce-add, which sums every replica's
# gradients onto `devices[0]`, run on `devices[0]`'s thread. Either way one device does all the
# coordinating, which caps the speed-up.
#
# The bytes column is the data one step moves: replicate's copies of the parameters (how many, the next
# section asks), gather's copy of every output into one tensor, and reduce-add's sum of the replicas'
# gradients. There is one process and no "worker process": every copy is made by threads of this one.
# Scatter and gather's backward moved 0 bytes only because every chunk stays on the one device as a view
# (CPU devices, or replicas sharing one GPU); on separate GPUs they copy each chunk to its device and back.
#
# How long each stage took, as the median over the 3 traced steps (your numbers will differ):

# %% tags=["nbval-ignore-output"]
step_ms = statistics.median(t.duration for t in traces) * 1e3
for step in STEPS:
    ms = statistics.median(busy_seconds(t.steps(step)) for t in traces) * 1e3
    if ms:
        print(f"{step:16s} {ms:7.2f} ms  {ms / step_ms:4.0%}")
gaps = statistics.median(t.duration - busy_seconds(t.spans) for t in traces) * 1e3
print(f"{'between steps':16s} {gaps:7.2f} ms  {gaps / step_ms:4.0%}   (the loss, Python glue, waking threads)")
print(f"{'whole step':16s} {step_ms:7.2f} ms")
compute_ms = sum(statistics.median(busy_seconds(t.steps(s)) for t in traces) for s in ("forward", "backward")) * 1e3
print(f"the replicas' own forward and backward: {compute_ms / step_ms:.0%} of the step, DataParallel's stages and "
      f"the gaps between them the rest")

# %% [markdown]
# How the step divides between the replicas' own work and DataParallel's depends on the machine, its load
# and the tracing itself; the last line says what it was on yours. What holds everywhere is the direction:
# the more arithmetic per step, the larger the replicas' share. Try other models: press **Run** in the explorer
# below. "many-layers" is 100 tiny `Linear(8, 8)` layers, little arithmetic for much Python; the sentence above
# its table says, from your run, whether DataParallel's own work or the model's compute dominates, or neither.

# %%
widgets.TraceExplorer(model="many-layers", batch=64, devices=2)

# %% [markdown]
# ### The same step, recorded on a GPU
# The stored runs above used CPU devices. `dpcourse.recording` ships one step recorded on a data-centre GPU: the
# same MLP, batch 256 and `dp(x).pow(2).mean().backward()`, on 1 to 4 replicas that all share the one GPU,
# its spans timed by CUDA events on the GPU's stream. It was made with `python -m dpcourse.recording`,
# which any CUDA machine can run again. The cell prints what it recorded, then draws the 3-replica step
# next to your run above (CPU devices in the stored outputs):

# %%
from dpcourse import recording

gpu = recording.load()
print(f"{gpu.label} (torch {gpu.torch}, CUDA {gpu.cuda})")
for n in sorted(gpu.step_seconds):
    alone = "the model alone, no DataParallel" if n == 1 else f"{gpu.step_ms(n) / gpu.step_ms(1):.1f} x the model alone"
    print(f"{n} replica(s): median step {gpu.step_ms(n):.2f} ms ({alone})")
recorded = gpu.traces[3][-1]
for step in STEPS:
    spans = recorded.steps(step)
    if spans:
        print(f"{step:16s} x{len(spans)}  threads {sorted({s.thread for s in spans})}  "
              f"bytes copied {sum(s.bytes_copied for s in spans):>9,}")
viz.timeline(recorded, gpu.label)

# %% [markdown]
# What the recording shows:
# - **Backward left the main thread.** Gather's backward, every replica's backward and reduce-add ran on
#   `Dummy-1`, the name Python gives a thread it did not start: the autograd engine's worker thread for
#   `cuda:0`. On CPU devices, as in the stored run above, they all ran on MainThread.
# - **On one GPU, DataParallel only adds.** With 2 to 4 replicas the step took 4.0 to 6.3 times as long as
#   the model alone (the cell's first lines). All replicas share the GPU's one current stream (its
#   `parallel_apply` runs each replica under `torch.cuda.current_stream(device)`, as torch's does), so their
#   kernels queue one after another. The forward bars overlap because the three threads' launches
#   interleave on that stream, not because the GPU runs them side by side.
# - **The bytes are the same as on the CPU**: replicate copies the parameters for replicas 1 and 2, gather
#   copies every output row into one tensor, reduce-add sums replicas 1 and 2's gradients into new
#   tensors. Scatter copies 0 bytes here too: the input already sits on `cuda:0`, so its chunks are views.
#
# What it cannot show: a link between two GPUs. Every copy stayed inside one GPU's memory, so this is
# DataParallel's own cost next to a fast GPU's arithmetic, not what PCIe or NVLink would add. Lesson 10 fits
# the cost model's GPU terms to the same recording.

# %% [markdown]
# ## What replication costs
# DataParallel keeps only your model. How often does it build the replicas, and how much does that copy?

# %%
quiz.ask("09-replicate-each-forward")

# %%
quiz.ask("09-replicate-bytes")

# %% tags=["reveals-answer"]
with quiz.reveal("09-replicate-each-forward", "09-replicate-bytes"):
    parameter_bytes = sum(p.nbytes for p in model.parameters())
    with dpcourse.trace() as t:
        for n in (2, 3, 4):
            dpcourse.DataParallel(model, devices=dpcourse.devices(n))(x[:8])
            dpcourse.DataParallel(model, devices=dpcourse.devices(n))(x[:8])
    for n, span in zip((2, 2, 3, 3, 4, 4), t.steps("replicate")):
        print(f"{n} devices: replicate copied {span.bytes_copied:>9,} bytes = {span.bytes_copied // parameter_bytes}"
              f" x the {parameter_bytes:,} parameter bytes")

# %%
quiz.ask("09-modules-per-forward")

# %% tags=["reveals-answer"]
with quiz.reveal("09-modules-per-forward"):
    deep = nn.Sequential(*(nn.Linear(8, 8) for _ in range(50))).to(devices[0])
    replicas = dpcourse.replicate(deep, devices)
    built = sum(len(list(r.modules())) for r in replicas)
    print(f"{len(list(deep.modules()))} modules on 4 devices: {built} new module objects, for "
          f"{sum(p.nbytes for p in deep.parameters()):,} bytes of parameters")
    print("none of them is one of the original modules:",
          not {id(m) for r in replicas for m in r.modules()} & {id(m) for m in deep.modules()})

# %% [markdown]
# ## Threads and the GIL
# `parallel_apply` runs each replica in a Python thread, and Python threads compute at the same time only
# while at most one of them runs Python code (the [GIL](00_start_here.ipynb#Glossary)): a large matrix product releases the GIL for its
# whole duration, a tiny `Linear(8, 8)` call is mostly Python and holds it.
#
# **Predict:** on 2 devices against 1, which model does DataParallel slow down more: 100 tiny layers, or
# the MLP's two large matrix products?
#
# The cell below times one-device and DataParallel steps of each model in turns, for several rounds, and
# prints the median of the per-round ratios (your numbers will differ):

# %% tags=["nbval-ignore-output"]
def dp_over_one_device(model, batch, n=2, rounds=7):
    """Median over rounds of (DataParallel step / one-device step), the two timed in turns every round."""
    steps = {"one device": model, "DataParallel": dpcourse.DataParallel(model, devices=dpcourse.devices(n))}
    timed = interleaved({name: wall_time(lambda run=run: run(batch).pow(2).mean().backward(), clock)
                         for name, run in steps.items()}, rounds=rounds, warmup=1)
    return timed.ratio("DataParallel", "one device")["median"]


tiny = nn.Sequential(*(nn.Linear(8, 8) for _ in range(100))).to(devices[0])
slowdown = {"100 tiny layers, batch 64": dp_over_one_device(tiny, torch.randn(64, 8).to(devices[0])),
            "the MLP, batch 256": dp_over_one_device(mlp().to(devices[0]), x)}
for name, ratio in slowdown.items():
    print(f"{name:27s} DataParallel step = {ratio:.1f} x one device")
print("DataParallel slowed the tiny layers down more than the MLP:",
      slowdown["100 tiny layers, batch 64"] > slowdown["the MLP, batch 256"])

# %% [markdown]
# What to expect on CPU devices: the tiny-layer model should lose more. Each replica runs the same 100
# Python-level layer calls as one device would, only on half the rows, and the two threads must take turns
# holding the GIL; then replicate builds 202 module objects and backward walks both replicas' graphs. The
# MLP's forward is matrix products, which release the GIL, so two replicas can compute at once when two
# cores are free. Its backward, though, three matrix products to the forward's two, runs replica after
# replica on the main thread on CPU devices (first section), and the copies and thread hand-offs come on
# top, so whether it gains anything depends on your cores and their load: its line above (below 1 means
# faster than one device) says what yours showed. On a GPU the expectation can flip: the MLP's step is a few
# kernels that the GPU finishes quickly, so DataParallel's fixed costs weigh heavily against it (the recording
# above: 4.0 times the model alone on 2 replicas). The cell's last line says which lost more on your machine.
#
# The DDP tutorial names three reasons why DataParallel is "usually slower than
# DistributedDataParallel even on a single machine": GIL contention across threads, the model replicated
# every iteration, and scattering inputs and gathering outputs. fairseq's authors saw a
# "negative speedup" with DataParallel, which "relies on Python threading, which is slow due to the GIL"
# (facebookresearch/fairseq#34); pytorch/tutorials PR #648 credits DDP's lead to replicating "upfront
# instead of in every iteration" with the GIL "no longer in the way". A free-threaded Python build removes the
# GIL, but not the replication or the scatter and gather. Lesson 04 shows the threads themselves.

# %% [markdown]
# ## Gather on device 0
# Where does each step's data end up? Count the bytes per device position for the MLP on 4 devices,
# batch 256, trained with Adam: parameters, activations (measured by hooks, which every replica shares),
# and what lives only on `devices[0]`.

# %%
model = mlp().to(devices[0])
activations = collections.defaultdict(int)  # bytes of layer outputs, per replica thread


def count(layer, args, out):
    activations[threading.current_thread().name] += out.nbytes


for layer in model:
    layer.register_forward_hook(count)
output = dpcourse.DataParallel(model, devices=dpcourse.devices(4))(x)
P = sum(p.nbytes for p in model.parameters())
columns = {"parameters": [P] * 4,
           "activations": [activations[f"replica-{i}"] for i in range(4)],
           "gathered output": [output.nbytes, 0, 0, 0],
           "gradients": [P, 0, 0, 0],
           "Adam state": [2 * P, 0, 0, 0]}
print("KiB per device   " + "".join(f"{name:>17s}" for name in columns) + "      total")
for i in range(4):
    row = [values[i] // 1024 for values in columns.values()]
    print(f"devices[{i}]       " + "".join(f"{v:>17,}" for v in row) + f"{sum(row):>11,}")
single = 4 * P + sum(activations.values())
print(f"one device, whole batch: {single // 1024:,} KiB")

# %% [markdown]
# Every device holds the whole model, and activations split four ways: that is what DataParallel saves, so
# a batch too large for one GPU may fit. But `devices[0]` also holds the gathered output (and the
# loss computed from it), the gradients that reduce-add sums onto it, and the optimizer state, created next
# to the parameters it updates (Adam keeps two tensors per parameter, `torch/optim/adam.py`). Here that is
# 3.5 times another device's share (the replicas' own gradients exist only during backward, until
# reduce-add sums them). A model too large for one GPU still fails, on `devices[0]` first.
#
# Gradients always go to `devices[0]`, the device of the original parameters
# (`torch/nn/parallel/_functions.py: Broadcast.backward` reduces onto `ctx.input_device`); outputs go to
# `output_device`, which you can move (lesson 07), and the loss follows them. By default device
# 0 receives every output, and it always receives every gradient while the others wait. If it is
# slower or smaller than the rest, it sets the pace: torch warns when a GPU has under 75% of another's
# memory or cores (`torch/nn/parallel/data_parallel.py: _check_balance`).
#
# CPU devices (or replicas sharing one GPU) share one memory, so this table is bookkeeping; on separate GPUs
# it is the "GPU 0 runs out of memory
# first" that users keep reporting (huggingface/transformers#279, facebookresearch/DPR#104,
# facebookresearch/mmf#190, princeton-vl/RAFT#33). Two fixes: use DistributedDataParallel (lesson 10), or
# compute the loss inside `forward`, so that only one number per sample is gathered. Return **per-sample**
# losses and take their mean after the gather; per-chunk means weigh uneven chunks wrongly (lesson 06).

# %%
class WithLoss(nn.Module):
    """The model and its loss in one forward: each replica returns one loss per sample."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, target):
        return (self.net(x) - target).pow(2).mean(dim=1)


target = torch.zeros(256, 256, device=devices[0])
with dpcourse.trace() as t:
    dpcourse.DataParallel(mlp().to(devices[0]), devices=devices)(x)
    per_sample = dpcourse.DataParallel(WithLoss(mlp()).to(devices[0]), devices=devices)(x, target)
outputs_bytes, losses_bytes = (span.bytes_copied for span in t.steps("gather"))
print(f"gathered onto devices[0]: outputs {outputs_bytes:,} bytes, per-sample losses {losses_bytes:,} bytes")
print("the mean of the per-sample losses is the usual loss:",
      torch.allclose(per_sample.mean(), (mlp().to(devices[0])(x) - target).pow(2).mean()))

# %% [markdown]
# ## Small batch, big model
# DataParallel's own costs depend on the **model** (bytes to copy and sum, modules to rebuild); the
# useful work depends on the **batch**. The article "Why is training not starting with nn.DataParallel?"
# claims, in its Example 2, that for "a large model, and a small batch size … the time does not decrease by
# using multiple GPUs". Its model, built on the `meta` device, which records shapes without allocating
# memory:

# %%
class LargeModel(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_size, hidden_size), nn.ReLU(),
            nn.Linear(hidden_size, hidden_size), nn.ReLU(),
            nn.Linear(hidden_size, hidden_size), nn.ReLU(),
            nn.Linear(hidden_size, input_size),
        )

    def forward(self, x):
        return self.layers(x)


with torch.device("meta"):
    large = LargeModel(10000, 5000)
params = sum(p.numel() for p in large.parameters())
print(f"{params:,} parameters = {params * 4 / 2**20:,.0f} MiB of float32")
for batch in (16, 256):
    flops = costmodel.flops.counted(large, (batch, 10000))  # torch's FlopCounterMode, forward + backward
    moved = 2 * (2 - 1) * params * 4  # on 2 GPUs: broadcast the weights, reduce the gradients
    print(f"batch {batch:3d} on 2 GPUs: {flops / 1e9:5.1f} GFLOP of work (6 x parameters x batch: "
          f"{6 * params * batch / 1e9:5.1f}), {moved / 2**20:,.0f} MiB copied -> {flops / moved:5.1f} FLOP per byte")
pcie = costmodel.PRESETS["8 GPUs, PCIe"]
print(f"cost model, {pcie.name}: F / beta = {pcie.flops / 1e12:g} TFLOP/s / {pcie.bandwidth / 1e9:g} GB/s "
      f"= {pcie.flops / pcie.bandwidth:,.0f} FLOP per byte copied")
print(textwrap.fill(f"  its numbers: {pcie.sources}", 110, subsequent_indent="    "))

# %% [markdown]
# At batch 16 each step copies 1,145 MiB between the two GPUs to spread 12.8 GFLOP of work, as torch's
# `FlopCounterMode` counts it (`costmodel.flops.counted`): 10.7 FLOP per byte copied. (The rule of thumb
# "6 FLOPs per parameter and sample" would say 14.4: it forgets that backward skips the gradient of the
# first layer's input, the data.) A GPU computes far faster than it copies to another GPU: for data-centre
# GPUs linked by PCIe, lesson 10's cost model assumes the FLOP per byte the cell prints last. Its F and beta
# are assumed achievable rates, 3/4 and 4/5 of the published peaks (the A100 datasheet, the PCIe 4.0
# specification), not measurements: `dpcourse.costmodel.PRESETS` names their sources. So, predicted by the cost model, the copies
# dominate and a second GPU cannot help; at batch 256 the same copies buy 16 times more work. The
# seed's claim is plausible for this regime; its measurement is not evidence, though: it times with
# `time.time()` and no `torch.cuda.synchronize()`, so the clock stops while the GPU may still be running
# the backward and the update (CUDA runs asynchronously: PyTorch docs, `notes/cuda.rst`, "Asynchronous
# execution"), and its first step includes the warm-up. The timed cells below read a clock that waits for
# the GPU (`timing.synchronized_clock`) and drop a warm-up round. So DataParallel can be slower than one
# device, not merely "not linear".
#
# The same shift, measured here: the MLP at batch 8. The bytes copied barely change, the compute shrinks
# to almost nothing, and replicate and reduce-add keep their size. Compare with the batch-256 timeline at
# the top:

# %%
dp = dpcourse.DataParallel(mlp().to(devices[0]), devices=dpcourse.devices(3))
dp(x[:8]).pow(2).mean().backward()  # warm-up
with dpcourse.trace() as t:
    dp(x[:8]).pow(2).mean().backward()
print(f"bytes copied per step: batch 8 {sum(s.bytes_copied for s in t.spans):,}, "
      f"batch 256 (first section) {sum(s.bytes_copied for s in traces[-1].spans):,}")
viz.timeline(t)

# %% [markdown]
# ## Scaling curves
# **Predict:** on CPU devices, how close to n times faster can n devices get? On CPU devices the backward,
# more than half of the arithmetic, runs replica after replica on the main thread (first section), so only
# the forwards can overlap, and only on free cores: devices beyond your free cores just share them. The
# step cannot shrink to 1/n of one device's, and the copies, thread hand-offs and turn-taking come on top.
# Expect a speed-up well below n, if any.
#
# Step time and speed-up of the MLP, batch 256, on 1 to 4 devices, timed in turns over 9 rounds after one
# warm-up round; the figure draws the medians. On a machine with one GPU the replicas share it, and the
# recording above already showed such steps slower than the model alone:

# %% tags=["nbval-ignore-output"]
counts = [1, 2, 3, 4]
scaled = {n: dpcourse.DataParallel(mlp().to(devices[0]), devices=dpcourse.devices(n)) for n in counts}
scaling_steps = {str(n): wall_time(lambda dp=dp: dp(x).pow(2).mean().backward(), clock) for n, dp in scaled.items()}
rounds = interleaved(scaling_steps, rounds=9, warmup=1)
speedup = {n: 1 / rounds.ratio(str(n), "1")["median"] for n in counts}
print(f"cores this process may use: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")
for n in counts[1:]:
    print(f"{n} devices: speed-up {speedup[n]:.2f} (median of the rounds' ratios), ideal {n}")
best = max(counts[1:], key=speedup.get)
print(f"on this machine: {'every device count was slower than one device' if speedup[best] < 1 else f'best on {best} devices'}")
viz.scaling({n: rounds.samples[str(n)] for n in counts})

# %% [markdown]
# On separate GPUs each replica has a device and a backward thread of its own, so the replicas' compute shrinks
# with n. DataParallel's own work does not. Replicate builds modules × devices Python objects, so its
# Python part grows with n. The bytes it copies grow as `(n - 1) ×` the parameters, and reduce-add sums as
# many back, but when every device is a separate GPU torch uses
# [NCCL](00_start_here.ipynb#Glossary)'s broadcast and reduce, which pass the
# bytes along a chain of GPUs in pieces, every link busy at once. So lesson 10's cost model assumes that
# their time stays close to one copy of the parameters whatever n is (its `c(N) = 1`); the course never
# measured it: its GPU recording has every replica on one GPU, where NCCL does not run. Without NCCL, torch
# copies to one device after another, and the time grows with n. Gather stays. So, predicted by lesson 10's cost model: past some n the Python overhead
# dominates and adding devices makes steps slower; lesson 10 draws these curves and names their
# assumptions. The one GPU measurement that ships with the course, the recording above, has every replica
# on one GPU, so it cannot show this curve across GPUs.
#
# How well documented is that? Less than the articles claim: the PyTorch docs recommend
# DistributedDataParallel for any multi-GPU training, "even if there is only a single node"
# (`notes/cuda.rst`), the DDP tutorial calls DataParallel "usually slower", and `data_parallel.py` carries
# the comment `# TODO: update notes/cuda.rst when this class handles 8+ GPUs well`; none of them shows a
# scaling curve. External reports exist (facebookresearch/fairseq#34).
#
# `docs/benchmarks.md` records the course's own benchmark runs, each with its machine, date and command:
# many interleaved rounds with torch's default threads, for the same kinds of model as above, a wide MLP
# and a stack of many small layers. Like every timing in this lesson, they time `dpcourse.DataParallel`, not
# torch's. Run `python -m tests.benchmarks --only cpu` to measure your own machine.


# %% [markdown]
# ## Write it yourself
# Write the function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: bytes per step
# Write `bytes_per_step(parameter_bytes, n)`: a dict with the bytes one training step on `n` devices copies out
# to the replicas (key `"replicate"`) and sums back onto `devices[0]` (key `"reduce-add"`), for a model with
# `parameter_bytes` bytes of parameters.

# %% tags=["solution"]
def bytes_per_step(parameter_bytes, n):
    """The bytes replicate sends out and reduce-add brings back in one DataParallel step."""
    ### BEGIN SOLUTION
    copies = n - 1  # replica 0 works on the original parameters
    return {"replicate": copies * parameter_bytes, "reduce-add": copies * parameter_bytes}
    ### END SOLUTION


# %%
exercises.check("bytes_per_step", bytes_per_step)


# %% [markdown]
# ## Summary
# - In forward, scatter, replicate and gather run on the main thread and only the replicas' forwards get
#   threads of their own. In backward, gather's backward and reduce-add run on `devices[0]`'s autograd
#   thread (on CPU devices, the main thread, which also runs every replica's backward there).
# - Every step copies `(n - 1) ×` the parameter bytes out and sums as many back (with NCCL, in about the
#   time of one copy: the cost model's assumption, not measured here), and builds modules × devices Python
#   objects.
# - Threads overlap only work that releases the GIL: many small layers gain nothing.
# - `devices[0]` holds the gathered output, the loss, the gradients and the optimizer state.
# - Small batches and big models make the copies outweigh the work; DataParallel can be slower than one
#   device.
#
# ## Exercises
# 1. How many bytes does reduce-add sum onto `devices[0]` in one training step? Write `reduce_bytes(model_fn, n)`
#    using a trace (8 rows of 16 features, the loss `output.pow(2).mean()`).
# 2. Write `gathered_bytes(model_fn, n, *inputs)` that returns the bytes one forward gathers; then compare the
#    per-sample `WithLoss` model with the bare MLP: how many times fewer bytes does it gather?

# %% tags=["solution"]
def reduce_bytes(model_fn, n):
    ### BEGIN SOLUTION
    chosen = dpcourse.devices(n)
    model = model_fn().to(chosen[0])
    inputs = torch.randn(8, 16, dtype=next(model.parameters()).dtype, device=chosen[0])
    dp = dpcourse.DataParallel(model, devices=chosen)
    with dpcourse.trace() as t:
        dp(inputs).pow(2).mean().backward()
    return t.steps("reduce-add")[0].bytes_copied
    ### END SOLUTION


# %%
exercises.check("reduce_bytes", reduce_bytes)

# %% tags=["solution"]
def gathered_bytes(model_fn, n, *inputs):
    ### BEGIN SOLUTION
    chosen = dpcourse.devices(n)
    with dpcourse.trace() as t:
        dpcourse.DataParallel(model_fn().to(chosen[0]), devices=chosen)(*inputs)
    return t.steps("gather")[0].bytes_copied
    ### END SOLUTION


# %%
exercises.check("gathered_bytes", gathered_bytes)
