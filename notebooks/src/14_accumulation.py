# %% [markdown]
# # 14 · Gradient accumulation and no_sync
#
# **After this lesson you will be able to explain**
# - what K backwards into the same `.grad` give, with and without each loss divided by K, against one
#   K times bigger batch;
# - why the global batch is micro-batch × accumulation steps × replicas, checked against one device under
#   DataParallel and under DDP;
# - what DataParallel and DDP communicate at each micro-step, and what DDP's `no_sync()` changes about its
#   [all-reduces](00_start_here.ipynb#Glossary), with the forward inside the block or before it;
# - what a short last micro-batch does to each sample's weight in the gradient, and which weight makes it right.
#
# DataParallel runs on `dpcourse.devices(2)`, with the model moved to `devices[0]` before it is wrapped. DDP
# runs in 2 processes started from this notebook as in lesson 10, on [NCCL](00_start_here.ipynb#Glossary) only
# when every [rank](00_start_here.ipynb#Glossary) has a GPU of its own: NCCL needs one GPU per rank, so on a machine with one GPU (or none) the
# ranks use gloo and keep their tensors on the CPU (`backend_for` in `dpcourse/ranks/launcher.py`). Both are
# printed below.

# %%
import inspect
import warnings

from IPython.display import display

import dpcourse
from dpcourse import accumulation, examples, exercises, quiz, viz
from dpcourse.ddp.demos import accumulation as ddp_accumulation
from dpcourse.ranks import backend_for

devices = dpcourse.devices(2)
print("DataParallel's devices:", devices, "| the backend of 2 DDP ranks here:", backend_for(2))

# A replica that returns its own mean loss gets lesson 05's "all input tensors were scalars" warning; it is known here.
warnings.filterwarnings("ignore", message="Was asked to gather along dimension 0")

# %% [markdown]
# ## Accumulating gradients
# A batch that does not fit in memory can be cut into K **micro-batches**: forward and backward one at a
# time, and step the optimizer once after the last. The activations kept for backward then grow with the
# micro-batch, not with the batch (lesson 15 measures memory per device). It works because backward never
# overwrites a leaf's `.grad`: it adds to it (`AccumulateGrad`,
# `torch/csrc/autograd/functions/accumulate_grad.h`), the same `+=` that sums DataParallel's replicas in
# lesson 06. One optimizer step of accumulation:
#
# ```python
# optimizer.zero_grad()
# for x_k, y_k in zip(x.split(b), y.split(b)):      # K micro-batches of b rows
#     loss = loss_fn(model(x_k), y_k) * weight       # which weight? see below
#     loss.backward()                                # .grad += this micro-batch's gradient
# optimizer.step()                                   # one step for all K
# ```
#
# `accumulation.accumulate(model, x, y, micro_batch, rule)` runs this loop (`dpcourse/accumulation.py`), with
# the loss weighted by one of three rules:

# %%
for rule, meaning in accumulation.RULES.items():
    print(f"{rule:>6}: {meaning}")

# %% [markdown]
# Each loss is the course's cross-entropy, a mean over the rows of its micro-batch. What if nothing divides it?

# %%
quiz.ask("14-divide-by-steps")

# %% [markdown]
# 24 rows in 3 micro-batches of 8, each rule against the course's oracle, one backward over all 24 rows on
# one device:

# %% tags=["reveals-answer"]
with quiz.reveal("14-divide-by-steps"):
    x, y = examples.make_batch(24, device=devices[0])
    for rule in accumulation.RULES:
        model = examples.make_model().to(devices[0])
        oracle = examples.twin(model)
        accumulation.accumulate(model, x, y, micro_batch=8, rule=rule)
        examples.loss_fn(oracle(x), y).backward()
        ratio = (model[2].bias.grad @ oracle[2].bias.grad) / (oracle[2].bias.grad @ oracle[2].bias.grad)
        print(f"loss x {rule:<5}: max |g - g_one_device| {examples.gap(examples.max_grad_difference(model, oracle))}, "
              f"last bias gradient = {ratio:.4f} x one device's")

# %% [markdown]
# ## Under DataParallel
# The loop does not change when `model` is a `DataParallel`: the loss is computed on the gathered output
# (lesson 05) and the backward adds into the same `.grad` of the original model (lesson 06). A micro-batch
# of 8 rows on 2 devices puts 4 rows on each replica, so the rows that one optimizer step sees are
#
# **global batch = micro-batch per replica × accumulation steps × replicas = 4 × 3 × 2 = 24**:

# %%
model = examples.make_model().to(devices[0])  # the model goes to devices[0] before it is wrapped
oracle = examples.twin(model)
dp = dpcourse.DataParallel(model, devices=devices)
sizes = accumulation.accumulate(dp, x, y, micro_batch=8, rule="1/K")
examples.loss_fn(oracle(x), y).backward()
print(f"micro-batches {sizes} on 2 devices: 4 x {len(sizes)} x 2 = {4 * len(sizes) * 2} rows; "
      f"max |g - g_one_device| {examples.gap(examples.max_grad_difference(model, oracle))}")

# %% [markdown]
# Equal to one device's gradient. What does each micro-step cost in communication?

