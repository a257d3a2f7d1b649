# %% [markdown]
# # 15 · Memory per device
#
# **After this lesson you will be able to explain**
# - what one training step keeps on a device: parameters, gradients, optimizer state, activations, outputs and
#   loss, and how large each one is for SGD, SGD with momentum and Adam;
# - which of DataParallel's devices holds the most, and exactly what it holds beyond the others;
# - what each DDP [rank](00_start_here.ipynb#Glossary) holds, compared with DataParallel's devices;
# - how torch's own accounting measures all this: tensor byte counts, `saved_tensors_hooks`, the profiler's
#   memory events and, on a GPU, `torch.cuda.max_memory_allocated`;
# - how to predict a device's bytes before it runs out of memory.
#
# Lesson 09 drew a bookkeeping table of device 0's extra memory. This lesson counts what torch really keeps,
# tensor by tensor, and builds a calculator that predicts it. The devices here are CPU devices, which share one
# memory, so "device 1 holds" means what device 1 would hold on a GPU: each tensor is counted on the device
# of the replica or rank that made it, the way `dpcourse.memory.measure` does it (`dpcourse/memory/measure.py`).

# %%
import dataclasses

import torch
from IPython.display import display

from dpcourse import exercises, memory, quiz, viz, widgets
from dpcourse.ddp.demos import memory as ddp_memory
from dpcourse.memory import MIB, Setup
from dpcourse.ranks import backend_for

print("the backend of 2 DDP ranks here:", backend_for(2))

# %% [markdown]
# ## The model
# One model for the whole lesson: an MLP with 64 inputs, three hidden layers of 512 units and 1000 classes,
# trained with cross-entropy on batches of 256 (`memory.sized_mlp`, `dpcourse/memory/setup.py`). Every
# parameter is a float32, 4 bytes:

# %%
setup = Setup()  # one device, batch 256, Adam, the MLP below
model = setup.model
print(model)
print(f"{model.parameters:,} parameters in {memory.parameter_tensors(model)} tensors = "
      f"{model.parameters * 4 / MIB:.2f} MiB")

# %% [markdown]
# ## What one device holds
# A training step (forward, loss, backward, optimizer step) keeps six kinds of tensors on a device:
#
# | kind | what | how it is counted |
# |---|---|---|
# | parameters | the model's weights | bytes of the parameter tensors |
# | gradients | one `.grad` per parameter, made by backward | bytes of the `.grad` tensors |
# | optimizer state | what the optimizer keeps from step to step | bytes of the tensors in `optimizer.state` |
# | activations | what forward saves for backward | `torch.autograd.graph.saved_tensors_hooks` |
# | outputs and loss | the output the loop keeps, what the loss saves, the targets | the same hooks, and the tensors themselves |
# | [all-reduce](00_start_here.ipynb#Glossary) buckets | DDP's flat buffers for the gradients (later) | DDP's own logging data |
#
# A saved tensors hook sees every tensor an operation saves for its backward
# (`torch/autograd/graph.py: saved_tensors_hooks`). Here is what one forward of 4 samples saves:

# %%
net = model.build()
x, y = model.batch(4)
parameters = {p.untyped_storage().data_ptr() for p in net.parameters()}
saved = []


def pack(tensor):
    is_parameter = tensor.untyped_storage().data_ptr() in parameters
    saved.append(f"{list(tensor.shape)} {str(tensor.dtype)[6:]}{' (a parameter)' if is_parameter else ''}")
    return tensor


with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
    loss = memory.loss_fn(net(x), y)
print("\n".join(saved))

# %% [markdown]
# Each `Linear` saves its input, to compute its weight's gradient; the first one needs nothing else, since its
# input needs no gradient. The others also save their weight (a parameter, already counted), to pass the
# gradient back to their input. Each `ReLU` saves its output, which is the next layer's input: the same tensor,
# counted once. Cross-entropy saves its log-softmax (one float per class and sample), the int64 targets and a
# weight total. So the activations are 64 + 3 × 512 floats per sample, and the loss adds 2 × 1000 floats (the
# output the loop keeps, and the log-softmax) and 8 bytes per sample.
#
# The optimizer comes next. Plain SGD subtracts the gradient and keeps nothing; SGD with momentum keeps a
# running, decaying sum of the gradients (`torch/optim/sgd.py: SGD.step`). And Adam?

# %%
quiz.ask("15-adam-state")

# %% [markdown]
# `memory.measure(setup)` runs a warm-up step (an optimizer creates its state in its first step), then one step
# in which it counts every kind. The three optimizers, on one device:

