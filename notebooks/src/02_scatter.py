# %% [markdown]
# # 02 · Scatter: splitting the batch
#
# **After this lesson you will be able to explain**
# - how many rows each device gets, and whether every device always gets some;
# - what happens to tuples, lists, dicts and non-tensor arguments on the way to the replicas;
# - what happens when positional and keyword arguments split into different numbers of chunks;
# - where the gradient of a scattered input goes in backward.
#
# Scatter is step 1 of every DataParallel forward (`dpcourse/scatter_gather.py`, mirroring
# `torch/nn/parallel/scatter_gather.py`).

# %%
import torch
from IPython.display import display

import dpcourse
from dpcourse import examples, exercises, quiz, viz

devices = dpcourse.devices(4)
x, y = examples.make_batch(10, device=devices[0])  # the batch starts where the model will be: devices[0]

# %% [markdown]
# ## Splitting a batch: the torch.chunk rule
# Scatter splits every tensor along `dim` (default 0) with `torch.chunk(len(devices), dim)`. How does
# `torch.chunk` share out rows that do not divide evenly? Predict first:

# %%
quiz.ask("02-ten-rows-four-devices")

# %% tags=["reveals-answer"]
with quiz.reveal("02-ten-rows-four-devices"):
    chunks = dpcourse.scatter(x, devices)
    print("chunk shapes:", [list(c.shape) for c in chunks])
    display(viz.chunk_split(10, 4))

# %%
print("chunk 0 shares the input's memory:", chunks[0].data_ptr() == x.data_ptr())

# %% [markdown]
# ## How many replicas run
# With more rows than devices, does every device get a chunk?

# %%
quiz.ask("02-six-rows-four-devices")

# %% tags=["reveals-answer"]
with quiz.reveal("02-six-rows-four-devices"):
    for batch in (10, 9, 6, 5, 3):
        sizes = [c.shape[0] for c in dpcourse.scatter(torch.zeros(batch, 8), devices)]
        print(f"{batch:2d} rows on 4 devices -> chunks {sizes}: {len(sizes)} replicas run")
    display(viz.chunk_split(6, 4))

# %% [markdown]
# ## Nested inputs: tuples, lists, dicts, namedtuples
# Scatter walks into tuples, lists, dicts and namedtuples and splits each tensor inside. A tensor at the top
# gives a *tuple* of chunks; any container gives a *list* with one entry per device, each entry of the
# container's type.

# %%
from collections import namedtuple

Batch = namedtuple("Batch", "features labels")
per_device = dpcourse.scatter(Batch(x, y), devices)
print(type(per_device).__name__, "of", len(per_device), "entries")
print(per_device[3])

# %% [markdown]
# What if two tensors in one call have different batch sizes? Predict first:

# %%
quiz.ask("02-mismatched-batches")

# %% [markdown]
# Scatter a tensor of 10 rows and one of 3 rows together, and look at what each device gets:

# %% tags=["reveals-answer"]
with quiz.reveal("02-mismatched-batches"):
    per_device = dpcourse.scatter((torch.zeros(10, 2), torch.zeros(3, 2)), devices)
    print(len(per_device), "entries:", [[list(t.shape) for t in entry] for entry in per_device])

# %%
quiz.ask("02-lstm-hidden-state")

# %% tags=["reveals-answer"]
with quiz.reveal("02-lstm-hidden-state"):
    h0 = torch.zeros(2, 4, 2)  # (num_layers, batch, hidden), as in the question
    print("h0 chunks on 2 devices:", [list(chunk.shape) for chunk in dpcourse.scatter(h0, devices[:2])])

# %% [markdown]
# ## Non-tensors are shared by reference
# Anything that is not a tensor or one of those containers (numbers, strings, `None`, sets, dataclasses, your
# own objects) is handed to every replica **as the same object**. A tensor inside a dataclass is not split.
# A list, on the other hand, is a container: each device gets a *new* list holding the same elements.

# %%
import dataclasses


@dataclasses.dataclass
class Settings:
    temperature: float
    weights: torch.Tensor


settings, tags = Settings(0.5, torch.ones(10)), ["cat", "dog"]
per_device = dpcourse.scatter((x, settings, tags), devices)
print("the same Settings object on every device:", all(entry[1] is settings for entry in per_device))
print("its tensor was not split:", [list(entry[1].weights.shape) for entry in per_device])
print("a new list per device:", [entry[2] is tags for entry in per_device], "| same strings:",
      all(entry[2][0] is tags[0] for entry in per_device))

