# %% [markdown]
# # 16 · Mixed precision: autocast in threads, GradScaler, compressed gradients
#
# **After this lesson you will be able to explain**
# - why [autocast](00_start_here.ipynb#Glossary) is set per thread, how DataParallel's worker threads get it back, and what a thread that does
#   not compute in;
# - what float16 and bfloat16 keep and lose, range against precision, in numbers;
# - how `GradScaler` scales the loss, unscales the gradients, skips a step on an inf or a NaN and adapts its
#   scale;
# - what DDP's float16 and bfloat16 compression hooks do to the averaged gradient, measured.
#
# The autocast sections run on the CPU, on a GPU machine too. CPU autocast computes in bfloat16 by default and
# in float16 when asked; it casts CPU tensors only, so their DataParallel gets explicit CPU devices, `["cpu",
# "cpu"]`, not `dpcourse.devices(2)`, whose replicas on a GPU would compute in float32 under
# `torch.autocast("cpu")`. GradScaler trains on `dpcourse.devices(n)`, with autocast and the scaler of
# `devices[0]`'s type: `torch.amp.GradScaler("cpu")` on CPU devices works as `"cuda"` does on a GPU. DDP runs in
# 2 processes as in lesson 10, on gloo with CPU tensors unless every [rank](00_start_here.ipynb#Glossary) has a GPU of its own:
# [NCCL](00_start_here.ipynb#Glossary) needs one GPU per rank.

# %%
import math

import torch
from IPython.display import display

from dpcourse import examples, exercises, precision, quiz, viz
from dpcourse.ddp.demos import compression as ddp_compression
from dpcourse.ranks import backend_for

model = examples.make_model()  # stays on the CPU: this lesson is about CPU autocast
x, y = examples.make_batch(8)
print("the backend of 2 DDP ranks here:", backend_for(2))

# %% [markdown]
# ## autocast in threads
# `torch.autocast` runs chosen operations, matrix products among them, in a lower precision while the block
# lasts (`torch/amp/autocast_mode.py`):

# %%
with torch.autocast("cpu"):
    print("inside:  autocast dtype", torch.get_autocast_dtype("cpu"), "| the first Linear computes in",
          model[0](x).dtype)
print("outside: the first Linear computes in", model[0](x).dtype)

# %% [markdown]
# Whether autocast is on, and its dtype, belong to the thread that entered the block, like grad mode
# (lesson 04). DataParallel runs every replica in a thread of its own. What does a thread started inside
# the block compute in?

# %%
quiz.ask("16-plain-thread")

# %% [markdown]
# `precision.thread_dtypes` runs the model four ways, each inside its own `torch.autocast("cpu")` block, and a
# forward hook on the first `Linear` records the thread it ran in and the dtype of its output
# (`dpcourse/precision.py`):

# %% tags=["reveals-answer"]
with quiz.reveal("16-plain-thread"):
    in_bfloat16 = precision.thread_dtypes(torch.bfloat16)
    for way, calls in in_bfloat16.items():
        print(f"{way:<36} {calls}")

# %%
quiz.ask("16-enabled-only")

# %% tags=["reveals-answer"]
with quiz.reveal("16-enabled-only"):
    in_float16 = precision.thread_dtypes(torch.float16)
    for way, calls in in_float16.items():
        print(f"{way:<36} {calls}")
    print("a new thread's default autocast dtypes:",
          precision.in_plain_thread(lambda: {device: torch.get_autocast_dtype(device) for device in ("cpu", "cuda")}))
    display(viz.autocast_threads({"torch.autocast('cpu')": in_bfloat16, "torch.autocast('cpu', dtype=torch.float16)": in_float16}))

# %% [markdown]
# A dtype that differs between threads can also break a model outright. Autocast keeps the low-precision
# copy of each weight while the outermost block lasts, to cast it once per forward. That cache is one map for
# the whole process, keyed by the weight alone (`aten/src/ATen/autocast_mode.cpp: get_cached_casts`),
# while the dtype belongs to each thread. Here the main thread runs the model in float16 first, then the
# re-enacted worker in the same block:

