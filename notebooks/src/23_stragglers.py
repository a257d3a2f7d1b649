# %% [markdown]
# # 23 · Stragglers: finding the slow rank
#
# **After this lesson you will be able to explain**
# - why one slow [rank](00_start_here.ipynb#Glossary) makes every rank's step slower under DDP, by the whole delay;
# - where the other ranks spend that time: waiting inside `loss.backward()`, in the gradients'
#   [all-reduce](00_start_here.ipynb#Glossary), which a profile of one rank blames;
# - why per-rank durations cannot always name the slow rank, and when they cannot at all (a delay inside the
#   backward, traceopt-ai/traceml#252);
# - how each rank's clock, read as it reaches a collective and gathered with `dist.all_gather_object`, names it:
#   the rank that arrives last;
# - why such a probe is a collective itself, and where the wait goes then.
#
# A [straggler](00_start_here.ipynb#Glossary) is a rank that is slower than the others: a data loader that stalls
# on one machine, a GPU that runs hot and clocks down, a noisy neighbour. Everything below runs on 3 real ranks
# started from this notebook, with DDP on gloo and the course's model of lessons 18 to 21 (8 → 15 → 15 → 4), whose
# step is tiny (the first table below measures it). The slow rank is planted: rank 2 calls `time.sleep(0.15)`, a delay far above
# the model's own work and above the jitter of a busy machine, and a sleep costs no CPU, so the other ranks run
# as they would.

# %%
from IPython.display import display

from dpcourse import exercises, quiz
from dpcourse.faults import straggler_reading, straggler_report, stragglers
from dpcourse.viz.stragglers import straggler_timeline

print(f"{stragglers.WORLD_SIZE} ranks, rank {stragglers.SLOW_RANK} sleeps "
      f"{stragglers.DELAY * 1e3:.0f} ms per step; parts of {stragglers.STEPS} steps: {', '.join(stragglers.PARTS)}")

# %% [markdown]
# ## One rank sleeps
# `stragglers.observe` (`dpcourse/faults/stragglers.py`) starts the ranks once and trains with DDP and SGD in four
# parts of 4 steps, a barrier between them: `even` with no delay, then `forward`, where rank 2 sleeps at the
# start of each forward (a forward pre-hook), then two more parts used further down. Every rank reads
# `time.perf_counter()` around each phase of each step:
#
# ```python
# optimizer.zero_grad()
# loss = F.mse_loss(model(x), y)   # rank 2: time.sleep(0.15) first, in part "forward"
# loss.backward()                  # DDP all-reduces the gradients in here
# optimizer.step()
# ```
#
# and DDP's [comm hook](00_start_here.ipynb#Glossary) notes when the rank's gradients were ready and the
# all-reduce began, and when it finished. On one machine every process reads the same monotonic clock, so the
# ranks' readings compare directly.

# %%
quiz.ask("23-step-times")

# %%
results = stragglers.observe()
print(f"{len(results)} ranks trained; each part: {len(results[0]['forward'])} steps per rank")

# %% tags=["reveals-answer"]
with quiz.reveal("23-step-times"):
    print(straggler_report.steps(results, stragglers.SLOW_RANK, stragglers.DELAY)[0])

# %% [markdown]
# ## Where the time goes
# If every rank's step is longer, the time has to be somewhere in the steps of ranks 0 and 1, which do no more
# work than before.

# %%
quiz.ask("23-where-the-wait-goes")

# %% tags=["reveals-answer"]
with quiz.reveal("23-where-the-wait-goes"):
    print(straggler_report.phases(results, "forward", stragglers.SLOW_RANK, stragglers.DELAY)[0])
    display(straggler_timeline(results, "forward", stragglers.SLOW_RANK, stragglers.DELAY))

# %% [markdown]
# ## A delay inside the backward
# The slow work need not come before the backward. In part `backward`, rank 2 sleeps at the start of its
# backward instead (a hook on the model's output, whose gradient is the first that backward computes), before any
# of its gradients is ready for the all-reduce.

# %%
quiz.ask("23-backward-delay")

# %% tags=["reveals-answer"]
with quiz.reveal("23-backward-delay"):
    print(straggler_report.backwards(results, stragglers.SLOW_RANK, stragglers.DELAY)[0])

# %% [markdown]
# ## Who arrives last
# Durations tell how long a rank waited, not who for. *When* each rank reached the collective does: every rank
# reads its clock as it arrives, and the rank that arrives last is the one the others waited for. The comm hook's
# readings of the two delayed parts, as `arrivals[step][rank]`, relative to the first rank's arrival in that step:

# %%
for part in ("forward", "backward"):
    print(f"delay in the {part}:")
    for step, row in enumerate(straggler_reading.arrivals(results, part)):
        print(f"  step {step}: " + ", ".join(f"rank {rank} at {(t - min(row)) * 1e3:.1f} ms"
                                           for rank, t in enumerate(row)))

# %% [markdown]
# In both parts rank 2 arrives last, by about the delay, while the backward durations above could not name it in
# the second. A real straggler is rarely that regular: it stalls at some steps and not at others, and on every
# step some rank is last by a hair. What counts is how long the others waited for each rank in all.
#
# ### Exercise: name the slow rank
# Write `find_straggler(arrivals)`: `arrivals[step][rank]` is each rank's clock reading (seconds) as it entered
# the step's collective, as `dist.all_gather_object` gives it to every rank. Return `(rank, waits)`: `waits[r]`,
# how long rank `r` waited at the collectives in all, from its arrival to the last rank's arrival, summed over the
# steps; and the rank the others waited for, the one that waited least. Not the last rank at one step, and not
# the rank that is last most often. The check tries a few described cases and 60 generated ones: seeded, noisy,
# steps of different lengths, stragglers slow at some steps only.

