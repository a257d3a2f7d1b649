# %% [markdown]
# # 24 · A rank killed: restart, and resume exactly
#
# **After this lesson you will be able to explain**
# - what `torchrun --max-restarts N` does when one [rank](00_start_here.ipynb#Glossary) dies: which ranks stop,
#   which start again, and how many times;
# - what a [snapshot](00_start_here.ipynb#Glossary) must hold for a resumed run to equal an uninterrupted one bit
#   for bit: weights, the optimizer's state, every rank's random generators, and where the data stood;
# - which step a resumed run starts from, and how many finished steps it trains again;
# - what goes wrong when a resume forgets one of them.
#
# A long job loses a rank sooner or later: a machine fails, the kernel's out-of-memory killer picks a process.
# Below, 2 ranks (gloo, CPU) train the course's model 8 → 15 → 15 → 4, with a dropout after each ReLU, under
# [DDP](00_start_here.ipynb#Glossary) with Adam: 2 epochs of 64 samples, a `DistributedSampler` with
# `shuffle=True`, 4 samples per rank and step, 8 steps per epoch, 16 in all. Rank 1 is killed with SIGKILL as
# step 14 starts (step 6 of 8 of epoch 1). The program is `dpcourse/faults/resume_training.py`.

# %%
import os
import random
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from dpcourse import exercises, quiz
from dpcourse.faults import resume_runs, resume_training
from dpcourse.viz.resume import attempts_timeline

print(f"{resume_training.STEPS_PER_EPOCH} steps per epoch, {resume_training.EPOCHS} epochs; snapshots after every "
      f"{resume_training.EVERY}th step; rank {resume_training.KILLED_RANK} killed as step "
      f"{resume_training.KILL_STEP} starts")

# %% [markdown]
# ## Restarts: torchrun's, and the course's
# torchrun runs an agent process beside the ranks. Started as
#
# ```
# torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m dpcourse.faults.resume_runs DIRECTORY
# ```
#
# it watches them, and when a rank fails it acts on the whole group, at most once here. Each rank finds the
# attempt's number in `TORCHELASTIC_RESTART_COUNT`. The lesson uses the course's launcher with the same semantics,
# `faults.restarts.with_restarts` (`dpcourse/faults/restarts.py`): one `ranks.launch` per attempt, on a fresh
# port, the same environment variables. It starts in about a second where torchrun takes several, and it
# always connects: on the 2-core machine this course is tested on, the same program under real torchrun with
# `--max-restarts 1` ended bit-identical in 5 runs of 10, while attempt 1 failed to connect ("Gloo
# connectFullMesh failed ... Connection refused") in 3 and hung in 2 (`python -m tests.benchmarks.torchrun_restarts`
# measures it on your machine).
#
# One run tells the whole story (`resume_runs.story`, two starts of the ranks). Attempt 0 trains uninterrupted
# first, the reference, then again with snapshots, until the kill. Attempt 1 resumes from the snapshots: the right
# way, and three ways that each leave one thing out.

# %%
quiz.ask("24-rank-dies")

# %%
scratch = tempfile.TemporaryDirectory(prefix="dpcourse-lesson24-")
story = resume_runs.story(scratch.name)
print(f"{len(story.attempts)} attempts")

# %% tags=["reveals-answer"]
with quiz.reveal("24-rank-dies"):
    first = story.attempts[0]
    print(f"attempt 0 ended: {first.failure.splitlines()[0].split(' (pid')[0]} killed by SIGKILL")
    for rank in range(2):
        steps = [s["step"] for s in story.log("interrupted", 0, rank)]
        lane = story.lanes[rank]["resumed"]
        print(f"rank {rank}: finished steps {steps[0]} to {steps[-1]} in attempt 0; attempt 1 in a new process: "
              f"{lane['pid'] != first.pids[rank]}, resumed at (epoch, done) = {lane['start']}")

