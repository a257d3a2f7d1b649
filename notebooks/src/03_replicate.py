# %% [markdown]
# # 03 · Replicate: one copy of the model per device, every step
#
# **After this lesson you will be able to explain**
# - why a replica is a *shallow* copy, and what `replica.parameters()` holds in training;
# - which replicas share tensors with your model, and which hold copies;
# - what becomes of `self.counter += 1` and of `self.log.append(...)` in `forward`;
# - where BatchNorm's running statistics come from under DataParallel.
#
# Replicate is step 2 of every forward (`dpcourse/replicate.py`, mirroring `torch/nn/parallel/replicate.py`).

# %%
import torch

import dpcourse
from dpcourse import examples, exercises, quiz, viz

devices = dpcourse.devices(3)

# %% [markdown]
# ## A replica is a shallow copy
# For each submodule and device, `Module._replicate_for_data_parallel` (`torch/nn/modules/module.py`) makes
# a new object **without calling `__init__`** and copies its `__dict__` — the dict itself, not what it
# holds. Then replicate wires in the copied parameters and buffers. As DataParallel does, we give it a model
# that is already on `devices[0]`.

# %%
model = examples.CountingNet().to(devices[0])
replicas = dpcourse.replicate(model, devices)
print(len(replicas), "replicas; marked as replicas:", [r._is_replica for r in replicas])

# %% [markdown]
# ## A replica's parameters
# In training, with grad mode on (the default), the copies come out of `Broadcast`, an autograd Function.
# What does a replica's `self.parameters()` yield then? Predict:

# %%
quiz.ask("03-parameters-empty")

# %% tags=["reveals-answer"]
with quiz.reveal("03-parameters-empty"):
    r1 = replicas[1]
    print("replica.parameters():", list(r1.parameters()))
    print("replica.fc.weight is a leaf:", r1.fc.weight.is_leaf, "| grad_fn:", type(r1.fc.weight.grad_fn).__name__)

# %% [markdown]
# ## Which replicas share the original's tensors
# `replicate` gives every replica the weights it computes with. Copies, or your model's own memory? Predict:

# %%
quiz.ask("03-replica-zero-shares")