# %% tags=["reveals-answer"]
with quiz.reveal("15-adam-state"):
    one_device = {name: memory.measure(dataclasses.replace(setup, optimizer=name)) for name in memory.OPTIMIZERS}
    for name, breakdown in one_device.items():
        state = breakdown.devices[0]["optimizer state"]
        extra = state - round(state / (model.parameters * 4)) * model.parameters * 4
        print(f"{name:<18} optimizer state {state / MIB:6.2f} MiB = {state / (model.parameters * 4):.4f} x the parameters"
              f" + {extra} bytes")
    print()
    print(one_device["Adam"])

# %%
viz.memory_bars([*one_device.values(), memory.measure(dataclasses.replace(setup, batch=64, optimizer="SGD"))])

# %% [markdown]
# ## The allocator's view
# Those are the kinds added up, each at its largest. Does the device ever hold all of them at once? The
# allocator knows: under `torch.profiler.profile(profile_memory=True)` every allocation and free is an event.
# `memory.profile_step` profiles one step and replays the events in order (`dpcourse/memory/peak.py`):

# %%
steps = memory.profile_step(setup)
added_up = memory.predict(setup).totals[0]
print(f"at the start of the step (parameters, optimizer state, batch): {steps.start / MIB:.2f} MiB")
print(f"the allocator's peak: {steps.peak / MIB:.2f} MiB, during the {steps.peak_phase}; "
      f"the kinds added up: {added_up / MIB:.2f} MiB ({steps.peak / added_up:.2f} of it)")
viz.memory_timeline(steps, added_up)

# %% [markdown]
# Activations pile up during forward and are freed during backward, layer by layer, while the gradients
# appear: the two never reach their largest together. Short-lived tensors come on top, which no kind names:
# each gradient flowing back through a layer, and in Adam's step the square root of `exp_avg_sq` for every
# parameter at once (`torch._foreach_sqrt` in `torch/optim/adam.py: _multi_tensor_adam`). `memory.make_optimizer`
# asks for that `foreach` implementation, which torch picks by default on GPUs
# (`torch/optim/optimizer.py: _default_to_fused_or_foreach`). For this model the two effects nearly cancel and
# the sum of the kinds is close to the peak; a model whose activations dwarf its parameters can peak above the
# sum (the last exercise below).

# %% [markdown]
# ## DataParallel: memory per device
# DataParallel copies the whole model to every device and splits the batch (lessons 02 and 03). Which device
# needs the most memory?

# %%
quiz.ask("15-dp-most-memory")

# %% [markdown]
# `memory.measure` runs dpcourse's DataParallel unchanged. A subclass, `memory.CountingDataParallel`, overrides
# `replicate` and `parallel_apply`, as torch's DataParallel allows, to count each replica's parameter copies,
# the tensors each replica's forward saves (a recorder in each replica's thread: the hooks are per thread) and
# each replica's gradients when they reach the sum. Four devices, 64 samples each:

# %% tags=["reveals-answer"]
with quiz.reveal("15-dp-most-memory"):
    dp = memory.measure(Setup(kind="DataParallel", devices=4))
    print(dp)
    print("\ndevice 0 holds beyond device 1:",
          ", ".join(f"{name} {value / MIB:.2f} MiB" for name, value in dp.surplus().items() if value))
    display(viz.memory_bars([one_device["Adam"], dp]))

# %% [markdown]
# The other devices' bars are the kinds added up, too. Do their parameter copies and gradients coexist? Each
# layer's backward frees the copies it saved, but a replica's copies are views of one flat buffer per device
# (`dpcourse/comm.py: _copy_bucket`; torch's C++ `broadcast_coalesced` also copies one flat buffer and hands
# out views of it), and a buffer lives until its last view is freed. `memory.copies_and_gradients` watches
# the buffer with a weak reference to its storage and counts replica 1's gradients as each layer's backward
# begins:

# %%
together = memory.copies_and_gradients(Setup(kind="DataParallel", devices=2, batch=16))
for name, value in together.items():
    print(f"{name:<28} {value:>12,}" + (" bytes" if "bytes" in name or "with" in name else ""))
print(f"gradients computed while the copy buffer was still alive: "
      f"{together['gradients with copies alive'] / together['gradient bytes']:.0%} of replica 1's gradients")

# %% [markdown]
# The views are all freed by the time the gradients reach the sum, and so is the buffer, but not before: while
# backward runs, a device other than 0 holds its whole copy buffer and most of its gradients at once (the
# share the cell prints, counted as each layer's backward begins, so a lower bound). The buffer goes once the
# second Linear layer, the first that saved its weight, has run its backward: the first layer saved its input,
# not its weight, since the batch needs no gradient. So devices 1 to 3 need nearly their whole bar at once,
# less the activations backward has already freed.

# %% [markdown]
# ## DDP: memory per rank
# DDP runs one process per device, each with its own whole model and its own optimizer (lesson 10). During
# backward, DDP averages the gradients with all-reduces on flat buffers, its buckets
# (`torch/csrc/distributed/c10d/reducer.cpp: Reducer::initialize_buckets`). How much does a rank hold for the
# model itself, compared with DataParallel's device 0?

