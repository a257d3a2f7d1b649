# %% [markdown]
# # 06 · Backward: where the gradients go
#
# **After this lesson you will be able to explain**
# - how the gradient of the gathered output finds its way back to each replica;
# - how the replicas' gradients are combined into your model's `.grad`;
# - when the result is exactly the one-device gradient, and why;
# - why averaging the replicas' own mean losses is biased when the chunks are uneven, and what to do instead;
# - why a gradient penalty (double backward) works through DataParallel.
#
# Backward undoes the forward in reverse order. Each of DataParallel's autograd Functions has the opposite
# move as its backward (`dpcourse/_functions.py`, mirroring `torch/nn/parallel/_functions.py`):
#
# | forward | its backward |
# |---|---|
# | `Scatter`: split the batch over the devices | `Gather`: concatenate the chunks' gradients |
# | `Broadcast`: copy the parameters to every device | `ReduceAdd`: bring the copies' gradients back to the original |
# | `Gather`: concatenate the replicas' outputs | `Scatter`: split the gradient back to the replicas |

# %%
import inspect
import warnings

import torch
from torch import nn

import dpcourse
from dpcourse import examples, exercises, quiz, viz, widgets

# Replicas that return a scalar loss get lesson 05's "all input tensors were scalars" warning; it is known here.
warnings.filterwarnings("ignore", message="Was asked to gather along dimension 0")
devices = dpcourse.devices(4)
x, y = examples.make_batch(10, device=devices[0])

# %% [markdown]
# ## Gather's backward splits the gradient
# Trace one training step of the running example on 4 devices (10 rows: chunks 3, 3, 3, 1). The steps of
# backward come after the four forward steps, and the first of them is `gather-backward`:

# %%
model = examples.make_model().to(devices[0])  # the model goes to devices[0] before it is wrapped
with dpcourse.trace() as t:
    examples.loss_fn(dpcourse.DataParallel(model, devices=devices)(x), y).backward()
print("steps, in order:", list(dict.fromkeys(span.step for span in t.spans)))
print("gather-backward received the gradient of the gathered output, shape", t.steps("gather-backward")[0].shapes[0])

# %% [markdown]
# `Gather.forward` recorded each output's size and device (`ctx.input_sizes`); `Gather.backward` is
# `Scatter.apply` with exactly those sizes, so every replica gets back the rows of the gradient that belong to
# its own output, on its own device. To watch it, run the four steps by hand and keep the gradient of every
# output (`retain_grad`):

# %%
chunks = dpcourse.scatter(x, devices)
replicas = dpcourse.replicate(model, devices[: len(chunks)])
outputs = dpcourse.parallel_apply(replicas, chunks, devices=devices[: len(chunks)])
gathered = dpcourse.gather(outputs, devices[0])
for tensor in (gathered, *outputs):
    tensor.retain_grad()
examples.loss_fn(gathered, y).backward()

rows = gathered.grad.split([len(output) for output in outputs])
for i, (output, own_rows) in enumerate(zip(outputs, rows)):
    print(f"replica {i}: output grad {list(output.grad.shape)}, "
          f"equal to its rows of the gathered grad: {torch.equal(output.grad, own_rows.to(output.device))}")

# %% [markdown]
# From there each replica's backward runs on its own copy of the weights, and the last step, `reduce-add`,
# brings the copies' gradients together. How?

# %% [markdown]
# ## Broadcast's backward
# Every replica's weight is a copy made by `Broadcast` (lesson 03), and `Broadcast.backward` takes the copies'
# gradients back to your model's `.grad`. How does it combine them? Predict first:

# %%
quiz.ask("06-gradients-summed")

# %% [markdown]
# Replicate a `Linear(2, 1)` on 3 devices, run each copy on the same input, and weight replica j's output by
# j + 1, so that the three copies get visibly different gradients:

# %% tags=["reveals-answer"]
with quiz.reveal("06-gradients-summed"):
    three = dpcourse.devices(3)
    linear = nn.Linear(2, 1).to(three[0])
    copies = dpcourse.replicate(linear, three)
    x_one = torch.tensor([[1.0, 2.0]])
    outputs = [copy(x_one.to(device)).sum().to(three[0]) for copy, device in zip(copies, three)]  # each on its device
    loss = sum((j + 1) * output for j, output in enumerate(outputs))
    per_copy = torch.autograd.grad(loss, [copy.weight for copy in copies], retain_graph=True)
    loss.backward()
    for j, grad in enumerate(per_copy):
        print(f"copy {j}'s weight: grad {grad.tolist()}")
    mean = sum(grad.to(three[0]) for grad in per_copy) / 3
    print("linear.weight.grad:", linear.weight.grad.tolist(), "| the mean would be", mean.tolist())
    print("the gradient lands on the original parameter's device:", linear.weight.grad.device)

# %% [markdown]
# ## The sum and the full-batch gradient
# The usual loss is the mean over the gathered output, $L = \frac{1}{B}\sum_{n=1}^{B} \ell_n$, and the chunks
# are often uneven. How does the summed gradient compare with one device's? Predict first:

# %%
quiz.ask("06-mean-loss-matches")

# %% tags=["reveals-answer"]
with quiz.reveal("06-mean-loss-matches"):
    for batch in (10, 7, 13):
        model = examples.make_model().to(devices[0])
        oracle = examples.twin(model)
        xb, yb = examples.make_batch(batch, device=devices[0])
        examples.loss_fn(oracle(xb), yb).backward()
        examples.loss_fn(dpcourse.DataParallel(model, devices=devices)(xb), yb).backward()
        sizes = [len(chunk) for chunk in dpcourse.scatter(xb, devices)]
        print(f"batch {batch:2d}, chunks {sizes}: max |grad difference| vs the oracle = "
              f"{examples.gap(examples.max_grad_difference(model, oracle))}")

# %%
viz.gradient_sum(batch=10, n_devices=4)

# %% [markdown]
# The derivation assumed that each $\ell_n$ depends on sample n alone. BatchNorm breaks that: in training mode
# it normalises each chunk with that chunk's own statistics (lesson 03), so the gradient is no longer the
# one-device one:

# %%
model = examples.make_model(batchnorm=True).to(devices[0])
oracle = examples.twin(model)
xb, yb = examples.make_batch(12, device=devices[0])
examples.loss_fn(oracle(xb), yb).backward()
examples.loss_fn(dpcourse.DataParallel(model, devices=dpcourse.devices(3))(xb), yb).backward()
difference = examples.max_grad_difference(model, oracle)
print(f"with BatchNorm, 12 rows on 3 devices: max |grad difference| = {examples.gap(difference)}")

# %% [markdown]
# So "the weights update exactly as if trained on the full batch" holds for a batch-mean loss on the gathered
# output and a model without cross-sample layers. The other common way to lose it is where the mean is taken.

# %% [markdown]
# ## The mean-of-means pitfall
# Many training scripts compute the loss **inside** `forward`, so that the outputs never travel to device 0.
# Each replica then returns the mean loss of its own chunk, a scalar; gather turns the N scalars into a
# vector of N (lesson 05), and the script calls `.mean()` on it. `examples.LossInside` is such a model; with 7
# rows on 2 devices:

# %%
from dpcourse.examples import LossInside

print(inspect.getsource(LossInside))
model = examples.make_model().to(devices[0])
oracle = examples.twin(model)
x7, y7 = examples.make_batch(7, device=devices[0])
losses = dpcourse.DataParallel(LossInside(model), devices=dpcourse.devices(2))(x7, y7)
losses.mean().backward()
examples.loss_fn(oracle(x7), y7).backward()
print("gathered losses:", list(losses.shape), "| max |grad difference| vs the oracle, over all parameters:",
      f"{examples.gap(examples.max_grad_difference(model, oracle))}")

# %% [markdown]
# The gradient is off by far more than rounding. To see why, ask how much each sample's loss weighs in the
# final number: give the same pipeline stand-in per-sample losses and differentiate.