# %% tags=["solution"]
def find_straggler(arrivals):
    """Each rank's wait at the collectives, summed over the steps, and the rank that waited least."""
    ### BEGIN SOLUTION
    waits = [0.0] * len(arrivals[0])
    for row in arrivals:
        last = max(row)
        for rank, reading in enumerate(row):
            waits[rank] += last - reading
    return waits.index(min(waits)), waits
    ### END SOLUTION


# %%
exercises.check("find_straggler", find_straggler)

# %% [markdown]
# The course's own reading of the two delayed parts (`straggler_report.last_line`): the last rank at each step,
# the rank the others waited for, and how long each rank waited at the all-reduce in all
# (`straggler_reading.waited`):

# %%
for part in ("forward", "backward"):
    print(f"delay in the {part}:\n{straggler_report.last_line(results, part)}")

# %% [markdown]
# ## A probe inside the step
# Inside a real job nobody hands you the comm hook's readings from every rank: each rank has its own, and has to
# send them. The simplest probe reads the clock just before `loss.backward()` and gathers every rank's reading,
# every step:
#
# ```python
# loss = F.mse_loss(model(x), y)
# arrived = time.perf_counter()
# arrivals = [None] * dist.get_world_size()
# dist.all_gather_object(arrivals, arrived)   # every rank gets every rank's reading
# loss.backward()
# ```
#
# Part `probed` of the run did exactly this, with rank 2 sleeping in its forward again.

# %%
quiz.ask("23-probe-is-a-collective")

# %% tags=["reveals-answer"]
with quiz.reveal("23-probe-is-a-collective"):
    print(straggler_report.probed(results, stragglers.SLOW_RANK, stragglers.DELAY)[0])

# %% [markdown]
# ### Exercise: the probe on real ranks
# Write `train_step(model, x, y, optimizer)`, one DDP training step with the probe: zero the gradients, compute
# `F.mse_loss(model(x), y)`, read `time.perf_counter()`, gather every rank's reading with `dist.all_gather_object`,
# then `loss.backward()` and `optimizer.step()`; return the gathered list. The check starts 3 ranks
# (`stragglers.probe_on_ranks`, your function travels as its source), plants the lesson's sleep in the forward of a rank it
# draws at random, calls your step 3 times on every rank, and reads its own clocks around each step: each rank's
# reading must lie between the end of its forward and its arrival at the all-reduce, every rank must return the
# same lists, the readings must name the planted rank, and the weights must be those of SGD on one device.

# %% tags=["solution"]
import time

import torch.distributed as dist
import torch.nn.functional as F


def train_step(model, x, y, optimizer):
    """One DDP step; every rank's clock just before the backward, gathered, by rank."""
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    arrived = time.perf_counter()
    arrivals = [None] * dist.get_world_size()
    dist.all_gather_object(arrivals, arrived)
    loss.backward()
    optimizer.step()
    return arrivals
    ### END SOLUTION


# %%
exercises.check("train_step", train_step)

# %% [markdown]
# ## On GPUs
# Not measured here: the course has no GPU ranks, so this is read in torch's source. With
# [NCCL](00_start_here.ipynb#Glossary), `ProcessGroupNCCL::WorkNCCL::wait`
# (`torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`) makes the current [CUDA stream](00_start_here.ipynb#Glossary)
# wait for the collective and returns at once; the CPU itself blocks only with `TORCH_NCCL_BLOCKING_WAIT=1`.
# DDP's `Reducer::finalize_backward` (`torch/csrc/distributed/c10d/reducer.cpp`) calls that wait, so on GPUs
# `loss.backward()` can return before the all-reduce is done, and the wait shows up wherever the CPU next waits for
# the GPU: `loss.item()`, a `torch.cuda.synchronize()`, the next copy to the host. A CPU timer must synchronize
# first (or use CUDA events) to put the wait in the right phase, and the clock readings of a probe mean "this rank's
# CPU got here", which is early when the GPU is behind: a probe on GPUs reads the clock after a
# `torch.cuda.synchronize()`. Across machines the clocks differ by more than a small delay, so a real tool
# compares each rank's wait at each collective, measured on its own clock, rather than raw readings: the rank that
# waited least at a collective is the one that arrived last (pytorch/pytorch#71303 discusses such tools;
# traceopt-ai/traceml#252 is a tool meeting the case of the backward delay).
#
# ## What to remember
# - Under DDP a delay on one rank lengthens every rank's step by the whole delay: the all-reduce in the backward
#   finishes only when the last rank has arrived.
# - The other ranks spend it inside `loss.backward()`, waiting in the all-reduce; the slow rank's own backward is
#   the shortest when its delay comes before the backward, and as long as the others' when it is inside it.
# - Step and phase durations hide the slow rank; the time each rank *arrives* at a collective names it: the rank
#   that arrives last, summed over the steps.
# - A probe that gathers the readings is a collective too: the others wait there instead, once per step.
