# %% [markdown]
# # 20 · ZeRO-3: parameters sharded too, FSDP written by hand
#
# **After this lesson you will be able to explain**
# - how a rank can train a model whose parameters it does not hold: each layer is put together by an
#   all-gather just before it runs, and given back just after, at [ZeRO stage](00_start_here.ipynb#Glossary) 3;
# - why backward needs a second all-gather, and where the gradients go: a reduce-scatter, the all-gather's
#   backward;
# - what this costs on the wire next to DDP, counted in bytes, and what it saves in memory, measured per rank
#   over a step with lesson 15's profiler;
# - what prefetching the next layer and keeping layers whole after forward
#   ([reshard](00_start_here.ipynb#Glossary) or not) trade against each other.
#
# Lessons 18 and 19 gave each rank a [shard](00_start_here.ipynb#Glossary) of Adam's state and of the
# gradients, but every rank still held all the parameters. This lesson shards those too: what
# [FSDP](00_start_here.ipynb#Glossary) does, written by hand in `dpcourse/sharded/zero3.py`. Everything runs on
# real ranks started from this notebook; their backend, by the number of ranks (gloo with CPU tensors unless
# every rank has a GPU of its own):

# %%
import torch
import torch.distributed as dist
from IPython.display import display

from dpcourse import examples, exercises, quiz, ranks
from dpcourse.ranks import backend_for
from dpcourse.sharded import zero3_measure
from dpcourse.sharded.zero1 import shard_range
from dpcourse.viz.zero3 import zero3_memory

print({f"{n} ranks": backend_for(n) for n in (2, 3, 4)})

# %% [markdown]
# ## The idea: a layer is whole only while it runs
# [ZeRO](00_start_here.ipynb#Glossary) stage 3 flattens each layer's parameters into one vector and gives rank
# r the slice `shard_range(numel, r, n)` of lesson 18 (slices of `ceil(numel / n)` numbers, the last ones
# shorter). A rank keeps its slices and Adam's state for them, nothing else. The model is the course's MLP,
# 8 inputs, four hidden layers of 127 units, 4 outputs; each rank trains on its share of 24 samples per step.
# Its layers hold these many parameters, which do not all split evenly:

# %%
layer_sizes = [sum(p.numel() for p in layer.parameters())
               for layer in examples.mlp(zero3_measure.WIDE) if list(layer.parameters())]
print("parameters per layer:", layer_sizes, f"{sum(layer_sizes):,} in all; the largest layer holds "
      f"{max(layer_sizes) / sum(layer_sizes):.0%} of them")
print("slices of the first layer on 4 ranks:", [shard_range(layer_sizes[0], rank, 4) for rank in range(4)])

# %% [markdown]
# To run a layer, a rank needs all of its parameters. So just before the layer's forward every rank pads its
# slice to `ceil(numel / n)` numbers, and an all-gather puts the whole vector together on every rank; the layer
# runs on views of it (`torch.func.functional_call`). Autograd keeps what the forward saved for backward (a
# Linear saves its weight, lesson 15). What does a rank hold of the layer once its forward has returned?

# %%
quiz.ask("20-after-forward")

# %% [markdown]
# `zero3_measure.measure(2)` starts 2 ranks once (the fewest that show it all, and the quickest to start on this
# machine) and trains the model for 3 steps four ways, each on a copy:
# DDP (Adam on every rank, gradients [all-reduced](00_start_here.ipynb#Glossary)), ZeRO-3, ZeRO-3 with prefetch, and ZeRO-3 without
# resharding (below). All collectives are rings of point-to-point messages (`dpcourse/sharded/rings.py`, the two
# halves of lesson 13's ring all-reduce), so that `traffic.counted` counts every byte sent. The last step runs
# under lesson 15's profiler (`memory.peak.allocations`). After ZeRO-3's forward, rank 0's gathered vectors and
# its shards:

# %% tags=["reveals-answer"]
with quiz.reveal("20-after-forward"):
    measured = zero3_measure.measure(2)
    zero3 = measured[0]["ways"]["ZeRO-3"]
    print("bytes each layer's gathered vector holds after the forward:", zero3["held_after_forward"])
    print("bytes of each layer's parameters:                          ", [4 * n for n in zero3["numels"]])
    print("bytes of rank 0's shard of each layer:                     ", zero3["shard_bytes"])