# %%
print(precision.shared_cast_cache())

# %% [markdown]
# The worker cast its input to bfloat16 and found the main thread's float16 weight in the cache.
#
# This demo runs the original model, whose weights are leaf Parameters, in both threads. Autocast caches only
# casts of float32 leaf tensors that require grad and are not views (`cached_cast` in
# `aten/src/ATen/autocast_mode.cpp`). In training torch's DataParallel cannot hit this: with grad enabled its
# replicas' weights are outputs of `Broadcast`, not leaves. Under `torch.no_grad()` it replicates with
# `detach=True` (`torch/nn/parallel/data_parallel.py:200`, `replicate.py:93-99`) and replica 0 gets the
# original Parameters, so an inference step inside an autocast block that already ran the model in the main
# thread with another dtype can meet the collision shown here.

# %% [markdown]
# ## float16 and bfloat16
# Both use 16 bits. float16 spends more of them on the fraction, bfloat16 on the exponent, which gives it
# float32's range:

# %%
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):<15} bits of fraction {round(-torch.tensor(info.eps).log2().item()):>2}, "
          f"largest {info.max:.3g}, smallest normal {info.tiny:.3g}")
for value in (0.1, 1.001, 2.9e-8, 3e-8, 65519.0, 65520.0):
    number = torch.tensor(value)
    print(f"{value:>8g} stored as float16 {number.half().item():.6g}, as bfloat16 {number.bfloat16().item():.6g}")

# %% [markdown]
# float16 rounds about 8 times more finely (1.001 survives in float16, three more bits of fraction), but it
# rounds to the nearest value it has: anything under about 3e-8, half its smallest value 6e-8, becomes 0, and
# anything from 65520 up, halfway past its largest value 65504, becomes inf. bfloat16 keeps both, coarsely.

# %% [markdown]
# ## GradScaler
# Under float16 autocast the backward of each float16 operation produces float16 gradients, and small ones
# flush to zero (torch's documentation, "Gradient Scaling" in `https://docs.pytorch.org/docs/stable/amp.html`).
# `precision.gradient_underflow` multiplies the course model's loss by 1, 1e-4 and 1e-6 to stand in for
# small gradients, and compares each way of computing them with float32:

# %%
print(precision.gradient_underflow())

# %% [markdown]
# - With the loss times 1e-6, every float16 gradient entry became 0: no update at all.
# - Multiplying the loss by a scale S first makes every gradient S times larger (the chain rule), so they
#   fit; dividing them by S afterwards, in float32, gives them back. With S = 2^16, GradScaler's default,
#   nothing is lost.
# - bfloat16 loses nothing without a scale, but at every size its error is larger than scaled float16's.
#
# The scale must be large enough to lift the small gradients and small enough that the large ones do not
# overflow, and that changes during training. `torch.amp.GradScaler` searches for it
# (`torch/amp/grad_scaler.py`):
#
# ```python
# scaler = torch.amp.GradScaler("cpu")       # scale 2**16 at first
# for x, y in data:
#     optimizer.zero_grad()
#     with torch.autocast("cpu", dtype=torch.float16):
#         loss = loss_fn(model(x), y)
#     scaler.scale(loss).backward()           # backward of loss * scale: every gradient scaled
#     scaler.unscale_(optimizer)              # gradients / scale, in float32; looks for inf and NaN
#     scaler.step(optimizer)                  # optimizer.step(), unless unscale_ found an inf or a NaN
#     scaler.update()                         # the scale for the next step
# ```
#
# (`step` calls `unscale_` when you have not; call it yourself to clip the unscaled gradients,
# `GradScaler.step` in `torch/amp/grad_scaler.py`.)
# `precision.scaler_steps` runs this loop on `dpcourse.devices(1)`, with autocast and the scaler for the type
# of `devices[0]` (`"cpu"` on CPU devices, `"cuda"` on a GPU), for 12 steps with `growth_interval=3` and a
# scale of 2^24, too large on purpose. Its optimizer, `precision.PlainSGD`, is SGD's update from `examples.sgd_step` (lesson 07) with the
# attributes GradScaler uses. What happens at the first step?