# %% tags=["reveals-answer"]
def same_memory(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


with quiz.reveal("03-replica-zero-shares"):
    for i, replica in enumerate(replicas):
        print(
            f"replica {i}: weight shares memory {same_memory(replica.fc.weight, model.fc.weight)!s:5} | "
            f"running_mean is the original {replica.bn.running_mean is model.bn.running_mean}"
        )

# %% [markdown]
# Under `torch.no_grad()`, as in evaluation, DataParallel replicates without autograd
# (`DataParallel.replicate` passes `detach=not torch.is_grad_enabled()`), and the first device then gets
# your model's own tensors back: replica 0 holds the original `Parameter`s, registered as parameters again,
# while the other replicas still hold plain copies:

# %%
with torch.no_grad():
    detached = dpcourse.DataParallel(model, devices=devices).replicate(model, devices)
print("under no_grad, parameters per replica:", [len(list(r.parameters())) for r in detached])
print("replica 0's weight is the original Parameter:", detached[0].fc.weight is model.fc.weight)

# %% [markdown]
# ## Plain attributes changed in forward
# A plain attribute is copied by reference along with `__dict__`. What happens when `forward` changes one?
# `CountingNet` does `self.calls += 1` on an int:

# %%
quiz.ask("03-counter-lost")

# %% tags=["reveals-answer"]
with quiz.reveal("03-counter-lost"):
    model = examples.CountingNet().to(devices[0])
    x = torch.randn(8, 3, device=devices[0])
    dpcourse.DataParallel(model, devices=devices[:2])(x)
    print("with 2 devices: calls =", model.calls)
    dpcourse.DataParallel(model, devices=devices[:1])(x)
    print("with 1 device:  calls =", model.calls)

# %%
quiz.ask("03-list-shared")

# %% tags=["reveals-answer"]
with quiz.reveal("03-list-shared"):
    print("seen =", model.seen)

# %% [markdown]
# The whole picture, for every entry of `CountingNet`: what each replica holds, and whether it is your model's
# own object, its memory, or a copy:

# %%
viz.replicate_map(examples.CountingNet().to(devices[0]), devices)

# %% [markdown]
# ## BatchNorm under DataParallel
# Two consequences for BatchNorm in training mode: each replica normalises with the statistics of **its own
# chunk**, and only replica 0's update of `running_mean`/`running_var` reaches your model (it works on your
# model's own buffers; the other replicas update copies that are thrown away).

# %%
model = examples.make_model(batchnorm=True).to(devices[0])
x, _ = examples.make_batch(12, device=devices[0])
dpcourse.DataParallel(model, devices=devices)(x)

chunk0_only = examples.make_model(batchnorm=True).to(devices[0])  # the same model, on chunk 0 alone
chunk0_only(x[:4])
full_batch = examples.make_model(batchnorm=True).to(devices[0])
full_batch(x)
bn, bn0, bn_full = model[1], chunk0_only[1], full_batch[1]
print("running_mean equals the update from chunk 0 alone:", torch.allclose(bn.running_mean, bn0.running_mean))
print("running_mean equals the full-batch update:       ", torch.allclose(bn.running_mean, bn_full.running_mean))
print("num_batches_tracked:", bn.num_batches_tracked.item())

# %% [markdown]
# In practice the running statistics from one chunk are a noisier estimate but rarely hurt convergence
# (pytorch/pytorch#1051); the per-chunk *batch* statistics matter more with small chunks. The fix is
# `SyncBatchNorm`, but it needs several processes, not a wrapper: in training it synchronises only when a
# [process group](00_start_here.ipynb#Glossary) with more than one [rank](00_start_here.ipynb#Glossary) is
# initialised, and then only GPU-like inputs (CUDA, XPU, HPU);
# otherwise it computes what BatchNorm does (`torch/nn/modules/batchnorm.py:837-863`). DataParallel is one
# process with no process group, so its replicas never synchronise; DDP runs one process per rank (lesson 10).

# %% [markdown]
# ## Replicated on every forward
# Replicas are rebuilt from your model at every call: that is how they pick up the optimizer's latest
# weights, and also why replication is a cost paid on every step (lesson 09).

# %%
dp = dpcourse.DataParallel(examples.make_model().to(devices[0]), devices=devices[:2])
x, _ = examples.make_batch(8, device=devices[0])
with dpcourse.trace() as t:
    dp(x)
    dp(x)
print("replicate steps recorded in two forwards:", len(t.steps("replicate")))
print("bytes copied per replicate:", t.steps("replicate")[0].bytes_copied)

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: replica 0 aliasing
# Write `replicate_parameters(params, n)`: `n` lists of tensors, one per replica. List 0 holds the original
# tensors themselves (replica 0 shares your model's memory); lists 1 to n-1 hold fresh copies that stay
# connected to the originals, so that their gradients can flow back.

# %% tags=["solution"]
def replicate_parameters(params, n):
    """One list of tensors per replica: the originals for replica 0, connected copies for the others."""
    ### BEGIN SOLUTION
    return [list(params)] + [[p.clone() for p in params] for _ in range(1, n)]
    ### END SOLUTION


# %%
exercises.check("replicate_parameters", replicate_parameters)

# %% [markdown]
# ### Exercise: bytes replicated
# Write `replicate_bytes(model, n)`: how many bytes replicating `model` onto `n` devices copies, counting its
# parameters and its buffers.

# %% tags=["solution"]
def replicate_bytes(model, n):
    """Bytes one replicate copies: every parameter and buffer, once per replica after the first."""
    ### BEGIN SOLUTION
    tensors = list(model.parameters()) + list(model.buffers())
    return (n - 1) * sum(t.numel() * t.element_size() for t in tensors)
    ### END SOLUTION


# %%
exercises.check("replicate_bytes", replicate_bytes)


# %% [markdown]
# ## Summary
# - A replica is a shallow copy: same plain attributes, parameters swapped for non-leaf copies on its device.
# - In training `replica.parameters()` is empty (under `no_grad`, replica 0 holds the originals); replica 0
#   shares your model's parameter memory and buffers.
# - Rebinding an attribute in `forward` is lost with 2+ devices; in-place buffer updates by replica 0 persist.
# - BatchNorm: per-chunk batch statistics, running statistics from chunk 0 only.
# - Replication happens on every forward.
#
# ## Exercises
# 1. Write `Counter`, a module whose forward returns `x` and adds one to `self.calls`, so that the count survives
#    DataParallel on 2 devices (hint: a buffer, updated in place).
# 2. How many bytes does replicating the course model onto 4 devices copy? Write `traced_replicate_bytes(model, n)`,
#    which reads it from a trace.

# %% tags=["solution"]
class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        ### BEGIN SOLUTION
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        self.calls += 1  # in place on a buffer: replica 0 shares it with the original
        ### END SOLUTION
        return x


# %%
exercises.check("Counter", Counter)

# %% tags=["solution"]
def traced_replicate_bytes(model, n):
    ### BEGIN SOLUTION
    with dpcourse.trace() as t:
        dpcourse.replicate(model, dpcourse.devices(n))
    return t.steps("replicate")[0].bytes_copied
    ### END SOLUTION


# %%
exercises.check("traced_replicate_bytes", traced_replicate_bytes)