# %%
oracle = ranks.one_device(widths=zero3_measure.WIDE)
for way in zero3_measure.WAYS:
    per_rank = [{"parameters": rank["ways"][way]["parameters"]} for rank in measured]
    print(f"{way:<20} {ranks.first_difference(per_rank, oracle, widths=zero3_measure.WIDE, atol=1e-5) or 'same as one device'}")

# %% [markdown]
# ## Bytes on the wire
# DDP sends each gradient once through an all-reduce. ZeRO-3 all-gathers each layer twice and reduce-scatters
# its gradient once. How do the bytes compare?

# %%
quiz.ask("20-bytes-vs-ddp")

# %% tags=["reveals-answer"]
with quiz.reveal("20-bytes-vs-ddp"):
    for way in zero3_measure.WAYS:
        sent = [rank["ways"][way]["step_sent"] for rank in measured]
        print(f"{way:<20} bytes sent in one step, by rank: {sent}, "
              f"{sent[0] / measured[0]['ways']['DDP']['step_sent']:.3f} x DDP's")

# %% [markdown]
# ## Memory per rank over a step
# The profiler recorded every allocation and free of the last step on every rank, on top of what the rank held
# when the step began: its parameters (DDP) or shards (ZeRO-3), Adam's state and its batch.

# %%
ddp_run = measured[0]["ways"]["DDP"]
for way in ("DDP", "ZeRO-3", "ZeRO-3, no reshard"):
    run = measured[0]["ways"][way]
    print(f"{way:<20} rank 0 held {run['start']:>9,} bytes as the step began ({run['start'] / ddp_run['start']:.2f} x "
          f"DDP's), peaked at {max(run['allocated']):>9,} ({max(run['allocated']) / max(ddp_run['allocated']):.2f} x) "
          f"in the {zero3_measure.peak_phase(run)}")
display(zero3_memory({way: measured[0]["ways"][way] for way in ("DDP", "ZeRO-3", "ZeRO-3, no reshard")}))

# %% [markdown]
# The shading marks the phases of ZeRO-3's step (the other lines have their own, at other events). Between
# steps a ZeRO-3 rank holds its shards and its slices of Adam's state, where a DDP rank holds the whole model
# and the whole state; the batch is the same for both. During the step ZeRO-3's memory rises and falls layer by
# layer as each is gathered and given back, and its peak, in backward, is the fraction of DDP's that the cell
# prints (about half, on these 2 ranks). Without
# resharding, the layers gathered during the forward stay until their backward: a higher peak, for the
# all-gathers it saves. How high ZeRO-3 goes depends on the largest layer, gathered whole with its gradient:
# FSDP is applied layer by layer for that reason (lesson 21).
#
# ## Prefetch
# Gathering a layer only when it is needed makes the rank wait for the network before every layer. With
# prefetch the next layer's all-gather starts before the current layer runs: forward starts the layer after,
# backward the layer before (`prefetch=True` in `zero3.Zero3`; `dist.all_gather(..., async_op=True)` returns at
# once and the layer waits for it only when it runs).

# %%
quiz.ask("20-prefetch-peak")