# %%
quiz.ask("16-overflow-skip")

# %% tags=["reveals-answer"]
with quiz.reveal("16-overflow-skip"):
    steps = precision.scaler_steps()
    for number, step in enumerate(steps, start=1):
        print(f"step {number:>2}: scale 2^{math.log2(step.scale):.0f}, inf or NaN found {step.found_inf!s:<5}, "
              f"weights changed {step.stepped!s:<5}, next scale 2^{math.log2(step.next_scale):.0f}")
    display(viz.loss_scale(steps))

# %% [markdown]
# Under DataParallel nothing changes: the scaler and the optimizer hold the original model's parameters,
# and DataParallel sums the replicas' gradients into them (lesson 06). The same run on 2 devices:

# %%
on_two = precision.scaler_steps(n_devices=2)
print("scales:", [f"2^{math.log2(step.scale):.0f}" for step in on_two])
print("skipped:", [number for number, step in enumerate(on_two, start=1) if not step.stepped])
settled = [math.log2(max(step.scale for step in run if step.stepped)) for run in (steps, on_two)]
print(f"largest scale of a step that went through: 2^{settled[0]:.0f} on one device, 2^{settled[1]:.0f} on 2")

# %% [markdown]
# In the stored run, on CPU devices, the scale settles one doubling higher on 2 devices (the last line
# compares the two runs on your devices). Each replica's float16 weight gradient sums only its own 32 of the 64 rows, so it
# overflows at a larger scale; the sum onto device 0 happens after the cast back to float32.

# %% [markdown]
# ## DDP: compressed all-reduce
# DDP can [all-reduce](00_start_here.ipynb#Glossary) the gradients in 16 bits, half the bytes on the
# network, with a communication hook (lesson 14 counted all-reduces with one). `fp16_compress_hook` and
# `bf16_compress_hook` cast each bucket to float16 or bfloat16, divide it by the number of ranks, all-reduce
# the 16-bit copy and copy the sum back into the float32 gradients (`_compress_hook` in
# `torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py`).
#
# `ddp_compression.compression` starts 2 ranks (on the backend printed at the top) and runs one backward per
# hook, each rank on its half of 16 rows, for the loss times 1, 1e-6, 2^16 and 2^24. Rank 0 also registers
# `bf16_compress_hook`, and whether DDP accepts it depends on how your torch was built, not on the backend or
# the device. `_check_comm_hook` (`torch/nn/parallel/distributed.py:2485-2503`, torch 2.13) recognises the hook
# by its name and passes it when torch is a CUDA (or ROCm) build, `torch.version.cuda` (or `.hip`) set, with
# [NCCL](00_start_here.ipynb#Glossary) 2.10 or later compiled in, or an XPU build with XCCL. It never reads the
# [process group](00_start_here.ipynb#Glossary)'s backend or the module's device: a CUDA build accepts the hook even on gloo with a CPU
# module, a CPU-only build refuses it everywhere. The cell prints what your build says and what DDP did:

# %%
compressed = ddp_compression.compression(world_size=2)
print("what the check reads:", ddp_compression.bf16_build_check())
print("bf16_compress_hook on gloo:", compressed.bf16_compress_hook)

# %% [markdown]
# gloo adds bfloat16 tensors on every build, so the course measures bfloat16 with
# `ddp_compression.compressed_allreduce(torch.bfloat16)`: the same steps as `_compress_hook` under another
# name (`dpcourse/ddp/demos/compression.py`; with float16 it gives exactly `fp16_compress_hook`'s gradients, a test
# checks). Which compression is closer to the float32 all-reduce for ordinary gradients?

