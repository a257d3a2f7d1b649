# %% [markdown]
# # 13 · Collectives: broadcast, reduce, all-reduce, all-gather, reduce-scatter
#
# **After this lesson you will be able to explain**
# - what each of the five collectives DDP and DataParallel are built from does: which [rank](00_start_here.ipynb#Glossary) holds what before
#   and after it;
# - what an [all-reduce](00_start_here.ipynb#Glossary) is, exactly, and why it can be cut into a
#   reduce-scatter and an all-gather;
# - how a ring all-reduce works, written with `send` and `recv` between real processes, and how many bytes
#   each rank sends for a tensor of S bytes;
# - how it compares with reducing everything onto one rank and broadcasting the result back, counted in
#   bytes and timed;
# - where DataParallel's broadcast (replicate) and reduce-add sit in that comparison.
#
# Lesson 10 used DDP's all-reduce to average gradients. This lesson opens it.
# Everything below runs on real ranks: separate processes that talk through `torch.distributed`, started from
# this notebook by `dpcourse.ddp.launch` (lesson 10, *From threads to processes*). They use the gloo backend,
# with CPU tensors, unless every rank has a GPU of its own: [NCCL](00_start_here.ipynb#Glossary) needs one GPU
# per rank, so on a machine with one GPU the ranks use gloo and the CPU. The backend `launch` picks here, by the
# number of ranks:

# %%
import torch
import torch.distributed as dist
from IPython.display import display

from dpcourse import exercises, quiz, viz
from dpcourse.ddp.demos import collectives, compare, pointtopoint
from dpcourse.ranks import backend_for

print({f"{n} ranks": backend_for(n) for n in (2, 3, 4)})

# %% [markdown]
# ## What a collective is
# A *collective* is an operation that **every rank of a [process group](00_start_here.ipynb#Glossary) calls**, each with its own tensor, and
# that moves data between them. The ranks wait for one another inside it, so a rank that never calls it
# leaves the others waiting, until the process group's timeout. Five of them do all the work of data
# parallelism:
#
# | collective | each rank puts in | afterwards |
# |---|---|---|
# | broadcast | rank `src`: its tensor | every rank holds `src`'s tensor |
# | reduce | its tensor | rank `dst` holds the sum; the others: nothing promised |
# | all-reduce | its tensor | every rank holds the sum |
# | all-gather | one piece | every rank holds every rank's piece, in rank order |
# | reduce-scatter | n pieces | rank r holds the sum of everyone's piece r |
#
# `collectives.collectives(3)` starts 3 ranks once and runs all five in each of them
# (`dpcourse/ddp/demos/collectives.py`). Rank r's tensor `x` has 3 pieces (one number each): piece p holds
# 10 (r + 1) + p, so rank 2 starts with `[30, 31, 32]`. In the pictures a row is a rank and a column a
# piece; a cell is striped in the colours of the ranks whose inputs make up its value: one stripe is a copy,
# three stripes a sum over three ranks. Every collective also ran on a tensor holding 2<sup>rank</sup>: summed,
# its bits name the contributors, which is how the stripes were found.

# %%
moved = collectives.collectives(world_size=3)
print(moved["broadcast"])
viz.collective(moved["broadcast"])

# %% [markdown]
# ### Broadcast
# `dist.broadcast(x, src=0)`: rank 0's tensor is copied into every other rank's. Each rank passes a tensor of
# the same shape and receives into it; rank 0's own is left as it was. DDP broadcasts rank 0's parameters
# and buffers when it wraps the model (lesson 10, *Replicated once*), and DataParallel's replicate is a
# broadcast from device 0 at every forward (lesson 03).
#
# ### Reduce
# `dist.reduce(x, dst=0)`: rank 0 receives the sum of every rank's tensor. What about the other ranks' tensors?

# %%
quiz.ask("13-reduce-others")

# %% tags=["reveals-answer"]
with quiz.reveal("13-reduce-others"):
    print(moved["reduce"])
    display(viz.collective(moved["reduce"]))

# %% [markdown]
# ### All-reduce
# **An all-reduce combines one tensor from every rank into one result that every rank receives.** Every rank
# passes a tensor of the same shape and dtype; afterwards each holds, in place, the elementwise combination of
# all of them: the sum by default (`op=dist.ReduceOp.SUM`; other operations such as `MAX` exist). So it is a
# reduce whose result every rank gets, and a reduce followed by a broadcast of the result gives the same
# tensors. DDP all-reduces every bucket of gradients after dividing it by the number of ranks: a mean (lesson
# 10, *How the ranks' gradients combine*).