# %% tags=["reveals-answer"]
with quiz.reveal("20-prefetch-peak"):
    peaks = {way: max(measured[0]["ways"][way]["allocated"]) for way in ("ZeRO-3", "ZeRO-3, prefetch")}
    layer = max(4 * 2 * -(-numel // 2) for numel in measured[0]["ways"]["ZeRO-3"]["numels"])  # padded, 2 ranks
    print(", ".join(f"{way}: rank 0's peak {peak:,} bytes" for way, peak in peaks.items()),
          f"({peaks['ZeRO-3, prefetch'] - peaks['ZeRO-3']:+,} with prefetch; the largest layer's gathered copy is "
          f"{layer:,} bytes)")
    display(zero3_memory({way: measured[0]["ways"][way] for way in ("DDP", "ZeRO-3", "ZeRO-3, prefetch")}))

# %% [markdown]
# ## Write it yourself
# ### Exercise: the bytes of one step
# Write `zero3_bytes_per_step(numels, world_size, reshard)`: the bytes one rank sends in one ZeRO-3 step with ring
# collectives, float32 parameters, for layers of `numels[i]` parameters. The check tries a grid of layer sizes
# and numbers of ranks; a test holds the same formula to the bytes counted above.

# %% tags=["solution"]
def zero3_bytes_per_step(numels, world_size, reshard):
    """Bytes one rank sends in one ZeRO-3 step: per layer, 2 or 3 collectives of n - 1 padded pieces."""
    ### BEGIN SOLUTION
    collectives = 3 if reshard else 2
    return sum(collectives * (world_size - 1) * -(-numel // world_size) * 4 for numel in numels)
    ### END SOLUTION


# %%
exercises.check("zero3_bytes_per_step", zero3_bytes_per_step)

# %% [markdown]
# ### Exercise: the all-gather before a layer runs
# Write `gather_full(shard, numel)`, run on every rank: every rank's slice of a vector of `numel` numbers in, the
# whole vector out, on every rank. The check sends it to 3 ranks as its source (lesson 13), calls it on
# known numbers, then trains ZeRO-3 with it in place of the library's all-gather and compares the weights with
# one device.

# %% tags=["solution"]
def gather_full(shard, numel):
    """The whole vector of `numel` numbers from every rank's slice: pad, all-gather, cut the padding off."""
    ### BEGIN SOLUTION
    n = dist.get_world_size()
    size = -(-numel // n)
    padded = torch.zeros(size, dtype=shard.dtype, device=shard.device)
    padded[: shard.numel()] = shard
    pieces = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(pieces, padded)
    return torch.cat(pieces)[:numel]
    ### END SOLUTION


# %%
exercises.check("gather_full", gather_full)

# %% [markdown]
# ### Exercise: the reduce-scatter after a layer's backward
# Write `shard_of_gradient(full_grad)`, run on every rank: `full_grad` is this rank's gradient for a layer's
# whole vector; return this rank's slice (`shard_range`) of the gradient averaged over the ranks, with one
# `dist.reduce_scatter`. Checked as the one above.

# %% tags=["solution"]
def shard_of_gradient(full_grad):
    """This rank's slice of the gradient averaged over the ranks: pad, reduce-scatter, divide, trim."""
    ### BEGIN SOLUTION
    n, rank, numel = dist.get_world_size(), dist.get_rank(), full_grad.numel()
    size = -(-numel // n)
    padded = torch.zeros(n * size, dtype=full_grad.dtype, device=full_grad.device)
    padded[:numel] = full_grad
    mine = torch.empty_like(padded[:size])
    dist.reduce_scatter(mine, list(padded.chunk(n)))
    start, stop = shard_range(numel, rank, n)
    return mine[: stop - start] / n
    ### END SOLUTION


# %%
exercises.check("shard_of_gradient", shard_of_gradient)

# %% [markdown]
# ## Summary
# - ZeRO-3 keeps on each rank a slice of every layer's parameters, of their gradients and of Adam's state.
#   A layer is whole only while it runs: an all-gather before its forward, its memory given back after, an
#   all-gather again before its backward, then a reduce-scatter of its gradient and the memory given back again.
# - Autograd keeps what forward saved; giving back a tensor's memory (`untyped_storage().resize_(0)`) and
#   refilling it before backward is how FSDP frees layers that autograd still refers to.
# - With ring collectives a ZeRO-3 step sends 1.5 times DDP's bytes (3 (n − 1) pieces per layer against
#   2 (n − 1)); keeping layers whole after forward (`reshard_after_forward=False`) sends DDP's bytes, for memory.
# - Memory per rank: the shards and a 1/n of Adam's state between steps, plus about one gathered layer at a time
#   during the step; prefetching the next layer gathers it while the current one is still whole, which raised
#   the peak by less than one layer here.
#
# ## Exercises
# 1. With `zero3_measure.bytes_per_step`, how many bytes does one ZeRO-3 step send per rank on 8 ranks for this
#    lesson's layers, with and without resharding, against a ring all-reduce of all their gradients? Write
#    `zero3_against_all_reduce(numels, world_size)`, then call it on `layer_sizes` and 8 ranks.
# 2. Train with `zero3_measure.measure(2)`: how does rank 0's peak on 2 ranks compare with its peak on 4, and
#    why is it not twice as high?

# %% tags=["solution"]
def zero3_against_all_reduce(numels, world_size):
    ### BEGIN SOLUTION
    return {"reshard": zero3_measure.bytes_per_step(numels, world_size, True),
            "no reshard": zero3_measure.bytes_per_step(numels, world_size, False),
            "all-reduce": 2 * (world_size - 1) * -(-sum(numels) // world_size) * 4}
    ### END SOLUTION


# %%
exercises.check("zero3_against_all_reduce", zero3_against_all_reduce)