# %%
quiz.ask("14-dp-reduce-adds")

# %% [markdown]
# The same three micro-steps again, one trace each (`dpcourse.trace`, lesson 09):

# %% tags=["reveals-answer"]
with quiz.reveal("14-dp-reduce-adds"):
    model.zero_grad()
    dp_steps = []
    for x_k, y_k in accumulation.micro_batches(x, y, 8):
        with dpcourse.trace() as t:
            (examples.loss_fn(dp(x_k), y_k) / 3).backward()
        dp_steps.append({step: len(t.steps(step)) for step in ("replicate", "reduce-add")})
    for k, counts in enumerate(dp_steps, start=1):
        print(f"micro-step {k}: {counts}")

# %% [markdown]
# ## Under DDP: no_sync()
# Every DDP backward all-reduces the gradients, bucket by bucket (lesson 10). Accumulating K micro-batches
# would all-reduce K times, although only the sum is needed. `no_sync()` switches that off: inside it the
# forward does not prepare the all-reduce (`require_backward_grad_sync` is `False`; see
# `DistributedDataParallel._post_forward` in `torch/nn/parallel/distributed.py`), so the backward only adds
# into `.grad`. The first backward outside the block all-reduces the accumulated sum:
#
# ```python
# for k, (x_k, y_k) in enumerate(micro_batches):
#     if k < K - 1:
#         with model.no_sync():                       # forward and backward: .grad += this rank's gradient
#             (loss_fn(model(x_k), y_k) / K).backward()
#     else:
#         (loss_fn(model(x_k), y_k) / K).backward()   # all-reduces .grad, the sum of all K micro-steps
# optimizer.step()
# ```
#
# To count the all-reduces, each rank registers a communication hook. DDP calls a registered hook once per
# bucket instead of its own all-reduce; this one counts the call and then does what DDP's default does
# (`allreduce_hook` in `torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py`):

# %%
print(inspect.getsource(ddp_accumulation.counting_allreduce))

# %% [markdown]
# `ddp_accumulation.compare_schedules` starts 2 ranks once and runs, each from the same fresh model, the
# accumulations this section and the last one need (`dpcourse/ddp/demos/accumulation.py`). Each rank takes 4 rows
# per micro-step; the model's 848 bytes of gradients fit in one bucket:

# %%
schedules = ddp_accumulation.compare_schedules(world_size=2)

# %%
quiz.ask("14-no-sync-allreduces")

# %% [markdown]
# And if only the backward is inside the block, with the forward before it?

# %%
quiz.ask("14-forward-outside")

# %% [markdown]
# The first three runs, each loss divided by K = 3, against one device with all 24 rows:

# %% tags=["reveals-answer"]
with quiz.reveal("14-no-sync-allreduces", "14-forward-outside", part=1):
    every, no_sync, forward_outside = schedules.runs[:3]
    for run in (every, no_sync, forward_outside):
        print(run)
    print(f"max |g_no_sync - g_every_micro_step| {examples.gap((no_sync.grads[0] - every.grads[0]).abs().max().item())}")

# %% tags=["reveals-answer"]
with quiz.reveal("14-no-sync-allreduces", "14-forward-outside", part=2):
    display(viz.accumulation_timeline([
        ("DataParallel, 2 devices", "reduce-add", {"device 0": [s["reduce-add"] for s in dp_steps]}),
        ("DDP, 2 ranks", "all-reduce", {f"rank {r}": c for r, c in enumerate(every.allreduces)}),
        ("DDP, no_sync() around micro-steps 1-2", "all-reduce", {f"rank {r}": c for r, c in enumerate(no_sync.allreduces)}),
        ("DDP, only the backward inside no_sync()", "all-reduce",
         {f"rank {r}": c for r, c in enumerate(forward_outside.allreduces)}),
    ]))

# %% tags=["reveals-answer"]
with quiz.reveal("14-no-sync-allreduces", "14-forward-outside", part=3):
    print(schedules.runs[3])

# %% [markdown]
# ## Unequal micro-batches
# A batch of 10 rows in micro-batches of 4 leaves a last one of 2. Is dividing by K = 3 still right?

# %%
quiz.ask("14-last-partial")

# %% [markdown]
# `accumulation.sample_weights` measures how much each sample's loss counts: it runs the same loop on a
# stand-in model whose inputs are the per-sample losses, all ones, and reads their gradients (lesson 06
# measured the mean of means this way):

# %% tags=["reveals-answer"]
with quiz.reveal("14-last-partial", part=1):
    by_steps = accumulation.sample_weights(10, micro_batch=4, rule="1/K")
    print(by_steps)
    print(accumulation.sample_weights(10, micro_batch=4, rule="b_k/B"))
    display(viz.micro_batch_weights(by_steps))

# %% [markdown]
# Under DataParallel both biases can meet: micro-batches of 3 rows split 2 + 1 over 2 devices, and a model
# that returns each replica's mean loss (lesson 06's `examples.LossInside`) averages means inside every micro-step
# too. Four ways, 10 rows, each against one device:

# %%
def error_against_one_device(rule, per_replica_mean):
    model = examples.make_model().to(devices[0])
    oracle = examples.twin(model)
    if per_replica_mean:
        dp, loss_of = dpcourse.DataParallel(examples.LossInside(model), devices=devices), lambda m, x, y: m(x, y).mean()
    else:
        dp, loss_of = dpcourse.DataParallel(model, devices=devices), accumulation.mean_loss
    accumulation.accumulate(dp, x10, y10, 3, rule, loss_of)
    examples.loss_fn(oracle(x10), y10).backward()
    return examples.max_grad_difference(model, oracle)


x10, y10 = examples.make_batch(10, device=devices[0])
for per_replica_mean in (False, True):
    loss = "the mean of the replicas' mean losses" if per_replica_mean else "the loss on the gathered output"
    for rule in ("1/K", "b_k/B"):
        print(f"{loss:<38} x {rule:<5}: max |g - g_one_device| {examples.gap(error_against_one_device(rule, per_replica_mean))}")

# %% [markdown]
# Only the loss on the gathered output weighted by b_k / B matches. The mean of the replicas' means stays
# biased under either weight, because each micro-step already weighs its two chunks' rows unequally. Its
# sample weights, with 1/K:

# %%
mean_of_means = accumulation.sample_weights(10, micro_batch=3, rule="1/K", n_devices=2, per_replica_mean=True)
print(mean_of_means)
viz.micro_batch_weights(mean_of_means)

# %% [markdown]
# The last sample, alone in its micro-batch and on its replica, counts 1/4 of the whole gradient instead of
# 1/10. A sample in chunk j of micro-batch k weighs its micro-batch's weight, divided by the number of chunks
# n_k and by the chunk's rows c_kj: (1/K) / (n_k · c_kj). The fixes are lesson 06's (return per-sample
# losses, or the sum and the count) together with the b_k / B weight.
#
# DDP has the same arithmetic, with ranks for replicas: each rank's micro-batch losses are weighted, and
# DDP then averages the ranks. With a short last micro-batch on both ranks (4 + 4 + 2 rows each):

# %% tags=["reveals-answer"]
with quiz.reveal("14-last-partial", part=2):
    for run in schedules.runs[4:]:
        print(run)

# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: the weight of each micro-batch
# Write `loss_weights(sizes)`: `sizes[k]` is the number of rows of micro-batch k, whose loss is the mean over
# its rows. Return the number each loss must be multiplied by so that the accumulated gradient is one
# device's gradient over all the rows.

# %% tags=["solution"]
def loss_weights(sizes):
    """Each micro-batch's share of the rows: b_k / B."""
    ### BEGIN SOLUTION
    return [size / sum(sizes) for size in sizes]
    ### END SOLUTION


# %%
exercises.check("loss_weights", loss_weights)

# %% [markdown]
# ### Exercise: an accumulation loop
# Write `accumulate_gradients(model, x, y, micro_batch)`: cut `x, y` into micro-batches of `micro_batch` rows
# (the last may be shorter), and backward each one's `examples.loss_fn`, weighted so that afterwards the
# model's `.grad` is one device's gradient of `examples.loss_fn(model(x), y)`. `model` may be a
# `DataParallel`. Neither zero the gradients nor step: the check reads `.grad` when your function returns.

# %% tags=["solution"]
def accumulate_gradients(model, x, y, micro_batch):
    """Backward every micro-batch into .grad, each loss weighted by its share of the rows."""
    ### BEGIN SOLUTION
    for x_k, y_k in zip(x.split(micro_batch), y.split(micro_batch)):
        (examples.loss_fn(model(x_k), y_k) * len(x_k) / len(x)).backward()
    ### END SOLUTION


# %%
exercises.check("accumulate_gradients", accumulate_gradients)

# %% [markdown]
# ## Summary
# - Backward adds into `.grad`, so K micro-batches before one optimizer step accumulate the sum of K
#   gradients. Weighted by 1/K (equal micro-batches) or by b_k / B (any sizes), the sum is the gradient of the
#   whole batch; unweighted, it is K times too big.
# - Global batch = micro-batch per replica × accumulation steps × replicas, and the accumulated gradient
#   equals one device's gradient over that many rows, under DataParallel and under DDP.
# - DataParallel replicates and reduce-adds at every micro-step: its reduce is part of the autograd graph.
#   DDP all-reduces at every backward unless the micro-step, forward included, runs inside `no_sync()`;
#   then only the last backward all-reduces, with the same result to float rounding.
# - A short last micro-batch weighted by 1/K gives its samples more weight, like a mean of means; a mean of
#   per-replica means inside each micro-step adds lesson 06's bias on top. Weigh by rows, on the gathered
#   output.
#
# ## Exercises
# 1. With DataParallel on 3 devices, micro-batches of 4 rows and a batch of 10, predict each sample's weight
#    for the mean of per-replica mean losses with 1/K, then check with `accumulation.sample_weights`.
# 2. Run `ddp_accumulation.compare_schedules(runs=[("no_sync", (4, 4, 4, 4, 4), "1/K")])`: how many all-reduces
#    per rank, and how does the global batch compare with the single-device one it is checked against?