# %%
quiz.ask("16-compression-error")

# %% tags=["reveals-answer"]
with quiz.reveal("16-compression-error"):
    print(compressed)
    print("every rank holds the same gradient under every hook:", compressed.ranks_agree)
    ordinary = {row["hook"]: row["relative_error"] for row in compressed.rows if row["multiplier"] == 1.0}
    bf16_error, fp16_error = ordinary["bf16, dpcourse's copy"], ordinary["fp16_compress_hook"]
    print(f"ordinary gradients: bfloat16's error is {bf16_error / fp16_error:.1f} times float16's")
    display(viz.compression_error(compressed))

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: a worker thread that keeps the caller's autocast
# Write `in_thread_with_autocast(function, x)`: call `function(x)` in a new `threading.Thread` under the
# caller's CPU autocast state, on or off *and* its dtype, wait for it, and return its result.

# %% tags=["solution"]
import threading


def in_thread_with_autocast(function, x):
    """function(x) in a new thread, under the caller's CPU autocast flag and dtype."""
    ### BEGIN SOLUTION
    enabled, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")  # read in the caller
    result = []

    def work():
        with torch.autocast("cpu", enabled=enabled, dtype=dtype):
            result.append(function(x))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return result[0]
    ### END SOLUTION


# %%
exercises.check("in_thread_with_autocast", in_thread_with_autocast)

# %% [markdown]
# ### Exercise: GradScaler's scale
# Write `next_scale(scale, found_inf, good_steps, growth_interval)`: what `GradScaler.update()` does with its
# default factors. `good_steps` counts the steps in a row without an inf or a NaN. Return
# `(new_scale, new_good_steps)`.

# %% tags=["solution"]
def next_scale(scale, found_inf, good_steps, growth_interval):
    """Halve after an overflow; double after growth_interval good steps in a row."""
    ### BEGIN SOLUTION
    if found_inf:
        return scale * 0.5, 0
    if good_steps + 1 == growth_interval:
        return scale * 2.0, 0
    return scale, good_steps + 1
    ### END SOLUTION


# %%
exercises.check("next_scale", next_scale)

# %% [markdown]
# ## Summary
# - Autocast's flag and dtype belong to a thread. A new thread computes in float32 until it enters autocast
#   itself. dpcourse's `parallel_apply` passes the caller's flag and dtype into every replica's thread; torch's
#   passes the flag only, so its workers use the thread's default dtype (bfloat16 on the CPU, float16 on CUDA).
# - float16 rounds finely but flushes gradients under about 3e-8 to 0 and overflows from 65520 up; bfloat16 has
#   float32's range and a coarser fraction.
# - GradScaler multiplies the loss by a scale so that small float16 gradients survive, divides them back in
#   float32, skips any step whose gradients hold an inf or a NaN and halves the scale, and doubles it after
#   `growth_interval` good steps. It works unchanged under DataParallel.
# - DDP's compression hooks all-reduce in 16 bits: float16 more precise on ordinary gradients, bfloat16
#   safe for tiny or huge ones. Whether DDP accepts `bf16_compress_hook` depends on how torch was built
#   (CUDA or ROCm with NCCL 2.10+, or XPU with XCCL), not on the backend. An overflow reaches every rank alike, and GradScaler skips
#   that step everywhere.
#
# ## Exercises
# 1. Under `torch.autocast("cpu", dtype=torch.float16)`, run the model through `dpcourse.DataParallel` with
#    `devices=["cpu"]` and find with `precision.computed_dtypes` which thread runs the forward, and
#    in which dtype.
# 2. Measure the largest scaled float16 gradient at scale 2^20 on one device with all 64 rows and with each
#    half of them, to check why DataParallel's scale settled one doubling higher.
# 3. Run `ddp_compression.compression(multipliers=(1e-4,))`: does float16 compression already lose entries there?
