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
from pathlib import Path

import dpcourse
from dpcourse import examples, exercises, quiz

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

# %% tags=["reveals-answer"]
with quiz.reveal("11-review-five-rows-output"):
    devices = dpcourse.devices(4)
    model = examples.make_model().to(devices[0])
    oracle = examples.twin(model)
    x, y = examples.make_batch(10, device=devices[0])
    dp = dpcourse.DataParallel(model, devices=devices)
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


# %% [markdown]
# ## Write it yourself
# Each exercise needs two lessons at once. Write the function's body in place of its stub, then run the check
# cell below it.
#
# ### Exercise: the shape of a gathered scalar
# Write `scalar_output_shape(batch, n)`: the shape of `dp(x)`, as a tuple, when `x` has `batch` rows, `dp` runs
# on `n` devices, and the module returns `x.mean()`, a 0-d tensor (lessons 02 and 05).

# %% tags=["solution"]
def scalar_output_shape(batch, n):
    """The shape of the gathered output when every replica returns a 0-d tensor."""
    ### BEGIN SOLUTION
    if n == 1:
        return ()  # one device: the module itself runs, nothing is gathered
    size = -(-batch // n)  # torch.chunk's chunk size, ceil(batch / n)
    return (-(-batch // size),)  # one element per chunk, and there may be fewer chunks than devices
    ### END SOLUTION


# %%
exercises.check("scalar_output_shape", scalar_output_shape)

# %% [markdown]
# ### Exercise: what survives the replicas
# A module counts its forwards twice: `self.calls += 1` on an `int` attribute, and `self.forwards += 1` on a
# registered buffer. Write `after_forwards(k, n)`: the pair `(calls, forwards)` read on the model after `k`
# forwards on `n` devices (lessons 03 and 08).

# %% tags=["solution"]
def after_forwards(k, n):
    """The model's int counter and buffer counter after k forwards of DataParallel on n devices."""
    ### BEGIN SOLUTION
    calls = k if n == 1 else 0  # rebinding on a throwaway replica is lost; one device has no replicas
    forwards = k  # in place on replica 0's buffer, which is the model's own
    return calls, forwards
    ### END SOLUTION


# %%
exercises.check("after_forwards", after_forwards)