# %%
class ChunkMean(nn.Module):
    def forward(self, per_sample_losses):
        return per_sample_losses.mean()


per_sample = torch.ones(7, requires_grad=True)
dpcourse.DataParallel(ChunkMean(), devices=dpcourse.devices(2))(per_sample).mean().backward()
print("weight of each sample's loss:", [f"1/{round(1 / w)}" for w in per_sample.grad.tolist()])
print("on one device:               ", ["1/7"] * 7)

# %% [markdown]
# A mean of N chunk means gives each *chunk* the weight 1/N, shared by its $b_j$ rows: sample n of chunk j
# weighs $\frac{1}{N b_j}$ instead of $\frac{1}{B}$. Here that is 1/8 for the 4 rows of chunk 0 and 1/6 for the
# 3 rows of chunk 1. With equal chunks $\frac{1}{N \cdot B/N} = \frac{1}{B}$, so the bias stays hidden until a
# batch chunks unevenly, typically the last batch of an epoch.
#
# The figure draws the same setup. Its right panel compares the gradient of the first layer's weight
# (`0.weight`) only, so its max |diff| can be smaller than the one printed above over all parameters; it
# is never larger.

# %%
viz.per_replica_mean_bias(batch=7, n_devices=2)

# %% [markdown]
# Explore: the explorer below starts with even chunks (8 rows on 2 devices), where the mean of means is
# harmless. Drag the batch to 7 or 9, add devices, or switch the loss to a mean or a sum over the gathered output.

# %%
widgets.GradientSum(reduction="per-replica mean", batch=8, devices=2)

# %% [markdown]
# What if the script sums the replicas' losses instead?

# %%
quiz.ask("06-sum-of-replica-losses")

# %% tags=["reveals-answer"]
with quiz.reveal("06-sum-of-replica-losses"):
    model = examples.make_model().to(devices[0])
    oracle = examples.twin(model)
    x8, y8 = examples.make_batch(8, device=devices[0])
    dpcourse.DataParallel(LossInside(model), devices=dpcourse.devices(2))(x8, y8).sum().backward()
    examples.loss_fn(oracle(x8), y8).backward()
    scale = (model[0].weight.grad.norm() / oracle[0].weight.grad.norm()).item()
    scaled = all(torch.allclose(p.grad, scale * q.grad, atol=1e-6) for p, q in zip(model.parameters(), oracle.parameters()))
    print(f"8 rows on 2 devices, .sum() of the chunk means: every grad = {scale:.4f} x the one-device grad:", scaled)

# %%
class PerSampleLosses(LossInside):
    def forward(self, x, y):
        return nn.functional.cross_entropy(self.model(x), y, reduction="none")


class SumAndCount(LossInside):
    def forward(self, x, y):
        total = nn.functional.cross_entropy(self.model(x), y, reduction="sum")
        return total.reshape(1), torch.tensor([len(y)], device=y.device)  # shape (1,): no scalar warning


for fix in (PerSampleLosses, SumAndCount):
    model = examples.make_model().to(devices[0])
    oracle = examples.twin(model)
    out = dpcourse.DataParallel(fix(model), devices=dpcourse.devices(2))(x7, y7)
    loss = out.mean() if fix is PerSampleLosses else out[0].sum() / out[1].sum()
    loss.backward()
    examples.loss_fn(oracle(x7), y7).backward()
    print(f"{fix.__name__:15}, 7 rows on 2 devices: max |grad difference| = "
          f"{examples.gap(examples.max_grad_difference(model, oracle))}")

# %% [markdown]
# ## Double backward
# A gradient penalty differentiates a gradient: `torch.autograd.grad(loss, params, create_graph=True)`, then
# a second backward through the result. Under DataParallel the first gradient was built by the backward
# Functions above, so the second backward runs *their* backwards, and those are again the same four
# Functions: `ReduceAdd.backward` is `Broadcast`, `Gather.backward` is `Scatter` and the other way round
# (`torch/nn/parallel/_functions.py: ReduceAddCoalesced.backward`). The set is closed under backward, so a
# second (or third) backward is built from the same parts as the first.