# %% [markdown]
# ## Keyword arguments and padding
# `scatter_kwargs` scatters positional and keyword arguments separately. What if the two sides split into
# different numbers of entries?

# %%
quiz.ask("02-keyword-missing-argument")

# %% tags=["reveals-answer"]
with quiz.reveal("02-keyword-missing-argument"):
    inputs, kwargs = dpcourse.scatter_kwargs((torch.zeros(8, 2),), {"mask": torch.zeros(2, 2)}, devices)
    for i, (args, kw) in enumerate(zip(inputs, kwargs)):
        print(f"replica {i}: args {[list(a.shape) for a in args]}, kwargs {list(kw)}")
    display(viz.chunk_split(8, 4, kwargs_batches={"mask": 2}))

# %% [markdown]
# ## Scatter in backward
# Scatter is an autograd Function: in backward, each chunk's gradient travels back and the pieces are
# concatenated on the input's device (`Scatter.backward` = `Gather`).

# %%
x_leaf = x.clone().requires_grad_()
chunks = dpcourse.scatter(x_leaf, devices)
sum((i + 1) * c.sum() for i, c in enumerate(chunks)).backward()
print("d/dx, first column:", x_leaf.grad[:, 0].tolist())

# %% [markdown]
# Rows 0–2 got gradient 1, rows 3–5 got 2, rows 6–8 got 3 and row 9 got 4: each chunk's gradient landed
# back in exactly the rows it came from.


# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: chunk sizes
# Write `chunk_sizes(batch, n)`: how many rows each replica gets when `batch` rows are scattered over `n`
# devices, with the `torch.chunk` rule, computed with integer arithmetic (no tensor).

# %% tags=["solution"]
def chunk_sizes(batch, n):
    """How many rows each replica gets when `batch` rows are scattered over `n` devices."""
    ### BEGIN SOLUTION
    size = -(-batch // n)  # ceil(batch / n) rows per chunk, the last chunk shorter
    return [min(size, batch - start) for start in range(0, batch, size)]
    ### END SOLUTION


# %%
exercises.check("chunk_sizes", chunk_sizes)

# %% [markdown]
# ### Exercise: chunks that are views
# Before scatter copies the chunks to their devices, `torch.chunk` cuts the batch into views of its memory: no
# copy yet. Write `scatter_rows(x, n)`: the chunks `x.chunk(n)` would give, made by slicing `x`'s rows (without
# calling `chunk`).

# %% tags=["solution"]
def scatter_rows(x, n):
    """The rows of `x` cut into the torch.chunk pieces, each a view (a slice) of `x`."""
    ### BEGIN SOLUTION
    size = -(-len(x) // n)
    return [x[start:start + size] for start in range(0, len(x), size)]
    ### END SOLUTION


# %%
exercises.check("scatter_rows", scatter_rows)


# %% [markdown]
# ## Summary
# - Scatter uses `torch.chunk`: chunks of `ceil(B / n)` rows, possibly **fewer chunks than devices**.
# - Containers are walked into and zipped (the shortest leaf wins); other objects are shared by reference.
# - Unequal positional/keyword batch sizes leave some replicas without arguments.
# - In backward the chunks' gradients are concatenated back onto the input's device.
#
# ## Exercises
# 1. For which batch sizes from 1 to 16 do all 4 devices get a chunk? Write `all_devices_busy(batch, n)`, then run
#    the check.
# 2. Scatter a dict `{"x": x, "lengths": torch.arange(10)}` over 3 devices: write `scatter_dict(inputs, n)`, which
#    returns the entries, one per replica. The check looks at whether every entry keeps the dict's keys.

# %% tags=["solution"]
def all_devices_busy(batch, n):
    ### BEGIN SOLUTION
    return len(dpcourse.scatter(torch.zeros(batch), dpcourse.devices(n))) == n
    ### END SOLUTION


# %%
exercises.check("all_devices_busy", all_devices_busy)

# %% tags=["solution"]
def scatter_dict(inputs, n):
    ### BEGIN SOLUTION
    return dpcourse.scatter(inputs, dpcourse.devices(n))
    ### END SOLUTION


# %%
exercises.check("scatter_dict", scatter_dict)