# %%
print(moved["all_reduce"])
viz.collective(moved["all_reduce"])

# %% [markdown]
# ### All-gather and reduce-scatter
# `dist.all_gather(pieces, x[rank])`: every rank puts in one piece, here its own piece `rank`, and every rank
# receives all of them, in rank order. `dist.reduce_scatter(piece, list(x.chunk(3)))` does the opposite:
# every rank puts in 3 pieces, and rank r receives the sum of everyone's piece r. Dashed cells are pieces a
# rank does not hold.

# %%
print(moved["all_gather"], moved["reduce_scatter"], sep="\n")
display(viz.collective(moved["all_gather"]), viz.collective(moved["reduce_scatter"]))

# %% [markdown]
# After a reduce-scatter each rank holds one piece of the sum; an all-gather of those pieces gives every
# rank all of them. **A reduce-scatter followed by an all-gather is an all-reduce**:

# %%
finished_pieces = [moved["reduce_scatter"].after[rank][rank] for rank in range(3)]
print("piece r of the sum, from rank r after the reduce-scatter:", finished_pieces)
print("every rank after the all-reduce:                          ", moved["all_reduce"].after[0])
print("the same:", finished_pieces == moved["all_reduce"].after[0])

# %% [markdown]
# That split is how the ring all-reduce below works. [FSDP](00_start_here.ipynb#Glossary), which shards the model over the ranks, uses the two
# halves on their own: it reduce-scatters the gradients, so that each rank keeps the sum for the parameters it
# owns (`torch/distributed/fsdp/_runtime_utils.py: _reduce_grad`), and all-gathers the parameters before a
# layer runs (`torch/distributed/fsdp/_flat_param.py: FlatParamHandle._all_gather_flat_param`).

# %% [markdown]
# ## Point to point: send and recv
# Inside the backend, a collective is made of messages from one rank to another, and torch lets you send
# them yourself. `dist.send(tensor, dst)` sends a tensor to rank `dst`, which must call
# `dist.recv(tensor, src)` with a tensor of the same shape and dtype to receive it into. In a ring every rank sends to its right neighbour and receives from its left one. The obvious way
# to write one step:

# %%
quiz.ask("13-send-first")

# %% [markdown]
# The same step written with `dist.isend`, which *starts* a send and returns a request: each rank starts its
# send, receives, then waits for its own send to complete:

# %% tags=["reveals-answer"]
with quiz.reveal("13-send-first"):
    received = pointtopoint.pass_right(world_size=3, blocking=False)
    for rank, number in enumerate(received):
        print(f"rank {rank} received {number}, from rank {(rank - 1) % 3}")

# %% [markdown]
# ## All-reduce, written with send and recv
# The simplest all-reduce goes through one rank: every other rank sends its tensor to rank 0, rank 0 adds
# them up and sends the sum back. It is a reduce followed by a broadcast.
#
# ### Exercise: reduce, then broadcast
# Write `reduce_then_broadcast(tensor)`. It runs on every rank, with that rank's tensor; afterwards every
# rank's tensor holds the sum, in place, as after `dist.all_reduce(tensor)`. Use `dist.send`, `dist.recv`
# and `dist.isend` only.
#
# The check starts 3 ranks, then 4, and runs your function in each, next to `dist.all_reduce` on a copy
# of the same tensor (`dpcourse/ranks/learner.py`). A rank cannot import a function from a notebook cell, so
# the check sends it the function's *source* and runs that there (`dpcourse/ranks/by_source.py`): what your
# function uses from outside it must be a module (`torch`, `dist`), a plain value or another function of
# yours. The check counts the bytes each rank sends, and refuses collectives: the point is to write one.

