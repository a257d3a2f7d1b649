# %% [markdown]
# # 01 · One device: the training step we will parallelise
#
# **After this lesson you will be able to explain**
# - the four parts of one training step: forward, loss, backward, optimizer step;
# - why "the same step on one device with the whole batch" is the oracle every DataParallel result is
#   checked against in this course;
# - what `dpcourse.devices(n)` gives you on this machine, and what CPU devices can and cannot show.

# %%
import torch

import dpcourse
from dpcourse import examples, exercises, quiz

# %% [markdown]
# ## The running example
# Every lesson parallelises the same small model and batch, so numbers can be compared across lessons:
# a 2-layer MLP (8 → 16 → 4) and a batch of 10 samples. Both are seeded (`dpcourse/examples/`), and both go
# to `devices[0]`, the first of the devices DataParallel will use (on a GPU machine `cuda:0`; more below).

# %%
devices = dpcourse.devices(3)
model = examples.make_model().to(devices[0])
x, y = examples.make_batch(10, device=devices[0])
model, x.shape, y.tolist()

# %% [markdown]
# ## One step on one device
# Forward the whole batch, average the loss over all 10 samples, backward, then let the optimizer move the
# weights. Each parameter's `.grad` is the gradient of that **mean** loss.

# %%
oracle = examples.twin(model)  # an independent copy with the same weights: our reference
loss = examples.loss_fn(oracle(x), y)
loss.backward()
print(f"loss = {loss.item():.4f}")
print("grad of the first weight, first row:", [round(v, 4) for v in oracle[0].weight.grad[0, :4].tolist()])

# %% [markdown]
# ## The oracle
# DataParallel promises to compute *this* step, only spread over devices. So in every lesson we run the
# parallel version next to this one and print the largest difference. Up to float rounding it must be 0.
#
# Here is the promise kept, before we open the box: the same step with `dpcourse.DataParallel` on 3 devices.

# %%
parallel = dpcourse.DataParallel(model, devices=devices)  # model is on devices[0], as torch requires
examples.loss_fn(parallel(x), y).backward()
print(f"max |grad difference| vs the oracle: {examples.gap(examples.max_grad_difference(model, oracle))}")

# %% [markdown]
# ## Which devices do you have?
# `dpcourse.devices(n)` returns n devices for n replicas: n GPUs if there are that many, replicas sharing
# the GPUs round-robin if there are fewer, and n CPU "devices" if there is no GPU. The stored output below
# was made on a machine without a GPU, so it shows CPU devices; yours shows what your machine has.

# %% tags=["nbval-ignore-output"]
print("GPUs visible:", torch.cuda.device_count())
dpcourse.devices(3)

# %% [markdown]
# | mode | each replica is | you can see | you cannot see |
# |---|---|---|---|
# | n GPUs | a copy on its own GPU | everything, at real speed | — |
# | one GPU, n replicas | a copy on the same GPU | every copy, thread and sum | a speed-up; device mismatches |
# | CPU devices | a copy in CPU memory, run in its own thread | chunking, copies, aliasing, lost updates, gradient sums, thread timelines | device-mismatch errors (all memory is one device), real transfer costs, GPU speed |
#
# `torch.nn.DataParallel` itself does nothing without a GPU: it becomes a pass-through that calls your
# module once on the whole batch (`torch/nn/parallel/data_parallel.py`, `__init__`: no device type found →
# `device_ids = []`). With one GPU, `device_ids` is `[0]` and `__init__` moves the module to `cuda:0` itself;
# forward then calls it there on the whole batch, still without threads. See what yours does:

# %% tags=["nbval-ignore-output"]
torch_dp = torch.nn.DataParallel(examples.make_model())
print("torch's device_ids:", torch_dp.device_ids, "| its module is on:", next(torch_dp.module.parameters()).device)

# %% [markdown]
# ## Predict, then run
# Answer before you look: the quiz hides its explanation until you commit to an answer.

# %%
quiz.ask_lesson("01_one_device")

# %% [markdown]
# ## Write it yourself
# Each exercise below asks for one function. Write its body in place of the stub (the `raise
# NotImplementedError` line), then run the check cell under it: it calls your function on a few cases and
# compares the answers with torch's.
#
# ### Exercise: the oracle's gradients
# Write `full_batch_gradients(model, x, y)`: the gradients of `examples.loss_fn(model(x), y)` with respect to
# `model.parameters()`, as a list in the same order. This is what every parallel gradient is checked against.

# %% tags=["solution"]
def full_batch_gradients(model, x, y):
    """The one-device gradient of the mean loss over the whole batch, one tensor per parameter."""
    ### BEGIN SOLUTION
    loss = examples.loss_fn(model(x), y)
    return list(torch.autograd.grad(loss, list(model.parameters())))
    ### END SOLUTION


# %%
exercises.check("full_batch_gradients", full_batch_gradients)

# %% [markdown]
# ### Exercise: weighing chunk losses
# Split a batch of B rows into chunks of $b_1, b_2, \dots$ rows and compute each chunk's mean loss. Write
# `chunk_loss_weights(sizes)`: one weight $w_j$ per chunk such that $\sum_j w_j \cdot \text{mean}_j$ is the mean
# loss over the whole batch, for any data.

# %% tags=["solution"]
def chunk_loss_weights(sizes):
    """The weight of each chunk's mean loss in the full-batch mean: its share of the rows."""
    ### BEGIN SOLUTION
    batch = sum(sizes)
    return [size / batch for size in sizes]
    ### END SOLUTION


# %%
exercises.check("chunk_loss_weights", chunk_loss_weights)


# %% [markdown]
# ## Summary
# - One step = forward, loss (a mean over the batch), backward, optimizer step.
# - The oracle is that step on one device with the whole batch; DataParallel must reproduce its gradients.
# - `dpcourse.devices(n)` picks GPUs when there are some, CPU devices otherwise; CPU devices show the
#   mechanics but not the costs.
#
# ## Exercises
# 1. Change the batch to 7 samples and 2 devices. Does the parallel gradient still match the oracle? Write
#    `parallel_gradients(model, x, y, n)`: one forward and backward through DataParallel on `n` devices, returning
#    the model's gradients; the check compares them with the oracle's, on 7 samples and 2 devices among others.
# 2. Train a model for a few steps with `examples.train`, wrapped in DataParallel: write
#    `train_in_parallel(model, n, steps)`, returning the losses. The check trains a twin on one device and
#    compares the weights with `examples.max_weight_difference`.

# %% tags=["solution"]
def parallel_gradients(model, x, y, n):
    ### BEGIN SOLUTION
    examples.loss_fn(dpcourse.DataParallel(model, devices=dpcourse.devices(n))(x), y).backward()
    return [p.grad for p in model.parameters()]
    ### END SOLUTION


# %%
exercises.check("parallel_gradients", parallel_gradients)

# %% tags=["solution"]
def train_in_parallel(model, n, steps):
    ### BEGIN SOLUTION
    return examples.train(dpcourse.DataParallel(model, devices=dpcourse.devices(n)), steps=steps)
    ### END SOLUTION


# %%
exercises.check("train_in_parallel", train_in_parallel)
