# %% [markdown]
# # 05 · Gather: one output from many replicas
#
# **After this lesson you will be able to explain**
# - how DataParallel makes one output of the replicas' outputs, and what it does with anything else a
#   replica returns;
# - what happens to dicts, tuples, namedtuples and `None` in the outputs;
# - what becomes of a 0-d loss returned by every replica;
# - where the output lands, and why on GPUs device 0 fills up first.
#
# Gather is step 4 of every forward (`dpcourse/scatter_gather.py` and `dpcourse/_functions.py`, mirroring
# `gather` in `torch/nn/parallel/scatter_gather.py` and `Gather` in `torch/nn/parallel/_functions.py`).

# %%
import warnings
from collections import namedtuple

import torch
from IPython.display import display
from torch import nn

import dpcourse
from dpcourse import examples, exercises, quiz, viz

torch.manual_seed(0)
devices = dpcourse.devices(4)
model = examples.make_model().to(devices[0])  # the model goes to devices[0] before it is wrapped
x, y = examples.make_batch(10, device=devices[0])
dp = dpcourse.DataParallel(model, devices=devices)

# %% [markdown]
# ## Combining the outputs
# Gather turns one output per replica into one output on one device. How does it combine them? Predict:

# %%
quiz.ask("05-gather-concatenates")

# %% [markdown]
# The running example on 4 devices: 10 rows give replica outputs of 3, 3, 3 and 1 rows. Compare them with the
# gathered output:

# %% tags=["reveals-answer"]
with quiz.reveal("05-gather-concatenates"):
    output = dp(x)
    per_chunk = [model(chunk) for chunk in x.chunk(4)]
    print("replica outputs:", [list(o.shape) for o in per_chunk], "-> gathered:", list(output.shape))
    print("equal to torch.cat of the per-chunk outputs:", torch.equal(output, torch.cat(per_chunk)))
    display(viz.gather_view([3, 3, 3, 1], features=output.shape[1]))

# %% [markdown]
# Gather returns whatever `forward` returned, and nothing more: DataParallel never sees the labels, computes
# no loss and averages nothing. The loss is your code, run on the gathered output, so it is the very loss
# one device computes on the whole batch:

# %%
loss = examples.loss_fn(output, y)
print(f"loss on the gathered output: {loss.item():.6f} | one device, whole batch: {examples.loss_fn(model(x), y).item():.6f}")

# %% [markdown]
# "Gather rebuilds the batch" is only true for outputs with one row per sample. Anything else a replica
# returns is stacked replica after replica. Here a module also returns a summary of the rows it saw, of
# shape `(10,)`:

# %%
class WithSummary(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 4)

    def forward(self, x):
        return self.linear(x), x.sum(0)  # the second output has no batch dimension


inputs = torch.randn(8, 10).to(devices[0])
for n in (1, 2, 4):
    out, summary = dpcourse.DataParallel(WithSummary().to(devices[0]), devices=dpcourse.devices(n))(inputs)
    print(f"{n} device(s): output {list(out.shape)}, summary {list(summary.shape)}")
print("adding the pieces gives the whole batch's summary:", torch.allclose(summary.view(4, 10).sum(0), inputs.sum(0)))

# %% [markdown]
# Returning extra tensors is fine; expect them back concatenated, `(k·10,)` for k replicas, and reduce them
# yourself, or return one row per sample so that gather rebuilds the batch.
#
# Gather checks that the outputs agree outside the gather dimension. A module whose output width depends on
# its chunk's size cannot be gathered:

# %%
class WidthFollowsChunk(nn.Module):
    def forward(self, x):
        return x[:, : len(x)]


try:
    dpcourse.DataParallel(WidthFollowsChunk(), devices=devices)(torch.zeros(10, 8))
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# torch refuses the same outputs in C++ (`torch/csrc/cuda/comm.cpp`, `gather`: "Input tensor at index i has
# invalid shape …, but expected …"; older releases said "Gather got an input of invalid size"). Replica 0's
# output is the reference: its shape, and also its dtype, which the gathered tensor takes (the same C++
# `gather` allocates the result with the first tensor's options). The classic real case is a recurrent model
# that unpacks sequences to its own chunk's longest length (lesson 07 runs it). Which fix works?

# %%
quiz.ask("05-packed-lstm")

