# %% [markdown]
# # 11 · Review: the four steps, all together
#
# **After this lesson you will be able to explain**
# - what each of the four steps does in forward and in backward, without looking;
# - the classic pitfall of each step, and the fix;
# - where your answers are, and how to hand them to an instructor.

# %%
import csv
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

import dpcourse
from dpcourse import examples, quiz

# %% [markdown]
# ## Review quiz
# Each of these questions needs two or more lessons at once. Answer before you run anything.

# %%
quiz.ask_lesson("11_review")

# %% [markdown]
# And five questions from earlier lessons, one step each: scatter (02), replicate (03), backward (06),
# checkpoints (07) and DistributedDataParallel (10). Answering again is fine: every attempt is saved, and
# the instructor's export below still reports whether your first one was right.

# %%
quiz.ask("02-six-rows-four-devices")

# %%
quiz.ask("03-counter-lost")

# %%
quiz.ask("06-gradients-summed")

# %%
quiz.ask("07-state-dict-keys")

# %%
quiz.ask("10-ddp-averages")

# %% [markdown]
# One training step of the running example on 4 devices, step by step, next to the one-device oracle:

# %%
model = examples.make_model()
oracle = examples.twin(model)
x, y = examples.make_batch(10)
dp = dpcourse.DataParallel(model, devices=dpcourse.devices(4))
with dpcourse.trace() as t:
    output = dp(x)
    examples.loss_fn(output, y).backward()
examples.loss_fn(oracle(x), y).backward()
forwards = sorted(t.steps("forward"), key=lambda s: s.replica)
print("scatter:        chunks of", [s.shapes[0][0] for s in forwards], "rows")
print("replicate:     ", len(forwards), "replicas,", t.steps("replicate")[0].bytes_copied, "bytes copied for replicas 1-3")
print("parallel_apply: threads", [s.thread for s in forwards])
print("gather:         output", list(output.shape), "on", output.device)
print("backward:       .grad equals the oracle's:", examples.max_grad_difference(model, oracle) < 1e-6)

# %% [markdown]
# | step | forward | backward | classic pitfall | fix | lesson |
# |---|---|---|---|---|---|
# | **scatter** | `torch.chunk` along `dim`: chunks of ceil(B/n) rows, maybe fewer chunks than devices; containers walked into, other objects shared | the chunks' gradients concatenated on the input's device | arguments with different batch sizes: the last replicas are called without some of them ("missing argument") | give every scattered argument the same batch size | 02 |
# | **replicate** | a shallow copy of the model per used device, parameters copied by `Broadcast`, replica 0 on the originals, every forward | `ReduceAdd`: the copies' gradients **summed** into `.grad` on `devices[0]` | `self.counter += 1` in `forward` is lost; `next(self.parameters())` raises `StopIteration`; BatchNorm keeps chunk 0's statistics | in-place buffer updates; take devices from tensors; SyncBatchNorm with DDP | 03, 06 |
# | **parallel_apply** | replica i on chunk i in its own thread (inline for one replica), grad mode and autocast passed on | each replica's backward, through autograd | errors arrive as "Caught X in replica i on device d"; the [GIL](00_start_here.ipynb#Glossary) limits the speed-up | read the replica number against the chunk sizes; DDP for speed | 04, 09 |
# | **gather** | outputs concatenated on `output_device` (default `devices[0]`); a 0-d output per replica becomes a vector | the output's gradient split back with the same chunk sizes | `.mean()` of per-replica mean losses is not the batch mean when chunks are uneven; device 0 fills up | compute the loss on the gathered output (or return per-sample losses) | 05, 06 |
#
# The source behind every row: `torch/nn/parallel/scatter_gather.py`, `replicate.py`, `parallel_apply.py` and
# `_functions.py` (Scatter, Gather, Broadcast, ReduceAddCoalesced), and their dpcourse twins of the same names.