# %%
def gap_from_reference(lane, rank=0):
    """How far a lane of attempt 1 ends from the uninterrupted run, on ``rank``, in words."""
    reference, got = story.uninterrupted[rank]["parameters"], story.lanes[rank][lane]["parameters"]
    gap = max(float((a - b).abs().max()) for a, b in zip(reference, got, strict=True))
    return f"largest difference from the uninterrupted run {gap:.1e}" if gap else "bit-identical to the uninterrupted run"


# %% [markdown]
# ## The two attempts, drawn
# The picture of the run, and rank 0's loss at each step next to the uninterrupted run's:

# %%
attempts_timeline(story, resume_runs.SNAPSHOT_STEP, resume_training.KILL_STEP, resume_training.KILLED_RANK,
                  resume_training.EPOCHS * resume_training.STEPS_PER_EPOCH)

# %% [markdown]
# Steps 11 to 13 were finished in attempt 0 and lost with it: attempt 1 trains them again from the snapshot of
# step 10. Where the markers sit on the black line, the resumed run computed the very same losses. The weights at
# the end, compared bit for bit with `torch.equal`:

# %%
for rank in range(2):
    same = all(torch.equal(a, b) for a, b in zip(story.uninterrupted[rank]["parameters"],
                                                 story.lanes[rank]["resumed"]["parameters"], strict=True))
    print(f"rank {rank}: resumed run {'bit-identical to' if same else 'differs from'} the uninterrupted run")

# %% [markdown]
# ## What a snapshot holds
# `faults.resume.snapshot` (`dpcourse/faults/resume.py`) saves, for each rank, what its next step reads:
# `model.state_dict()`, `optimizer.state_dict()` (Adam's two running averages and its step count),
# `torch.get_rng_state()` (dropout's masks), `random.getstate()` (the input augmentation's scale), and the
# position `(epoch, done)`. NumPy's generator would join them in a program that draws from it, CUDA's
# (`torch.cuda.get_rng_state_all()`) on a GPU. With fp16 on a GPU, a `GradScaler`'s `state_dict()` too: its scale
# and growth tracker, which a new scaler would start again at 65536 (`torch/amp/grad_scaler.py:
# GradScaler.state_dict`, read in the source: this CPU course trains in float32 without one).
#
# Each rank writes its own file, first under a temporary name, then `os.replace`: a rank killed while writing
# leaves the last whole snapshot, never half of one. Each rank seeds its generators with `SEED + rank`, so the two
# ranks draw different dropout masks. Attempt 1 also resumed without the generators:

# %%
quiz.ask("24-forget-generators")

# %% tags=["reveals-answer"]
with quiz.reveal("24-forget-generators"):
    print(f"resumed without the generators, after step 16, rank 0: {gap_from_reference('without the generators')}")

# %% [markdown]
# ## Where the data stood
# `DistributedSampler(shuffle=True)` shuffles by `seed + epoch`, so a resumed rank calls `set_epoch(epoch)` to get
# the epoch's order back, and skips the `done` batches already trained on. The batches here are slices of the
# sampler's indices, not a `DataLoader`'s: its iterator draws a seed from the global generator each time it starts
# (`torch/utils/data/dataloader.py: _BaseDataLoaderIter.__init__`), one more draw a resumed epoch would have to
# replay. What if a resume called `set_epoch(1)` and started the epoch from its first batch?

# %%
quiz.ask("24-epoch-from-start")

# %% tags=["reveals-answer"]
with quiz.reveal("24-epoch-from-start"):
    for rank in range(2):
        twice = resume_runs.trained_twice(story, "without the position", rank)
        print(f"rank {rank}: samples trained on twice in epoch 1: {len(twice)} {twice}")
    print(f"after step 16, rank 0: {gap_from_reference('without the position')}")

# %% [markdown]
# And a resume that leaves out Adam's state (its running averages start again at zero, its step count at 1):

# %%
ADAM = "without Adam's state"
print(f"resumed without Adam's state, after step 16, rank 0: {gap_from_reference(ADAM)}")