# %% [markdown]
# ## Dicts, tuples and namedtuples
# Like scatter, gather walks into containers: a dict comes back as a dict with the same keys, a namedtuple as
# the same namedtuple, a tuple or list as a tuple or list, each tensor inside gathered on its own. Again the
# first replica's output decides what to build, and the others must have the same structure.

# %%
Hidden = namedtuple("Hidden", "features logits")


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x):
        features = x.relu()
        return {"hidden": Hidden(features, self.linear(features)), "extras": (x.norm(dim=1), None)}


out = dpcourse.DataParallel(Structured().to(devices[0]), devices=devices)(x)
print(type(out).__name__, "with keys", list(out))
print("hidden:", type(out["hidden"]).__name__, {name: list(t.shape) for name, t in out["hidden"]._asdict().items()})
print("extras:", type(out["extras"]).__name__, [list(out["extras"][0].shape), out["extras"][1]])

# %% [markdown]
# `None` short-circuits: if replica 0 returned `None`, the result is `None`, and gather does not even look
# at what the other replicas returned (`gather_map` in `torch/nn/parallel/scatter_gather.py`, `if out is
# None: return None`). Tensors from replicas 1 and 2 vanish here:

# %%
print(dpcourse.gather([None, torch.ones(3, 2), torch.ones(3, 2)], devices[0]))

# %% [markdown]
# ## A 0-d loss from every replica
# A common pattern computes the loss inside `forward`, so each replica returns a 0-d tensor. A 0-d tensor has
# no dimension 0 to concatenate along. Predict:

# %%
quiz.ask("05-scalar-loss-shape")

# %% tags=["reveals-answer"]
class WithLoss(nn.Module):
    """The course model, with the loss computed inside forward: each replica returns one 0-d loss."""

    def __init__(self):
        super().__init__()
        self.model = examples.make_model()

    def forward(self, x, y):
        return examples.loss_fn(self.model(x), y)


