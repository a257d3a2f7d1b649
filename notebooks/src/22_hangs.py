# %% [markdown]
# # 22 · When a rank hangs: desyncs, timeouts and the tools that find them
#
# **After this lesson you will be able to explain**
# - why a [rank](00_start_here.ipynb#Glossary) that skips a collective, calls another one, or one of another size
#   makes *another* rank hang or fail, often later than the mistake, and what each rank then reports;
# - what a [process group](00_start_here.ipynb#Glossary)'s timeout tells you, and what it cannot;
# - how `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks every collective, why it must be set before the group is made,
#   and which mistake it still reports late;
# - how to see every rank's Python stack while it hangs, and what torch's
#   [Flight Recorder](00_start_here.ipynb#Glossary) records on gloo;
# - which [NCCL](00_start_here.ipynb#Glossary) settings do the same on GPUs (read in the torch source, not run here);
# - how to find the rank and the call that diverged from the ranks' records, and how to write a collective
#   that no rank can skip.
#
# Every rank must call the same collectives, in the same order, with tensors of the same size. When one does
# not, the ranks are in a [desync](00_start_here.ipynb#Glossary): nothing in Python notices, and a collective
# that a rank waits in has no way to know why the others do not come. This lesson plants the three usual
# mistakes in a tiny program on 2 gloo ranks and looks at what each tool shows.

# %%
import torch
import torch.distributed as dist

from dpcourse import exercises, quiz
from dpcourse.faults import hang_runs, hangs
from dpcourse.viz.hangs import collective_lanes

# %% [markdown]
# ## The program and its three faults
# Each rank runs `hangs.train_steps` (`dpcourse/faults/hangs.py`): 3 steps, each an
# [all-reduce](00_start_here.ipynb#Glossary) of a gradient of 4 numbers, as DDP would. Rank r's gradient at step s
# holds `10 r + s`, so a sum says which steps met: rank 0's step 1 with rank 1's step 1 gives 1 + 11 = 12. At
# step 1 rank 1 goes wrong in one of three ways:
#
# ```python
# for step in range(3):
#     gradient = torch.full((4,), float(10 * rank + step))
#     if rank == 1 and step == 1 and fault == "skip":
#         continue                                      # "skip": no all-reduce this step
#     if rank == 1 and step == 1 and fault == "other_op":
#         dist.broadcast(gradient, src=0, group=group)  # "other_op": a broadcast instead
#     else:
#         if rank == 1 and step == 1 and fault == "other_size":
#             gradient = torch.full((5,), ...)          # "other_size": 5 numbers instead of 4
#         dist.all_reduce(gradient, group=group)
# ```
#
# A group waits for the other ranks as long as its timeout, by default `dist.default_pg_timeout`
# (`torch/distributed/constants.py`, printed below): a real hang sits there that long before anything is said.
# Each fault here runs on a group of its own made with `dist.new_group(timeout=timedelta(seconds=2))` (a second
# more on rank 1, for a reason the second fault shows), all of them at once in threads of the same 2 ranks, so
# that one start of the ranks and one short wait show everything. The launcher's own group stays healthy.

# %%
print("a process group's default timeout:", dist.default_pg_timeout)

# %%
quiz.ask("22-skip")

# %% [markdown]
# `hang_runs.run` starts the 2 ranks once and runs there the skip and the other collective as they are, and all
# three faults again on groups made under `TORCH_DISTRIBUTED_DEBUG=DETAIL` (a later section). One second in,
# each rank writes down the stack of every thread (`stacks_after`):

# %%
run = hang_runs.run(("skip", "other_op"), detail=hangs.FAULTS, stacks_after=1.0)
print(f"{len(run.outcomes)} ranks, {len(run.outcomes[0])} faults each")

# %% tags=["reveals-answer"]
with quiz.reveal("22-skip"):
    print(hang_runs.table(run, "skip"))
    print(hang_runs.sums(run, "skip"))

# %% [markdown]
# ## A record of what each rank called
# To find where the ranks parted, one would like each rank's list of the collectives it called. torch keeps such
# a list, the Flight Recorder, read in each rank with `torch._C._distributed_c10d._dump_fr_trace()` (a private
# function: `hang_tools.flight_record` unpickles it into `(op, shape, state)` per call).

# %%
quiz.ask("22-flight-recorder")

# %% tags=["reveals-answer"]
with quiz.reveal("22-flight-recorder"):
    for fault in ("skip", "other_op"):
        for rank, outcomes in enumerate(run.outcomes):
            outcome = outcomes[fault]
            print(f"{fault:<9} rank {rank}: {outcome['record']}, states {sorted(set(outcome['states']))}")
    variables = run.outcomes[0]["skip"]["recorder_variables"]
    print("TORCH_FR_BUFFER_SIZE and TORCH_NCCL_TRACE_BUFFER_SIZE unset:", all(v is None for v in variables.values()))

# %% [markdown]
# ## The records, side by side
# The records as lanes, one per rank, with the first call where they disagree hatched
# (`hang_diagnosis.first_divergence`):