# %% [markdown]
# ### Exercise: where does the resumed run start?
# Write `resume_point(kill_step, every, steps_per_epoch)`. Steps are numbered from 1 across epochs; a snapshot is
# taken after every step that is a multiple of `every`; a rank dies as step `kill_step` starts, so steps 1 to
# `kill_step - 1` finished. Return `(epoch, done, lost)`: the epoch (from 0) and the batches of it done at the last
# snapshot, `(0, 0)` if there is none, and how many finished steps are lost and trained again. The lesson's run
# gives `(1, 2, 3)`. The check also runs every case up to step 25.

# %% tags=["solution"]
def resume_point(kill_step, every, steps_per_epoch):
    """(epoch, done) of the last snapshot before the kill, and the finished steps lost."""
    ### BEGIN SOLUTION
    snapshot_step = (kill_step - 1) // every * every
    epoch, done = divmod(snapshot_step, steps_per_epoch)
    return epoch, done, kill_step - 1 - snapshot_step
    ### END SOLUTION


# %%
exercises.check("resume_point", resume_point)

# %% [markdown]
# ### Exercise: snapshot and resume
# Write the two functions every rank calls. `snapshot(directory, model, optimizer, epoch, done)` runs after every
# 5th step, with the position of the next batch (`done` batches of `epoch` finished): save in `directory`
# everything this rank's next step reads. `resume(directory, model, optimizer)` runs once, before the first step of
# every attempt: load this rank's snapshot back into `model`, `optimizer` and the generators and return
# `(epoch, done)`, or return `None` when there is no snapshot yet. `model` is the DDP model, `optimizer` its Adam;
# `dist.get_rank()` tells a rank its number. The check runs them on 2 ranks under the restarting launcher, kills
# rank 1 as step 14 starts, and compares every rank's state right after `resume`, and its weights at the end, with
# the uninterrupted run's, bit for bit.

# %% tags=["solution"]
def snapshot(directory, model, optimizer, epoch, done):
    """Save this rank's weights, Adam's state, generators and position, atomically."""
    ### BEGIN SOLUTION
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "python_rng": random.getstate(), "position": (epoch, done)}
    path = Path(directory) / f"rank-{dist.get_rank()}.pt"
    torch.save(state, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    ### END SOLUTION


def resume(directory, model, optimizer):
    """Load this rank's snapshot back; its (epoch, done), or None when there is none."""
    ### BEGIN SOLUTION
    path = Path(directory) / f"rank-{dist.get_rank()}.pt"
    if not path.exists():
        return None
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    return state["position"]
    ### END SOLUTION


# %%
exercises.check("snapshot_and_resume", (snapshot, resume))

# %% [markdown]
# ## When restarts run out
# A restart helps a rank that died by accident. A rank that dies every time, at the same step, spends them:

# %%
quiz.ask("24-out-of-restarts")

# %% tags=["reveals-answer"]
with quiz.reveal("24-out-of-restarts"):
    attempts = resume_runs.dies_every_attempt(max_restarts=1)
    for attempt in attempts:
        print(f"attempt {attempt.number}: {attempt.failure.splitlines()[0].split(' (pid')[0]} killed by SIGKILL")
    print(f"{len(attempts)} attempts, the run failed" if all(a.results is None for a in attempts) else "finished")

# %%
scratch.cleanup()

# %% [markdown]
# ## What to remember
# - When a rank dies, torchrun's agent stops every rank and starts them all again, at most `--max-restarts`
#   times; each attempt finds its number in `TORCHELASTIC_RESTART_COUNT`, and nothing of the last one but its
#   files.
# - A resume equals the uninterrupted run bit for bit only if the snapshot holds the weights, the optimizer's
#   state, each rank's own generators (torch, Python, NumPy, CUDA as used) and the position: the epoch for
#   `set_epoch` and the batches done, to skip. With fp16 on a GPU, the `GradScaler`'s state too.
# - The steps after the last snapshot are lost and trained again: snapshots every `k` steps lose up to `k - 1`.
# - Write snapshots atomically (a temporary file, then `os.replace`), one per rank.
# - Next: lesson 25 asks when communication stops hiding behind computation.