with quiz.reveal("05-scalar-loss-shape"):
    with_loss = WithLoss().to(devices[0])
    x6, y6 = examples.make_batch(6, device=devices[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = dpcourse.DataParallel(with_loss, devices=devices)(x6, y6)
        single = dpcourse.DataParallel(with_loss, devices=dpcourse.devices(1))(x6, y6)
    print("6 rows on 4 devices: chunks", [len(c) for c in x6.chunk(4)], "-> shape", list(losses.shape))
    print(f"{caught[0].category.__name__}: {caught[0].message}")
    print("the same module on 1 device: shape", list(single.shape), "| warnings in all:", len(caught))
    warnings.filterwarnings("ignore", message="Was asked to gather along dimension 0")  # seen once is enough
    display(viz.gather_view([1, 1, 1], scalars=True))

# %% [markdown]
# `backward()` needs a single number, so the vector must be reduced first, and the reduction you pick sets the
# gradient's scale. With 8 rows on 4 devices (4 losses):

# %%
dp_with_loss = dpcourse.DataParallel(with_loss, devices=devices)
x8, y8 = examples.make_batch(8, device=devices[0])
try:
    dp_with_loss(x8, y8).backward()
except RuntimeError as error:
    print("RuntimeError:", error)

grads = {}
for reduction in ("sum", "mean"):
    with_loss.zero_grad()
    getattr(dp_with_loss(x8, y8), reduction)().backward()
    grads[reduction] = with_loss.model[0].weight.grad.clone()
print(f".sum() gives {grads['sum'].norm() / grads['mean'].norm():.4f} times the gradient of .mean()")

# %% [markdown]
# The ratio is the number of losses, k. Which of the two equals one device's gradient, and why neither does
# when the chunks are uneven, is lesson 06 ("The mean-of-means pitfall").

# %% [markdown]
# ## Where the output lands
# Gather puts the result on `output_device`, which defaults to `devices[0]` (torch: `device_ids[0]`). The
# loss computed on it is computed there too.

# %%
losses = dp_with_loss(x8, y8)
loss = examples.loss_fn(dp(x), y)
print("8 rows on 4 devices, a 0-d loss per replica: shape", list(losses.shape), "on", losses.device)
print("output_device:", dp.output_device, "| devices[0]:", devices[0], "| the loss is on:", loss.device)

# %% [markdown]
# On CPU devices every one of those names is `cpu`, so this cell shows the default, not a difference. On
# GPUs it is why GPU 0 fills up first: it receives every replica's output, computes the loss, holds the
# gradients and the optimizer state, and starts every replication (huggingface/transformers#279,
# facebookresearch/DPR#104, princeton-vl/RAFT#33). CPU devices share one memory and cannot show that
# imbalance. What they can show is how much gather brings to devices[0]. Computing the loss inside
# `forward`, the common advice, shrinks it to one number per replica:

# %%
with dpcourse.trace() as t:
    dp(x8)
    dp_with_loss(x8, y8)
logits, losses = t.steps("gather")
print(f"gathered onto {logits.device}: {logits.bytes_copied} bytes of outputs vs {losses.bytes_copied} bytes of losses")

# %% [markdown]
# Here 8 × 4 logits; a language model's logits are batch × sequence × vocabulary, gigabytes at a time. The
# price of that advice is the scalar vector above, with its reduction pitfall. You can also move the output
# elsewhere with `output_device` (lesson 07), or leave DataParallel for DDP, where every process keeps its own
# outputs, loss and optimizer state and nothing is gathered onto one device (lesson 10).


# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it. The checks compare your
# results with `dpcourse.gather`.
#
# ### Exercise: gather tensors
# Write `gather_tensors(outputs)`: one output tensor per replica, concatenated along dim 0. 0-d tensors (one loss
# per replica) become a vector, and the result has the first output's dtype.

# %% tags=["solution"]
def gather_tensors(outputs):
    """Concatenate the replicas' outputs on dim 0, as gather does on one device."""
    ### BEGIN SOLUTION
    first = outputs[0]
    pieces = [out.reshape(1) if out.dim() == 0 else out for out in outputs]
    return torch.cat([piece.to(first.dtype) for piece in pieces])
    ### END SOLUTION


# %%
exercises.check("gather_tensors", gather_tensors)

# %% [markdown]
# ### Exercise: gather nested outputs
# Write `gather_structure(outputs)`: each replica's output is a tensor (concatenate them on dim 0), `None`, or a
# dict, tuple, list or namedtuple of these. Rebuild the first output's structure, with the same types.

# %% tags=["solution"]
def gather_structure(outputs):
    """Gather one output per replica, recursing into dicts, tuples, lists and namedtuples."""
    ### BEGIN SOLUTION
    first = outputs[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return torch.cat(outputs)
    if isinstance(first, dict):
        return type(first)((key, gather_structure([out[key] for out in outputs])) for key in first)
    items = [gather_structure(same_position) for same_position in zip(*outputs)]
    return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)  # a namedtuple takes fields
    ### END SOLUTION


# %%
exercises.check("gather_structure", gather_structure)


# %% [markdown]
# ## Summary
# - Gather concatenates the replicas' outputs along `dim`, in replica order; only one-row-per-sample outputs
#   come back as the whole batch's output. The loss, and any averaging, is your code.
# - Replica 0's output decides: its type, its shape outside `dim`, its dtype; `None` there makes the result
#   `None`.
# - Dicts, tuples, lists and namedtuples keep their structure.
# - A 0-d output per replica becomes a vector with one entry per chunk, with a warning; one device returns a
#   0-d tensor.
# - The result lands on `output_device`, by default `devices[0]`.
#
# ## Exercises
# 1. A module returns `x.sum(0)`, of shape `(5,)`. Write `gathered_length(batch, n)`, the length of
#    DataParallel's output for a batch of `batch` rows of 5 features on `n` devices.
# 2. Write `PerSampleLoss(WithLoss)`, a loss-in-forward module whose gathered output can be reduced to exactly the
#    one-device loss, for any chunk sizes (hint: return one loss per sample).

# %% tags=["solution"]
def gathered_length(batch, n):
    ### BEGIN SOLUTION
    return 5 * len(torch.zeros(batch).chunk(n))  # one (5,) piece per chunk
    ### END SOLUTION


# %%
exercises.check("gathered_length", gathered_length)

# %% tags=["solution"]
class PerSampleLoss(WithLoss):
    def forward(self, x, y):
        ### BEGIN SOLUTION
        return nn.functional.cross_entropy(self.model(x), y, reduction="none")  # shape (rows,), not 0-d
        ### END SOLUTION


# %%
exercises.check("PerSampleLoss", PerSampleLoss)