# %% tags=["solution"]
def reduce_then_broadcast(tensor):
    """Sum `tensor` over all ranks, in place, through rank 0."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank != 0:
        dist.send(tensor, dst=0)
        dist.recv(tensor, src=0)
        return
    incoming = torch.empty_like(tensor)
    for source in range(1, n):
        dist.recv(incoming, src=source)
        tensor += incoming
    requests = [dist.isend(tensor, dst=other) for other in range(1, n)]
    for request in requests:
        request.wait()
    ### END SOLUTION


# %%
exercises.check("reduce_then_broadcast", reduce_then_broadcast)

# %% [markdown]
# Rank 0 receives N − 1 tensors and sends N − 1: (N − 1) · S bytes each way for a tensor of S bytes, while
# every other rank sends S and receives S. Rank 0's link carries N − 1 times what any other carries.
#
# ### The ring
# A ring spreads that load evenly. Lesson 10's exercise simulated it on a list of tensors; here every rank is
# a process and runs its part. Rank r talks to two ranks only: it sends to rank r + 1 and receives from rank
# r − 1 (mod N), one piece of the tensor at a time. With more ranks there are more steps, but smaller
# pieces. Which wins?

# %%
quiz.ask("13-ring-bytes")

# %% [markdown]
# The tensor is cut into N pieces, `tensor.view(-1).tensor_split(n)` (views: writing into a piece writes into
# the tensor). Then:
#
# 1. **reduce-scatter**, N − 1 steps. At step s rank r sends piece (r − s) mod N and adds the piece arriving
#    from the left into its piece (r − s − 1) mod N. Each piece collects one more rank's part per step;
#    after N − 1 steps rank r holds the complete sum of piece (r + 1) mod N.
# 2. **all-gather**, N − 1 steps. At step s rank r sends piece (r + 1 − s) mod N, complete, and receives the
#    complete piece (r − s) mod N straight into its tensor.
#
# Every step each rank sends one piece of S / N bytes.
#
# ### Exercise: a ring all-reduce on real ranks
# Write `ring_all_reduce_on_ranks(tensor)`, run on every rank, summing `tensor` over all ranks in place with
# the ring above. In each step start the send with `dist.isend`, receive with `dist.recv`, then wait for the
# send. The check is the one above, on 2, 3 and 4 ranks, and also counts the bytes each rank sends: one piece
# per step, nothing more.

# %% tags=["solution"]
def ring_all_reduce_on_ranks(tensor):
    """Sum `tensor` over all ranks, in place, around a ring: reduce-scatter, then all-gather."""
    ### BEGIN SOLUTION
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    pieces = tensor.view(-1).tensor_split(n)
    for step in range(n - 1):
        arriving = pieces[(rank - step - 1) % n]
        incoming = torch.empty_like(arriving)
        request = dist.isend(pieces[(rank - step) % n], dst=right)
        dist.recv(incoming, src=left)
        request.wait()
        arriving += incoming
    for step in range(n - 1):
        request = dist.isend(pieces[(rank + 1 - step) % n], dst=right)
        dist.recv(pieces[(rank - step) % n], src=left)
        request.wait()
    ### END SOLUTION


# %%
exercises.check("ring_all_reduce_on_ranks", ring_all_reduce_on_ranks)

# %% [markdown]
# ## Ring against reduce-then-broadcast
# `dpcourse/ddp/implementations/allreduce.py` holds both algorithms as you wrote them. `compare.compare()` starts 4 ranks
# once, forms groups of the first 2, 3 and 4 of them (`dist.new_group`), and runs both algorithms, and gloo's
# own `dist.all_reduce`, on float32 tensors of three sizes, from 4.8 kB to 1.92 MB. The bytes every rank sent
# are counted (`dpcourse/ranks/traffic.py` wraps the process group's `send` and `recv`), and every result is
# checked against `dist.all_reduce`. The bytes are the algorithm's, the same on any machine; the table shows
# them for the smallest tensor, S = 4,800 bytes, and the other sizes give the same multiples of S:

# %% tags=["reveals-answer"]
with quiz.reveal("13-ring-bytes"):
    runs = compare.compare(numels=(1_200, 24_000, 480_000), world_sizes=(2, 3, 4))
    print("every result equals dist.all_reduce's:", all(run.correct for run in runs.runs))
    print(runs.bytes_table(4_800))
    print("the same multiples of S for every size:", all(
        [b / run.nbytes for b in run.sent] == [b / 4_800 for b in runs.find(run.algorithm, run.n, 4_800).sent]
        for run in runs.runs))
    dataparallel = {n: compare.dataparallel_bytes(n) for n in (2, 3, 4)}
    display(viz.bytes_per_rank(runs, 4_800, {n: dp["replicate"] / dp["parameters"] for n, dp in dataparallel.items()}))

# %% [markdown]
# Both algorithms send the same total, 2 (N − 1) S over all ranks (the `total` ending each line): the ring does
# not send less, it shares the sending out evenly. That pays where every rank has a link of its own (GPUs
# joined by [NVLink](00_start_here.ipynb#Glossary), machines on a network): there the busiest link carries 2(N − 1)/N · S around a ring and
# (N − 1) S through rank 0. Here it has nothing to work with: the ranks share a few cores and one memory,
# and gloo sends through the loopback interface, so every "link" is the same memory bus. And every message
# has a fixed cost, whatever its size: a ring rank sends 2 (N − 1) messages, a rank other than 0 in
# reduce-then-broadcast one. The times below, the slowest rank's, best of 2 runs, in milliseconds, are this
# machine's. Your numbers will differ:

# %% tags=["nbval-ignore-output"]
print(runs.time_table())

# %% [markdown]
# ## Where DataParallel sits
# DataParallel is one process, so it calls no collectives; but its two copying steps are a reduce and a
# broadcast through device 0 (lessons 03 and 06, `torch/nn/parallel/_functions.py`):
#
# - backward: `Broadcast.backward` calls `ReduceAddCoalesced`, which adds every replica's gradients onto
#   device 0: a **reduce**;
# - the optimizer then steps on device 0 only, where the one real model lives;
# - the next forward: replicate copies the updated parameters from device 0 to every other device
#   (`Broadcast.forward`): a **broadcast**.
#
# So one DataParallel training step is reduce-then-broadcast with the optimizer step in the middle. Counted
# by `dpcourse.trace` on one step of the course's MLP (its parameters are S = 848 bytes) on 2, 3 and 4 CPU
# devices, device 0 sends (N − 1) S and takes in (N − 1) S, like rank 0 above (the hatched bars in the
# figure):

# %%
for n, dp in dataparallel.items():
    S = dp["parameters"]
    print(f"{n} devices: replicate sent {dp['replicate']:>5,} bytes out of device 0 = {dp['replicate'] // S} S; "
          f"reduce-add took in {dp['reduce-add']:>5,} bytes = {dp['reduce-add'] // S} S")

# %% [markdown]
# On GPUs, torch hands both copies to NCCL when it can:
# `torch/nn/parallel/comm.py: reduce_add` calls `nccl.reduce` when `nccl.is_available(inputs)`, and the
# C++ `broadcast` behind `broadcast_coalesced` calls `nccl::broadcast` (`torch/csrc/cuda/comm.cpp`). NCCL then
# decides how the bytes travel between the GPUs, which this CPU-only lesson cannot count. What no algorithm
# changes is the shape of the step: the gradients end on device 0 alone, the optimizer runs there alone, and
# the other devices wait for the next broadcast. DDP replaces both copies with one all-reduce of the
# gradients, after which every rank steps its own copy of the model (lesson 10).

# %% [markdown]
# ## Summary
# - A collective is called by every rank of a group. Broadcast copies one rank's tensor to all; reduce sums
#   everyone's onto one rank (the others' tensors are left undefined); all-reduce gives every rank the sum;
#   all-gather gives every rank everyone's piece; reduce-scatter gives rank r the sum of piece r.
# - **All-reduce = reduce-scatter + all-gather**, and also = reduce + broadcast: the same result, different
#   traffic.
# - Point to point, a blocking `send` on every rank at once waits on gloo until the process group's timeout;
#   `isend`, `recv`, `wait` does one ring step.
# - Through one rank, that rank sends and receives (N − 1) S; around a ring, every rank sends 2(N − 1)/N · S,
#   less than 2 S for any N. Counted here on 2, 3 and 4 ranks.
# - DataParallel's step is a reduce onto device 0 (reduce-add), the optimizer on device 0, and a broadcast
#   from device 0 (replicate): the reduce-then-broadcast pattern. DDP uses one all-reduce instead.
#
# ## Exercises
# 1. On 8 ranks, how many bytes does each rank send in a ring all-reduce of the gradients of a model with
#    25 million float32 parameters? And rank 0 in reduce-then-broadcast? Write `ring_and_rank0(n, nbytes)`.
# 2. `moved["reduce"]` shows rank 2's tensor after the reduce. Which of its pieces still hold rank 2's own
#    values, unchanged? Write `own_pieces(after_from, rank)`, then answer with
#    `own_pieces(moved["reduce"].after_from, 2)`.

# %% tags=["solution"]
def ring_and_rank0(n, nbytes):
    ### BEGIN SOLUTION
    return 2 * (n - 1) * nbytes / n, (n - 1) * nbytes
    ### END SOLUTION


# %%
exercises.check("ring_and_rank0", ring_and_rank0)

# %% tags=["solution"]
def own_pieces(after_from, rank):
    ### BEGIN SOLUTION
    return [piece for piece, ranks in enumerate(after_from[rank]) if ranks == (rank,)]
    ### END SOLUTION


# %%
exercises.check("own_pieces", own_pieces)