# %%
quiz.ask("15-ddp-rank-memory")

# %% [markdown]
# `ddp_memory.measure_ddp` (`dpcourse.ddp.demos.memory`) starts the ranks with `dpcourse.ddp.launch` and counts inside each rank's process
# (`dpcourse/ddp/demos/memory.py`); DDP reports the bytes of its buckets itself. The ranks use the backend printed at
# the top: [NCCL](00_start_here.ipynb#Glossary) needs one GPU per rank, so it is used only when every rank has a GPU of its own;
# otherwise gloo, with the ranks' tensors on the CPU. Two ranks of 128 samples each,
# against DataParallel on two devices (`viewed`, measured in the same launch, comes below):

# %% tags=["reveals-answer"]
with quiz.reveal("15-ddp-rank-memory"):
    ddp, viewed = ddp_memory.measure_ddp([Setup(kind="DDP", devices=2), Setup(kind="DDP", devices=2, bucket_view=True)])
    dp2 = memory.measure(Setup(kind="DataParallel", devices=2))
    print(ddp, dp2, sep="\n\n")
    display(viz.memory_bars([dp2, ddp]))

# %% [markdown]
# With `gradient_as_bucket_view=True` the gradients are views into the buckets, which "can reduce peak memory
# usage, where the saved memory size will be equal to the total gradients size" (the DDP docstring,
# `torch/nn/parallel/distributed.py`):

# %%
saved_bytes = ddp.totals[0] - viewed.totals[0]
print(f"per rank: {ddp.totals[0] / MIB:.2f} MiB by default, {viewed.totals[0] / MIB:.2f} MiB with "
      f"gradient_as_bucket_view=True; saved {saved_bytes / MIB:.2f} MiB = the gradients: "
      f"{saved_bytes == ddp.devices[0]['gradients']}")

# %% [markdown]
# ## Predicting it
# Everything above follows from a few numbers: the model's shape, the batch, the optimizer and the devices.
# `memory.predict` writes each kind as a formula (`dpcourse/memory/calculator.py`). Against every measurement
# of this lesson:

# %%
for measured in [*one_device.values(), dp, dp2, ddp, viewed]:
    predicted = memory.predict(measured.setup)
    worst = max(abs(p / m - 1) for p, m in zip(predicted.totals, measured.totals) if m)
    s = measured.setup
    print(f"{s.kind:>12} x{s.devices} {s.optimizer:<18} predicted {max(predicted.totals) / MIB:6.2f} MiB, "
          f"measured {max(measured.totals) / MIB:6.2f} MiB on the fullest device; worst device off by {worst:.2%}")

# %% [markdown]
# The formulas match the counts on every device (tests/test_memory.py holds them within 10% over more
# setups). The calculator puts them behind controls. Width, classes and batch are text boxes: type any number.
# Try 128000 classes (a language model's vocabulary) on 8 devices, and see whose memory grows:

# %%
widgets.MemoryCalculator()

# %% [markdown]
# ## On a GPU
# A GPU gives every device its own memory and its own counter. `memory.cuda_peaks(setup)` runs a step on real
# GPUs, one per replica, and reads `torch.cuda.max_memory_allocated` of each (`torch/cuda/memory.py`); each DDP
# rank reads its own. Two warm-up steps come first: they create the optimizer state and the workspaces of cuBLAS,
# which the allocator counts too; what it holds beyond the step's own tensors is subtracted:
#
# ```python
# peaks = memory.cuda_peaks(Setup(kind="DataParallel", devices=2, optimizer="SGD"))
# predicted = memory.predict(Setup(kind="DataParallel", devices=2, optimizer="SGD")).totals
# ```
#
# The lessons run on CPU devices, so this course's stored outputs hold no GPU number. The GPU tests in
# `tests/test_memory.py` (marked `cuda`) compare the two where GPUs are present: the one-device and DDP ones
# need one GPU, the DataParallel one, which checks device 0 against the others, needs two. The course's only
# GPU run so far had one GPU (`docs/benchmarks.md`), so this lesson's per-device DataParallel numbers have not
# been checked on GPUs.

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: optimizer state in bytes
# Write `optimizer_state_bytes(parameters, optimizer)`: the bytes that `torch.optim.SGD`, SGD with momentum or
# `torch.optim.Adam` keeps in `optimizer.state` for `parameters` (a list of tensors) after its first step.
# The check runs the real optimizer. Mind each parameter's dtype.