# %% [markdown]
# ## Your progress
# Your answers from every lesson, read from your progress file (`~/.dpcourse/progress.json`, or the file named
# by `DPCOURSE_PROGRESS`). Press *Refresh* after answering the questions above.

# %% tags=["nbval-ignore-output"]
quiz.ProgressSummary()

# %% [markdown]
# **For an instructor.** `quiz.export_csv(path)` writes one row per question of the course: attempts, whether
# the *first* attempt was right, the last answer and its time. Each learner runs it and sends the file; to
# collect files you already have, pass `progress=quiz.Progress("their-progress.json")`. The cell below
# exports *your* answers into a temporary folder (nothing is written into the course) and shows the first
# rows:

# %% tags=["nbval-ignore-output"]
with tempfile.TemporaryDirectory() as folder:
    exported = quiz.export_csv(Path(folder) / "dpcourse-progress.csv")
    with exported.open(newline="", encoding="utf-8") as file:
        rows = list(csv.reader(file))
for row in rows[:4]:
    print(row)
print("...", len(rows) - 1, "questions in all")

# %% [markdown]
# ## Summary
# - Forward: scatter cuts the batch, replicate copies the model, parallel_apply runs the copies in threads,
#   gather concatenates the outputs on one device.
# - Backward mirrors it: the output gradient is split back, each replica runs its backward, and the copies'
#   gradients are summed into the one real model, which is why DataParallel matches one device.
# - Every pitfall comes from one of those sentences: chunking, shallow copies rebuilt each step, threads, or
#   concatenation onto device 0.
#
# ## Exercises
# 1. Write `chunk_sizes(batch, n)` without torch: the rows each replica gets.
# 2. Write `scalar_output_shape(batch, n)`: the shape of `dp(x)` when the module returns a 0-d tensor.
# 3. Write `after_forwards(k, n)`: the values of an `int` counter and of a registered buffer, each incremented
#    by 1 in `forward`, after k forwards on n devices, as a pair.

# %% tags=["solution"]
def chunk_sizes(batch, n):
    size = -(-batch // n)  # ceil(batch / n)
    return [min(size, batch - start) for start in range(0, batch, size)] if batch else [0] * n


# %%
for batch in range(0, 17):
    for n in range(1, 6):
        expected = [len(chunk) for chunk in dpcourse.scatter(torch.zeros(batch), dpcourse.devices(n))]
        assert chunk_sizes(batch, n) == expected, (batch, n, chunk_sizes(batch, n), expected)
print("exercise 1: chunk_sizes agrees with scatter for batches 0-16 on 1-5 devices")

# %% tags=["solution"]
def scalar_output_shape(batch, n):
    return () if n == 1 else (len(chunk_sizes(batch, n)),)  # one device: no gather, no vector


# %%
class MeanOf(nn.Module):
    def forward(self, x):
        return x.mean()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the scalar warning of lesson 05
    for batch, n in [(10, 4), (6, 4), (9, 4), (8, 1), (3, 2)]:
        actual = tuple(dpcourse.DataParallel(MeanOf(), devices=dpcourse.devices(n))(torch.ones(batch, 2)).shape)
        assert scalar_output_shape(batch, n) == actual, (batch, n, actual)
print("exercise 2: scalar_output_shape agrees with DataParallel in every case")

# %% tags=["solution"]
def after_forwards(k, n):
    counter = k if n == 1 else 0  # rebinding on a throwaway replica is lost; one device has no replicas
    buffer = k  # in place on replica 0's buffer, which is the model's own
    return counter, buffer


# %%
class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.register_buffer("forwards", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls += 1
        self.forwards += 1
        return x


for k, n in [(3, 1), (3, 2), (2, 4)]:
    counts = Counts()
    dp_counts = dpcourse.DataParallel(counts, devices=dpcourse.devices(n))
    for _ in range(k):
        dp_counts(torch.zeros(8, 1))
    assert after_forwards(k, n) == (counts.calls, counts.forwards.item()), (k, n, counts.calls, counts.forwards)
print("exercise 3: after_forwards agrees with DataParallel in every case")
