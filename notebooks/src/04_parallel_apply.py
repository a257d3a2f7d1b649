# %% [markdown]
# # 04 · parallel_apply: every replica in its own thread
#
# **After this lesson you will be able to explain**
# - which thread runs each replica, and when no extra thread is used at all;
# - why `torch.no_grad()` and `torch.autocast` have to be passed into those threads, and what torch passes;
# - how an exception inside one replica reaches you, and why `next(self.parameters())` fails there;
# - why Python threads still help, and where they stop helping.
#
# parallel_apply is step 3 of every forward (`dpcourse/parallel_apply.py`, mirroring
# `torch/nn/parallel/parallel_apply.py`): call `replicas[i](*inputs[i])` for every i, all at once.

# %%
import threading

import torch
from torch import nn

import dpcourse
from dpcourse import examples, quiz

devices = dpcourse.devices(3)
model = examples.make_model()
x, y = examples.make_batch(10)
dp = dpcourse.DataParallel(model, devices=devices)

# %% [markdown]
# ## One thread per replica
# DataParallel is a single Python process. Where do the replicas run?

# %%
quiz.ask("04-threads")

# %% [markdown]
# A trace records the thread each replica's forward ran in. With 10 rows on 3 devices, three replicas run in
# three worker threads; with a single row there is one chunk, so one replica, and parallel_apply calls it
# inline in the calling thread: no thread is started (torch does the same, `if len(modules) > 1`).

# %%
for batch in (10, 1):
    with dpcourse.trace() as t:
        dp(x[:batch])
    runs = sorted((s.replica, s.thread, s.shapes[0]) for s in t.steps("forward"))
    print(f"batch of {batch:2d}:", ", ".join(f"replica {i} ran {shape} in {thread}" for i, thread, shape in runs))
print("this notebook's code runs in", threading.current_thread().name)

# %% [markdown]
# A forward hook registered on your model is shared by every replica (the hook dictionary travels with the
# shallow copy, lesson 03). How often does it run?

# %%
quiz.ask("04-hook-count")

# %%
calls = []


def note_call(module, args, output):
    calls.append((threading.current_thread(), len(args[0])))


hook = model.register_forward_hook(note_call)
dp4 = dpcourse.DataParallel(model, devices=dpcourse.devices(4))
dp4(x[:8])
first_forward, calls = calls, []
dp4(x[:8])
hook.remove()
print("hook calls in one forward:", len(first_forward), "| rows per call:", [n for _, n in first_forward])
print("threads:", sorted(thread.name for thread, _ in first_forward))
print("new thread objects in the next forward:", not {t for t, _ in first_forward} & {t for t, _ in calls})

# %% [markdown]
# The last line shows what torch's `parallel_apply` does too: every forward starts fresh `threading.Thread`s,
# one per replica, and joins them all before it returns, so no thread outlives the call. That is what makes a
# `forward` that itself calls DataParallel work (it just starts threads of its own), and what lets a forward
# interrupted with Ctrl-C leave nothing stuck behind for the next one; the price is one thread start per replica
# per forward. One dpcourse addition, since torch never runs replicas on a CPU: CPU replicas share
# the caller's intra-op threads (`torch.get_num_threads()`) equally, so 2 replicas on 2 cores do not run 4 busy
# threads.
#
# Inside one replica, the usual PyTorch rule holds: every operand of an operation must be on the replica's
# device, so a tensor made inside `forward` belongs on `x.device`. The copies *between* devices are
# DataParallel's own work, done by the other three steps. A trace counts them:

# %%
with dpcourse.trace() as t:
    examples.loss_fn(dp(x), y).backward()
parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
for step in ("scatter", "replicate", "gather", "reduce-add"):
    print(f"{step:10s} copied {sum(s.bytes_copied for s in t.steps(step)):5d} bytes")
print("(the model's parameters are", parameter_bytes, "bytes)")

# %% [markdown]
# Replicate copies the parameters for replicas 1 and 2 (replica 0 uses the originals), gather copies the
# outputs into one new tensor, and reduce-add brings the gradients of replicas 1 and 2 back. Scatter copies
# nothing here because CPU chunks stay views of `x`; on GPUs, chunks 1 and 2 would be copied to their GPU
# (lesson 02). CPU devices cannot show the error you get on GPUs when a tensor inside `forward` sits on the
# wrong device: all CPU memory is one device.