# %%
collective_lanes([outcomes["skip"]["record"] for outcomes in run.outcomes],
                 "skip: rank 1 skipped step 1's all-reduce",
                 ["timed out at step 2", "finished, no error"])

# %% [markdown]
# The records cannot show the skip where it happened: rank 1's calls are all-reduces of 4 numbers, like rank 0's,
# so the two lists agree until rank 1's ends. A different collective shows where it happened:

# %%
collective_lanes([outcomes["other_op"]["record"] for outcomes in run.outcomes],
                 "other_op: rank 1 called a broadcast at step 1",
                 [f"raised at step {outcomes['other_op']['failed_step']}" for outcomes in run.outcomes])

# %%
print(hang_runs.table(run, "other_op"))

# %% [markdown]
# Both ranks wait in their step 1, rank 0 in an all-reduce and rank 1 in a broadcast. Rank 0's timer fires
# first and it gives up, closing its connections; rank 1, still waiting, reads "Connection closed by peer",
# which sounds like a crash of rank 0 and is not. (With equal timeouts, whichever timer fires first wins the
# race, and the messages swap from run to run: the lesson gives rank 1 one second more so that they do not.)
# Which rank called the wrong collective? Neither message says; the stacks below tell where each one waits.
#
# ## Every rank's stack while it hangs
# A rank stuck in a collective is inside gloo's C++ code: Python cannot be asked where it is from inside. Two
# ways in, both from Python's standard library: `faulthandler.dump_traceback_later(seconds)` starts a C thread
# that writes every thread's Python stack after that many seconds (what `stacks_after` did, in
# `hang_tools.stacks`), and `faulthandler.register(signal.SIGUSR1)` writes them whenever the process gets that
# signal, so that `kill -USR1 <pid>` asks a hung rank from a shell. (`py-spy dump --pid <pid>` reads the same
# from outside the process, with no change to the program: https://github.com/benfred/py-spy.) Here the frames of
# the lesson's program and of torch's `distributed_c10d.py`, innermost first:

# %%
print("other_op\n" + hang_runs.where_stuck(run, "other_op"))
print("skip\n" + hang_runs.where_stuck(run, "skip"))

# %% [markdown]
# The stacks name the line each rank waits on: with the other collective, rank 1 in `dist.broadcast` and rank 0
# in `dist.all_reduce`, the same step; with the skip, rank 0 alone, in the all-reduce of a step rank 1 has left
# behind. Comparing the ranks' stacks, or their records, is how a desync is found in a job of many ranks: the
# odd one out is the suspect.
#
# ## Tensors of different sizes
# A skipped or swapped collective makes a rank wait. A collective of the right kind with the wrong size is
# another matter:

# %%
quiz.ask("22-size")

# %% [markdown]
# This fault runs on ranks of its own, started once more (`hang_runs.run(("other_size",))`); its stderr is kept
# in a file per rank:

# %% tags=["reveals-answer"]
with quiz.reveal("22-size"):
    sizes = hang_runs.run(("other_size",))
    if sizes.killed:
        print(f"rank {sizes.killed[0]} was {sizes.killed[1]}; its stderr: {sizes.logs[sizes.killed[0]]}")
    else:
        print(hang_runs.table(sizes, "other_size"))

# %% [markdown]
# ## TORCH_DISTRIBUTED_DEBUG=DETAIL: every collective checked first
# With `TORCH_DISTRIBUTED_DEBUG=DETAIL`, each group is made with a wrapper that checks each collective before it
# runs: every rank's fingerprint (sequence number, op type, shapes, dtypes) is compared with the others'
# (https://docs.pytorch.org/docs/stable/distributed.html#debugging-torch-distributed-applications). It has to be
# set before the group is made, and torch reads the variable once, when `torch.distributed` is imported
# (`torch/distributed/__init__.py` calls `set_debug_level_from_env()`): in a shell, `TORCH_DISTRIBUTED_DEBUG=DETAIL
# torchrun ...`. The course's ranks are forked from a process that imported torch already, so a rank that sets
# the variable must have it read again; `hang_tools.debug_level` does both:
#
# ```python
# os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
# dist.set_debug_level_from_env()                  # read it again: torch.distributed was imported before
# group = dist.new_group(timeout=timedelta(seconds=2))   # wrapped: checks every collective
# ```
#
# The run above made its DETAIL groups this way and ran the three faults on them.

# %%
quiz.ask("22-detail")

# %% tags=["reveals-answer"]
with quiz.reveal("22-detail"):
    for fault in hangs.FAULTS:
        print(f"{fault}\n{hang_runs.table(run, hangs.key(fault, detail=True))}")
    print("rank 0's stderr:", run.logs[0])

# %% [markdown]
# ### Exercise: which rank diverged, at which call?
# Write `first_divergence(records)`. `records[r]` is rank r's record, a list of `(op, shape)` calls as the Flight
# Recorder gave them above, e.g. `[("all_reduce", (4,)), ("broadcast", (4,))]`. Return `(index, ranks)`: the
# first index where the ranks do not all make the same call (a rank whose record has ended makes no call there),
# and the sorted list of the ranks whose call at that index differs from the most common one (on a tie, the
# lowest rank's call among the most common is the norm: with 2 ranks, rank 0's). Return `None` if every rank made
# the same calls. The check tries the records of this lesson and 80 generated ones, on 2 to 4 ranks, with a
# planted skip, other collective, other size or early stop.