# %% tags=["solution"]
def optimizer_state_bytes(parameters, optimizer):
    """The bytes torch's optimizer keeps in optimizer.state for `parameters` after its first step."""
    ### BEGIN SOLUTION
    buffers = {"SGD": 0, "SGD with momentum": 1, "Adam": 2}[optimizer]
    parameter_bytes = sum(p.numel() * p.element_size() for p in parameters)
    counters = 4 * len(parameters) if optimizer == "Adam" else 0  # one float32 `step` per tensor
    return buffers * parameter_bytes + counters
    ### END SOLUTION


# %%
exercises.check("optimizer_state_bytes", optimizer_state_bytes)

# %% [markdown]
# ### Exercise: device 0's surplus
# Write `device0_surplus(one_device)`: `one_device` maps each kind (`"parameters"`, `"gradients"`,
# `"optimizer state"`, `"activations"`, `"outputs and loss"`, ...) to the bytes one device holds when it trains
# on the whole batch, like `one_device["Adam"].devices[0]` above. Return how many more bytes DataParallel's
# device 0 holds than device 1, for the same model, batch and optimizer, when the batch splits evenly. The check
# measures real DataParallel steps.

# %% tags=["solution"]
def device0_surplus(one_device):
    """How many more bytes DataParallel's device 0 holds than device 1, from what one device holds."""
    ### BEGIN SOLUTION
    return one_device["gradients"] + one_device["optimizer state"] + one_device["outputs and loss"]
    ### END SOLUTION


# %%
exercises.check("device0_surplus", device0_surplus)

# %% [markdown]
# ## Summary
# - A training step keeps parameters, gradients, optimizer state (SGD none, momentum one copy of the
#   parameters, Adam two and a step counter per tensor), activations (what forward saves for backward, growing
#   with the batch) and the outputs and loss.
# - torch accounts for all of them: the tensors' bytes, `saved_tensors_hooks` for what autograd saves, the
#   profiler's memory events for the allocator's real peak, `torch.cuda.max_memory_allocated` on a GPU. The
#   peak differs from the kinds added up: activations are freed while gradients appear, and short-lived
#   tensors come on top.
# - DataParallel puts every replica's whole model on every device, and on device 0 also the summed gradients,
#   the optimizer state and the whole batch's outputs and loss: device 0 runs out of memory first.
# - Every DDP rank holds the same: the whole model, gradients, optimizer state and all-reduce buckets as large
#   as the gradients, and its shard's activations. By default that is as much model state as DataParallel's
#   device 0 holds (two gradient-sized sets); `gradient_as_bucket_view=True` shares the buckets with the
#   gradients and saves one set. Only sharding the model state between the ranks splits the rest.
# - `memory.predict` and the calculator give each device's bytes from the model's shape, batch, optimizer and
#   devices, and match the measurements.
#
# ## Exercises
# 1. With `memory.predict`, find the smallest batch among 256, 1024, 4096 and 16384 for which DataParallel's
#    device 0 holds more than twice what each DDP rank holds (the lesson's MLP with 32000 classes, plain SGD,
#    4 devices): write `batch_for_twice(candidates, n)`.
# 2. How much memory does `gradient_as_bucket_view=True` save on each of 8 DDP ranks for an MLP of width
#    4096 and depth 8? Answer with `memory.predict`: write `bucket_view_saving(width, depth, n)`.
# 3. Profile a model whose activations dwarf its parameters: width 256, depth 3, 10 classes, batch 1024, SGD.
#    How does the allocator's peak compare with the kinds added up, and in which phase is it? Write
#    `peak_against_kinds(setup)`, then call it on that setup.

# %% tags=["solution"]
def batch_for_twice(candidates, n):
    ### BEGIN SOLUTION
    for batch in candidates:
        common = {"devices": n, "batch": batch, "optimizer": "SGD", "model": memory.sized_mlp(classes=32000)}
        dp_first = memory.predict(Setup(kind="DataParallel", **common)).totals[0]
        if dp_first > 2 * memory.predict(Setup(kind="DDP", **common)).totals[0]:
            return batch
    return None
    ### END SOLUTION


# %%
exercises.check("batch_for_twice", batch_for_twice)

# %% tags=["solution"]
def bucket_view_saving(width, depth, n):
    ### BEGIN SOLUTION
    model = memory.sized_mlp(width=width, depth=depth)
    per_rank = [memory.predict(Setup(kind="DDP", devices=n, model=model, bucket_view=view)).totals[0]
                for view in (False, True)]
    return per_rank[0] - per_rank[1]
    ### END SOLUTION


# %%
exercises.check("bucket_view_saving", bucket_view_saving)

# %% tags=["solution"]
def peak_against_kinds(setup):
    ### BEGIN SOLUTION
    profiled = memory.profile_step(setup)
    return profiled.peak, profiled.peak_phase, memory.predict(setup).totals[0]
    ### END SOLUTION


# %%
exercises.check("peak_against_kinds", peak_against_kinds)