# %% [markdown]
# ## Grad mode and autocast in threads
# `torch.no_grad()` and `torch.autocast` are **thread-local**: they only affect the thread that entered
# them. A new thread starts with the defaults, whatever its creator was doing:

# %%
seen = {}
with torch.no_grad():
    worker = threading.Thread(target=lambda: seen.update(grad_enabled=torch.is_grad_enabled()))
    worker.start()
    worker.join()
    print("inside torch.no_grad(), the caller: grad enabled =", torch.is_grad_enabled())
print("a thread started there:            grad enabled =", seen["grad_enabled"])

# %% [markdown]
# So parallel_apply reads the caller's grad mode and autocast state and switches them on again inside each
# replica's thread. A probe module records what each replica sees:

# %%
class Probe(nn.Module):
    """A Linear layer that notes, in each replica, its thread's grad mode and the dtype the layer computed in."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.seen = []

    def forward(self, x):
        out = self.linear(x)
        self.seen.append((threading.current_thread().name, torch.is_grad_enabled(), out.dtype))
        return out


probe = Probe()
probe_dp = dpcourse.DataParallel(probe, devices=devices)
with torch.no_grad():
    probe_dp(x)
print("under no_grad:                     ", sorted(probe.seen))
probe.seen.clear()
with torch.autocast("cpu", dtype=torch.float16):
    probe_dp(x)
print("under autocast(dtype=torch.float16):", sorted(probe.seen))

# %% [markdown]
# Every replica computed in float16, as the caller asked. torch forwards less: its worker enters
# `torch.amp.autocast(device_type, enabled=autocast_enabled)`, the **flag only**
# (`torch/nn/parallel/parallel_apply.py`, `_worker`). The dtype then falls back to the thread's default,
# bfloat16 on the CPU and float16 on CUDA. Here is what a fresh thread does when it is given only the flag:

# %%
def with_the_flag_only():
    with torch.autocast("cpu", enabled=True):  # what torch's worker does: the flag, not the dtype
        seen["dtype"] = probe.linear(x).dtype


with torch.autocast("cpu", dtype=torch.float16):
    worker = threading.Thread(target=with_the_flag_only)
    worker.start()
    worker.join()
print("asked for float16; a thread given only the flag computed in", seen["dtype"])

# %% [markdown]
# On GPUs the same gap turns `autocast(dtype=torch.bfloat16)` into float16 inside torch's replicas, but only
# with 2+ replicas: a single replica runs in the caller's thread and keeps bfloat16. That follows from the
# source; it was not run on a GPU here. dpcourse forwards the flag and the dtype (its `parallel_apply`
# docstring lists this difference).

# %% [markdown]
# ## When a replica fails
# An exception in a worker thread does not reach you by itself: parallel_apply catches it in the thread and
# raises it again in yours. Predict what you see:

# %%
quiz.ask("04-error-message")

# %%
def show(error, last=1):
    """Print an exception the way a traceback ends: type and first two lines, then its last lines."""
    lines = str(error).splitlines()
    print(f"{type(error).__name__}: {lines[0]}", lines[1], "  ...", *lines[-last:], sep="\n")


class Picky(nn.Module):
    def forward(self, x):
        if (x < 0).any():
            raise ValueError(f"a negative value in this chunk of {len(x)} rows")
        return x


values = torch.ones(6, 1)
values[2] = values[5] = -1.0  # 6 rows on 3 devices: chunks of 2, so rows 2 and 5 are in replicas 1 and 2
try:
    dpcourse.DataParallel(Picky(), devices=devices)(values)
except ValueError as error:
    show(error)

# %% [markdown]
# The same type (`ValueError`), the replica and its device, then the original traceback, whose last line is
# your own message. Two replicas failed, but only the **lowest-numbered** failure is raised; replica 2's error
# is dropped. torch prints a GPU's index ("on device 1"); dpcourse prints `cpu` for a CPU device.
#
# Problems with the data or the model surface like this, at the first forward that meets them. A
# DataParallel run that never starts and prints nothing is a different problem: such hangs come from the GPU
# communication layer (peer-to-peer copies, NCCL, drivers), not from DataParallel's handling of the data
# (pytorch/pytorch#4241, #10681, #52142, where `NCCL_P2P_DISABLE=1` was the workaround).
#
# A `KeyError` keeps its type too, and its multi-line message stays readable (a plain `KeyError` would print
# it as one quoted string with `\n` in it):

# %%
class ScaleBySize(nn.Module):
    scales = {3: 1.0, 2: 0.5}  # written for the chunk sizes someone expected

    def forward(self, x):
        return x * self.scales[len(x)]


try:
    dpcourse.DataParallel(ScaleBySize(), devices=dpcourse.devices(4))(torch.ones(10, 1))  # chunks 3, 3, 3, 1
except KeyError as error:
    show(error)

# %% [markdown]
# The best-known failure of all. Older code often finds the model's device with `next(self.parameters())`.
# Replicas own no `Parameter`s (lesson 03), so in *every* replica that iterator is empty and `next` raises
# `StopIteration` (pytorch/pytorch#40457, since torch 1.5):

# %%
class FindsItsDevice(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x):
        device = next(self.parameters()).device
        return self.linear(x.to(device))


print("alone, it works:", list(FindsItsDevice()(x).shape))
try:
    dpcourse.DataParallel(FindsItsDevice(), devices=dpcourse.devices(2))(x)
except StopIteration as error:
    show(error, last=3)

# %% [markdown]
# Replica 0 fails as well, so replica 0 is reported. Finding the device in a way that works is exercise 1.

# %% [markdown]
# ## Threads and the GIL
# Python threads share one interpreter, and its global lock (the GIL) lets only one thread run Python code
# at a time. The replicas' `forward` methods therefore take turns for every Python line; what overlaps is
# the work inside torch operations, which release the GIL while their C++ code runs (and on GPUs the kernels
# run asynchronously anyway). A model made of many small layers is mostly Python, and gains
# little or nothing from more replicas: fairseq measured "negative speedup" from DataParallel for this reason
# (facebookresearch/fairseq#34), and the DDP tutorial names "GIL contention across threads" first among the
# reasons DataParallel is slower than DistributedDataParallel. Lesson 09 measures it on this machine.
#
# ## Summary
# - parallel_apply runs replica i in its own thread (`replica-i` in dpcourse); a single replica runs inline in
#   the caller's thread. Hooks on your model run once per replica, in those threads.
# - Grad mode and autocast are thread-local, so parallel_apply passes them on; torch passes autocast's flag
#   but not its dtype.
# - A failing replica is re-raised in your thread as the same exception type, "Caught X in replica i on
#   device d." plus the original traceback; the lowest-numbered failure wins.
# - `next(self.parameters())` inside `forward` raises `StopIteration` under DataParallel: replicas own no
#   Parameters.
# - The threads overlap only where torch releases the GIL.
#
# ## Exercises
# 1. Repair `FindsItsDevice` so that it runs under DataParallel on 2 devices and gives the same output as
#    the module alone (hint: which tensors does a replica really hold?).
# 2. Write `reported_replica(batch, n, bad_rows)`: the replica number in the error message when the rows
#    `bad_rows` of a batch of `batch` rows on `n` devices make the module raise. The check compares it with
#    real DataParallel errors.

# %% tags=["solution"]
class UsesItsWeightsDevice(FindsItsDevice):
    def forward(self, x):
        return self.linear(x.to(self.linear.weight.device))  # the replica's own copy of the weight


# %%
fixed = UsesItsWeightsDevice()
assert torch.equal(dpcourse.DataParallel(fixed, devices=dpcourse.devices(2))(x), fixed(x))
print("exercise 1: the same output with and without DataParallel")

# %% tags=["solution"]
def reported_replica(batch, n, bad_rows):
    rows_per_chunk = -(-batch // n)  # torch.chunk: chunks of ceil(batch / n) rows
    return min(row // rows_per_chunk for row in bad_rows)


# %%
for batch, n, bad_rows in [(10, 4, [9]), (10, 4, [8, 5]), (6, 4, [5]), (7, 3, [6, 3])]:
    values = torch.ones(batch, 1)
    values[bad_rows] = -1.0
    actual = None
    try:
        dpcourse.DataParallel(Picky(), devices=dpcourse.devices(n))(values)
    except ValueError as error:
        actual = int(str(error).split("in replica ")[1].split()[0])
    assert reported_replica(batch, n, bad_rows) == actual, (batch, n, bad_rows, actual)
print("exercise 2: the predicted replica matches the error message in every case")