# %%
def penalised_loss(net):
    loss = examples.loss_fn(net(x), y)
    grads = torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
    return loss + 0.1 * sum(g.pow(2).sum() for g in grads), grads


model = examples.make_model().to(devices[0])
oracle = examples.twin(model)
loss, grads = penalised_loss(dpcourse.DataParallel(model, devices=dpcourse.devices(3)))
loss.backward()
penalised_loss(oracle)[0].backward()
print("the first gradient came out of:", type(grads[0].grad_fn).__name__)
difference = examples.max_grad_difference(model, oracle)
print(f"after the penalty's backward: max |grad difference| vs the oracle = {examples.gap(difference)}")

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: reduce-add
# Write `reduce_add(grads_per_replica)`: `grads_per_replica[r][j]` is replica r's gradient of parameter j.
# Return one tensor per parameter: the gradient your model's parameter gets in backward.

# %% tags=["solution"]
def reduce_add(grads_per_replica):
    """Broadcast's backward: every parameter's gradients from all replicas, summed."""
    ### BEGIN SOLUTION
    return [sum(same_parameter) for same_parameter in zip(*grads_per_replica)]
    ### END SOLUTION


# %%
exercises.check("reduce_add", reduce_add)

# %% [markdown]
# ### Exercise: gather's backward
# Write `split_gradient(grad, sizes)`: the gradient of the gathered output, cut into one piece per replica;
# replica i produced `sizes[i]` rows of the output and gets the gradient of exactly those rows.

# %% tags=["solution"]
def split_gradient(grad, sizes):
    """Gather's backward: the output's gradient split back into the replicas' chunks, in replica order."""
    ### BEGIN SOLUTION
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [grad[start:start + size] for start, size in zip(starts, sizes)]
    ### END SOLUTION


# %%
exercises.check("split_gradient", split_gradient)


# %% [markdown]
# ## Summary
# - `Gather.backward` splits the gradient with the recorded sizes and sends each replica its own rows.
# - `Broadcast.backward` **sums** the copies' gradients into your model's parameters on `devices[0]`; nothing
#   divides by the number of replicas.
# - With the loss a mean over the gathered output, that sum is the one-device gradient for any chunk sizes:
#   the 1/B lives in the loss. BatchNorm (per-chunk statistics) breaks the equality.
# - A mean of per-replica mean losses weighs samples $\frac{1}{N b_j}$: biased on uneven chunks; a sum is N
#   times too big. Return per-sample losses, or a sum and a count.
# - Every backward is made of the same Functions, so double backward works.
#
# ## Exercises
# 1. Write `sample_weights(batch, n)`: the weight each sample's loss gets when n replicas return their chunk
#    means and you average them. Check 9 rows on 2 devices and 8 rows on 4.
# 2. Keep `LossInside` (chunk means) but fix the reduction: write `size_weighted_loss(model, x, y, n)`, which weighs
#    each chunk mean by its chunk size. The check calls backward on it: 10 rows on 4 devices must then give the
#    oracle's gradient.

# %% tags=["solution"]
def sample_weights(batch, n):
    """The weight of each sample's loss in the mean of the replicas' chunk means."""
    ### BEGIN SOLUTION
    sizes = [len(chunk) for chunk in torch.arange(batch).chunk(n)]
    return torch.tensor([1 / (len(sizes) * size) for size in sizes for _ in range(size)])
    ### END SOLUTION


# %%
exercises.check("sample_weights", sample_weights)

# %% tags=["solution"]
def size_weighted_loss(model, x, y, n):
    ### BEGIN SOLUTION
    chunk_means = dpcourse.DataParallel(LossInside(model), devices=dpcourse.devices(n))(x, y)
    chunk_sizes = torch.tensor([len(chunk) for chunk in x.chunk(n)], dtype=chunk_means.dtype,
                               device=chunk_means.device)
    return (chunk_means * chunk_sizes).sum() / len(x)
    ### END SOLUTION


# %%
exercises.check("size_weighted_loss", size_weighted_loss)