# %% tags=["solution"]
def first_divergence(records):
    """(index, ranks) of the first call where the ranks disagree, and who differs from the norm; or None."""
    ### BEGIN SOLUTION
    from collections import Counter
    from itertools import zip_longest

    for index, calls in enumerate(zip_longest(*records)):  # None where a rank's record has ended
        if len(set(calls)) > 1:
            counts = Counter(calls)
            norm = next(call for call in calls if counts[call] == max(counts.values()))  # the lowest rank's
            return index, [rank for rank, call in enumerate(calls) if call != norm]
    return None
    ### END SOLUTION


# %%
exercises.check("first_divergence", first_divergence)

# %% [markdown]
# ### Exercise: a mean that no rank can skip
# The skip of this lesson is the most common desync, and it is usually written with good intentions: a rank with
# nothing to contribute returns early. Write `mean_over_ranks(losses)`, called on every rank with that rank's 1-D
# tensor of per-sample losses, which may be empty: return the mean of all the ranks' losses, the same number on
# every rank. A rank with no losses must still call every collective the others call, with tensors of the same
# size. The check runs it on 2 and 3 real ranks, one of them with no samples, counts the collectives each rank
# calls (`ranks.counted`), and stops ranks left waiting (`lesson22.TIMEOUT` in `dpcourse/exercises/lesson22.py`).

# %% tags=["solution"]
def mean_over_ranks(losses):
    """The mean of every rank's losses; every rank calls the same all-reduce, an empty one too."""
    ### BEGIN SOLUTION
    total = torch.tensor([losses.sum(), losses.numel()])  # an empty rank sends [0, 0], the same size
    dist.all_reduce(total)
    return total[0] / total[1]
    ### END SOLUTION


# %%
exercises.check("mean_over_ranks", mean_over_ranks)

# %% [markdown]
# ## On GPUs: NCCL's own tools (read in the torch source, not run here)
# This machine has no GPU, so none of the following was run; each is read in
# `torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp` or on https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html.
# NCCL runs collectives on the GPU asynchronously, so a hang is found by a watchdog thread of ProcessGroupNCCL
# rather than by the call that waits:
#
# | variable | what it does (as documented) |
# |---|---|
# | `NCCL_DEBUG=INFO` (or `WARN`) | NCCL's own log (NCCL's variable, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): its setup, each rank's transport, and warnings such as "collective mismatch error" (NVIDIA/nccl#531) |
# | `TORCH_NCCL_ASYNC_ERROR_HANDLING` | what the watchdog does with a collective that timed out or failed: by default it tears the process down (3: "SkipCleanUp"), so that the job ends instead of hanging |
# | `TORCH_NCCL_BLOCKING_WAIT=1` | `wait()` blocks until the collective ends or the timeout passes, and raises there, in the calling thread |
# | `TORCH_NCCL_TRACE_BUFFER_SIZE` / `TORCH_FR_BUFFER_SIZE` | the Flight Recorder's entries per process (the one this lesson dumped on gloo) |
# | `TORCH_NCCL_DUMP_ON_TIMEOUT=1` | on a timeout, every rank writes its Flight Recorder to a file (with `TORCH_NCCL_ENABLE_MONITORING=1` and a buffer size > 0), named by `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` |
# | `TORCH_NCCL_DESYNC_DEBUG=1` | set together with `TORCH_NCCL_ASYNC_ERROR_HANDLING`: after a timeout, a report of which ranks may have caused the desync |
# | `TORCH_NCCL_ENABLE_MONITORING`, `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC` | a second thread that aborts the process if the watchdog itself is stuck that long |
#
# The dumps of all ranks are read together by `python -m torch.distributed.flight_recorder.fr_trace <folder>`,
# which matches each rank's collectives with the others' and reports "where the first mismatch occurs in cases
# of desync" (its docstring, `torch/distributed/flight_recorder/fr_trace.py`; not run here): what the first
# exercise did with this lesson's records.
#
# ## What to remember
# - A desync is found by another rank than the one that caused it, and often later: gloo pairs the n-th
#   collective of each rank, so a skipped all-reduce mixes steps silently and only the last call times out; the
#   rank that skipped may finish without an error.
# - A timeout says that a rank waited, not why; its message is the same on every rank. A different size can
#   end in a process aborted by gloo, with no Python exception at all.
# - `TORCH_DISTRIBUTED_DEBUG=DETAIL` (set before the group is made) names a different collective or size on
#   every rank at once, and a rank that never arrives by its monitored barrier; it costs a barrier and an
#   all-gather per collective.
# - Every rank's Python stack (`faulthandler`, `py-spy`) shows the line each rank waits on; the Flight Recorder
#   (on by default, gloo included) lists what each rank called. Compare the ranks: the odd one out is the cause.
# - A rank with nothing to contribute still calls every collective, with zeros of the same size.
#
# The next lesson looks at a rank that does not hang but is slow, and how to find it.
