# %% [markdown]
# # 08 · Myths, run and corrected
#
# **After this lesson you will be able to explain**
# - whether DataParallel is model parallelism, and whether it gives a device room for a bigger model;
# - whether padded batches, custom `nn.Parameter`s and `torch.matmul` need special care;
# - why DataParallel's overhead makes a step slower but never stalls it;
# - what the code examples of popular DataParallel articles really do when you run them, and how to fix
#   the ones that break.
#
# The course started from four articles about DataParallel, its "seeds":
#
# - "How can PyTorch DataParallel be used with a custom model?"
# - "Why is training not starting with nn.DataParallel?"
# - "Pytorch Advanced Part-1 DataParallel" (Rahul Chand)
# - "DataParallel basics in PyTorch - Deep Dive"
#
# Every claim in them was checked against torch's source (`docs/seed_coverage.md` lists all 85 and the
# lesson that settles each). Here the classic wrong ones meet the running code: read the claim, predict,
# run, correct. Each is quoted with the article it comes from.

# %%
import threading
import time

import torch
from torch import nn

import dpcourse
from dpcourse import examples, exercises, quiz

devices = dpcourse.devices(4)  # every model goes to devices[0] before it is wrapped, as torch requires

# %% [markdown]
# ## Myths, run and corrected
# ### "…making it a form of *model parallelism*"
# So says "Why is training not starting with nn.DataParallel?".

# %%
quiz.ask("08-not-model-parallel")

# %% [markdown]
# A forward hook on the first layer runs inside every replica (replicas share the original's hooks) and
# reports the weight it multiplies by and the rows it got:

# %% tags=["reveals-answer"]
with quiz.reveal("08-not-model-parallel"):
    model = examples.make_model().to(devices[0])
    seen = []
    model[0].register_forward_hook(
        lambda layer, args, out: seen.append((threading.current_thread().name, list(layer.weight.shape), len(args[0])))
    )
    x, y = examples.make_batch(12, device=devices[0])
    dpcourse.DataParallel(model, devices=dpcourse.devices(3))(x)
    for thread, weight, rows in sorted(seen):
        print(f"{thread}: weight {weight}, {rows} of the 12 rows")

    replicas = dpcourse.replicate(model, dpcourse.devices(3))
    held = [sum(t.nbytes for m in r.modules() for t in vars(m).values() if isinstance(t, torch.Tensor)) for r in replicas]
    print("parameter bytes held by each replica:", held, "| the whole model:", sum(p.nbytes for p in model.parameters()))

# %% [markdown]
# ### "this padding is not accounted for by `DataParallel`, that expects a completely consistent tensor"
# ("Why is training not starting with nn.DataParallel?")

# %%
quiz.ask("08-padding-fine")

# %% tags=["reveals-answer"]
with quiz.reveal("08-padding-fine"):
    from torch.nn.utils.rnn import pad_sequence

    generator = torch.Generator().manual_seed(0)
    padded = pad_sequence([torch.randn(n, 10, generator=generator) for n in (10, 20, 30, 40)], batch_first=True)
    padded = padded.to(devices[0])
    layer = nn.Linear(10, 20).to(devices[0])
    for n in (2, 4):
        out = dpcourse.DataParallel(layer, devices=dpcourse.devices(n))(padded)
        print(f"{n} devices: {list(padded.shape)} -> {list(out.shape)}, equal to one device: {torch.allclose(out, layer(padded))}")

# %% [markdown]
# ### "…may actually stall the training loop if the overhead outweighs the parallelization gains"
# ("Why is training not starting with nn.DataParallel?")
#
# **Predict:** one replica takes 50 ms longer than the other on every step. Does training hang, fail, or
# finish each step late?

# %%
class SlowReplica1(nn.Module):
    """The course model, with a 50 ms nap whenever it runs on dpcourse's thread for replica 1."""

    def __init__(self):
        super().__init__()
        self.net = examples.make_model()

    def forward(self, x):
        if threading.current_thread().name == "replica-1":
            time.sleep(0.05)
        return self.net(x)


start = time.perf_counter()
losses = examples.train(dpcourse.DataParallel(SlowReplica1().to(devices[0]), devices=dpcourse.devices(2)), steps=3)
late = time.perf_counter() - start >= 3 * 0.05
print("3 steps finished, losses:", [round(loss, 4) for loss in losses])
print("every step waited for the slow replica:", late)
one_device = examples.train(examples.make_model().to(devices[0]), steps=3)
print("same losses as one device:", torch.allclose(torch.tensor(losses), torch.tensor(one_device)))

# %% [markdown]
# **Correction.** Overhead, like a slow replica, makes each step *longer*: `parallel_apply` waits for every
# replica's thread and then returns (`torch/nn/parallel/parallel_apply.py: parallel_apply`). Nothing in
# DataParallel waits for a throughput condition, so overhead cannot stall it. A DataParallel run that truly
# hangs, with no traceback, has a replica or a copy that never finishes: `parallel_apply` waits for every
# replica's thread with no timeout (`torch/nn/parallel/parallel_apply.py:136`), so a replica that blocks
# (a lock, a `queue.get()`, a loop that never ends) holds up the step on any machine (lesson 04 shows one;
# pytorch/pytorch#8388, #4987). On GPUs it is often a GPU-to-GPU communication problem
# ([P2P](00_start_here.ipynb#Glossary) copies, [NCCL](00_start_here.ipynb#Glossary);
# pytorch/pytorch#4241, #10681, and #52142, where a commenter found that `NCCL_P2P_DISABLE=1` helped).

# %% [markdown]
# ### "Model weights update as if training on the full batch at once"
# ("DataParallel basics in PyTorch - Deep Dive") True for the running example (lesson 06). What about
# BatchNorm?

# %%
quiz.ask("08-batchnorm-running-mean")

# %% tags=["reveals-answer"]
with quiz.reveal("08-batchnorm-running-mean"):
    halves = torch.cat([torch.zeros(4, 1), torch.full((4, 1), 10.0)])
    one_device, two_devices = nn.BatchNorm1d(1, momentum=1.0), nn.BatchNorm1d(1, momentum=1.0)
    one_device(halves)
    dpcourse.DataParallel(two_devices.to(devices[0]), devices=dpcourse.devices(2))(halves)
    print("running_mean on one device:", one_device.running_mean.item(), "| on 2 devices:", two_devices.running_mean.item())

# %% [markdown]
# ### The other classic myths, and where the course corrects them
#
# | the claim (article) | what really happens | lesson |
# |---|---|---|
# | "gradients are averaged across GPUs" (all four) | `Broadcast.backward` **sums** them into the original (`torch/nn/parallel/_functions.py`) | [06_backward](06_backward.ipynb) |
# | "gathers the losses … backpropagating a single, averaged loss" ("Why is training not starting with nn.DataParallel?") | gather returns what `forward` returned; the loss is your code | [05_gather](05_gather.ipynb) |
# | a scalar output becomes a vector of length `num_gpus` ("Pytorch Advanced Part-1 DataParallel") | its length is the number of chunks actually used | [05_gather](05_gather.ipynb) |
# | batches not divisible by the GPU count cause dimension errors ("Why is training not starting with nn.DataParallel?") | `torch.chunk` gives [3, 3, 3, 1]; gather works | [02_scatter](02_scatter.ipynb) |
# | the batch becomes one chunk per GPU, evenly ("DataParallel basics in PyTorch - Deep Dive") | at most one per GPU; 6 rows on 4 use 3 | [02_scatter](02_scatter.ipynb) |
# | passing CPU inputs is wrong ("DataParallel basics in PyTorch - Deep Dive") | scatter copies each chunk to its device | [02_scatter](02_scatter.ipynb) |
# | replicas can drift: "parameter synchronization" issues ("Why is training not starting with nn.DataParallel?") | replicas are rebuilt from one master every forward | [03_replicate](03_replicate.ipynb) |
# | training "fails to start" because of data distribution ("Why is training not starting with nn.DataParallel?") | data faults raise at once, naming the replica | [04_parallel_apply](04_parallel_apply.ipynb) |
# | the model must be on the GPU *before* wrapping ("DataParallel basics in PyTorch - Deep Dive") | placement is checked at every forward, before anything else (`torch/nn/parallel/data_parallel.py:178-184`; pytorch/pytorch#17363 moved the check there) | [07_end_to_end](07_end_to_end.ipynb) |
# | "speeds up training" ("DataParallel basics in PyTorch - Deep Dive"); poor scaling "very well documented" ("Why is training not starting with nn.DataParallel?") | it can lose to one device; lesson 09 shows why | [09_performance](09_performance.ipynb) |
# | "not true … in multi-node multi-gpu settings" ("Why is training not starting with nn.DataParallel?") | DataParallel is one process on one machine | [10_ddp_bridge](10_ddp_bridge.ipynb) |

# %% [markdown]
# ## The seeds' code, run and corrected
# The articles' own examples, run as written with three changes, so that they run on any machine:
# `nn.DataParallel(model)` becomes `dpcourse.DataParallel(model, devices=dpcourse.devices(n))`, `.cuda()`
# and `.to('cuda')` become `.to(devices[0])` (a GPU where there is one), and the
# `if torch.cuda.device_count() > 1:` guards go (they would skip DataParallel on one GPU or none).
# `super(MyModel, self).__init__()` is written `super().__init__()`, which means the same.
#
# ### "How can PyTorch DataParallel be used with a custom model?", Example 1: "A Basic Compliant Model"
# **Predict:** does this model need any change to run under DataParallel?

# %%
class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(10, 5)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(5, 2)

    def forward(self, x):
        x = self.linear1(x)
        x = self.relu(x)
        x = self.linear2(x)
        return x


torch.manual_seed(0)
model = MyModel()
inputs = torch.randn(4, 10).to(devices[0])
model = dpcourse.DataParallel(model, devices=dpcourse.devices(2))  # article: model = DataParallel(model)
model.to(devices[0])  # article: model.to('cuda'), its last line
print("output shape:", model(inputs).shape, "| equal to one device:", torch.allclose(model(inputs), model.module(inputs)))

# %% [markdown]
# **It runs, unchanged.** The article's last line, `model.to('cuda')`, sits outside its guard, so on a machine
# without CUDA the script stops there (a CPU-only torch raises "Torch not compiled with CUDA enabled",
# `torch/cuda/__init__.py: _lazy_init`). Corrected: pick the device once,
# `device = "cuda" if torch.cuda.is_available() else "cpu"`, and move model and data there. What the guard
# really changes is the checkpoint's keys (`module.` prefix, lesson 07).
#
# ### "How can PyTorch DataParallel be used with a custom model?", Example 2: "Handling Custom Layers"
# The article's layer registers its weights as `nn.Parameter`s and multiplies with `torch.mm` instead of using
# `nn.Linear`. Predict first:

# %%
quiz.ask("08-custom-parameter")

# %% tags=["reveals-answer"]
class MyCustomLayer(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.mm(x, self.weight) + self.bias


class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.custom_layer = MyCustomLayer(10, 5)
        self.linear = nn.Linear(5, 2)

    def forward(self, x):
        x = self.custom_layer(x)
        x = self.linear(x)
        return x


with quiz.reveal("08-custom-parameter"):
    torch.manual_seed(0)
    model = MyModel().to(devices[0])
    oracle = examples.twin(model)
    inputs = torch.randn(6, 10).to(devices[0])
    dpcourse.DataParallel(model, devices=dpcourse.devices(2))(inputs).pow(2).mean().backward()
    oracle(inputs).pow(2).mean().backward()
    print("MyCustomLayer: gradients equal the one-device oracle's:", examples.max_grad_difference(model, oracle) < 1e-5)

# %% [markdown]
# ### "How can PyTorch DataParallel be used with a custom model?", Example 3: `ProblematicModel` "will likely result in errors or unexpected behavior"
# **Predict:** run on one CPU with **no** DataParallel at all. Does it work?

# %%
class ProblematicModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 2)
        self.internal_state = torch.zeros(2)  # Incorrect: Not a Parameter

    def forward(self, x):
        self.internal_state += torch.sum(x, dim=0)  # Incorrect: Modifies internal state directly
        x = self.linear(x)
        return x, self.internal_state  # Incorrect: Returning external state


def first_and_last_line(error):
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0]}" + (f"\n    ... {lines[-1]}" if len(lines) > 1 else "")


inputs = torch.randn(4, 10)
for label, run in [("no DataParallel", ProblematicModel()),
                   ("2 devices", dpcourse.DataParallel(ProblematicModel().to(devices[0]), devices=dpcourse.devices(2)))]:
    try:
        run(inputs)
    except RuntimeError as error:
        print(f"{label}: {first_and_last_line(error)}")

# %% [markdown]
# **True, for a reason the article never gives:** `zeros(2) += sum(x, dim=0)` adds a `(10,)` tensor to a `(2,)`
# one, an ordinary shape bug that fails with or without DataParallel; DataParallel only re-raises it,
# naming the replica. Reproduce a failure without DataParallel first: many "DataParallel bugs" are not.
#
# The article's advice is to make `internal_state` an `nn.Parameter`. Fix the shape and try it:

# %%
class ParameterState(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 2)
        self.internal_state = nn.Parameter(torch.zeros(10))  # the article's fix, with the shape corrected

    def forward(self, x):
        self.internal_state += torch.sum(x, dim=0)
        return self.linear(x), self.internal_state


for n in (1, 2):
    try:
        dpcourse.DataParallel(ParameterState().to(devices[0]), devices=dpcourse.devices(n))(inputs)
    except RuntimeError as error:
        print(f"{n} device(s): {first_and_last_line(error)}")

# %% [markdown]
# **False.** A running total is not learnable, and autograd forbids changing a `Parameter` in place
# during forward: on one device it is a leaf that requires grad. Under DataParallel the error above comes from
# replica 0, whose copy is a view made by `Broadcast` (`torch/nn/parallel/_functions.py: Broadcast`), and autograd
# forbids modifying such a view in place. In torch, too, replica 0's copy is your parameter passed through
# `Broadcast` as it is, which autograd treats the same way; replicas 1, 2, … get fresh tensors that could be
# modified (`torch/csrc/cuda/comm.cpp: broadcast_coalesced`), while dpcourse's are views in every replica.
# Either way the step fails, at replica 0. A registered buffer would run, but under DataParallel only
# replica 0's update survives (lesson 03). The exact fix: each replica **returns** its partial sum, and you
# add them up after the gather:

# %%
class ReturnedState(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 2)
        self.register_buffer("internal_state", torch.zeros(10))  # moves with .to(), lives in state_dict

    def forward(self, x):
        return self.linear(x), torch.sum(x, dim=0, keepdim=True)  # one (1, 10) row per replica


fixed = ReturnedState().to(devices[0])
output, partial_sums = dpcourse.DataParallel(fixed, devices=dpcourse.devices(2))(inputs)
fixed.internal_state += partial_sums.sum(dim=0)  # outside forward: one update, from every replica's rows
print("partial sums gathered:", list(partial_sums.shape), "| state equals the full-batch sum:",
      torch.allclose(fixed.internal_state, inputs.to(devices[0]).sum(dim=0)))

# %% [markdown]
# ### "Why is training not starting with nn.DataParallel?", Example 1: padded sequences "will not work when using the DataParallel"
# The article's dataset, collate function, model and loop, run on 1, 2 and 4 devices from the same seed:

# %%
from torch.utils.data import DataLoader, Dataset


class CustomDataset(Dataset):
    def __init__(self, seq_lengths):
        self.seq_lengths = seq_lengths

    def __len__(self):
        return len(self.seq_lengths)

    def __getitem__(self, idx):
        seq_len = self.seq_lengths[idx]
        return torch.randn(seq_len, 10)  # Varying sequence length


class SimpleModel(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.linear = nn.Linear(input_size, hidden_size)

    def forward(self, x):
        return self.linear(x)


def seed_loop(n_devices):
    torch.manual_seed(0)
    dataset = CustomDataset([10, 20, 30, 40, 5, 15, 25, 35])
    dataloader = DataLoader(dataset, batch_size=4, shuffle=False,
                            collate_fn=lambda batch: torch.nn.utils.rnn.pad_sequence(batch, batch_first=True))
    model = SimpleModel(10, 20).to(devices[0])  # the fix: model, inputs and target on devices[0], always
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters())
    if n_devices > 1:  # article: if torch.cuda.device_count() > 1: model = nn.DataParallel(model); model.cuda()
        model = dpcourse.DataParallel(model, devices=dpcourse.devices(n_devices))
    shapes, losses = [], []
    for inputs in dataloader:
        optimizer.zero_grad()
        output = model(inputs.to(devices[0]))
        target = torch.randn(output.shape).to(devices[0])
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        shapes.append(list(output.shape))
        losses.append(round(loss.item(), 4))
    return shapes, losses


for n in (1, 2, 4):
    shapes, losses = seed_loop(n)
    print(f"{n} device(s): outputs {shapes}, losses {losses}")

# %% [markdown]
# **False.** Same shapes and same losses on every device count: padding is invisible to DataParallel. The
# script's real bug is its device guard: it moves the model and inputs only when there are **more than
# one** GPU, but `target` whenever there is **at least one**, so on a single-GPU machine `criterion` gets a
# CPU output and a CUDA target and fails with a device mismatch, no DataParallel involved. Above, model, inputs
# and target go to `devices[0]` whatever the count: the fix.
#
# ### "Why is training not starting with nn.DataParallel?", Example 3: `torch.matmul(x, self.weight)` "may not have correct device affinity"
# **Predict:** which weight does each replica multiply by: your model's `Parameter` object, or another tensor?

# %%
class CustomLayer(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(input_size, hidden_size))

    def forward(self, x):
        # this operation may not have correct device affinity in a distributed environment
        return torch.matmul(x, self.weight)


class ModelWithCustomLayer(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.custom_layer = CustomLayer(input_size, hidden_size)
        self.linear = nn.Linear(hidden_size, hidden_size)

    def forward(self, x):
        x = self.custom_layer(x)
        x = self.linear(x)
        return x


torch.manual_seed(0)
model = ModelWithCustomLayer(100, 50).to(devices[0])
oracle = examples.twin(model)
original = model.custom_layer.weight
weights_seen = []
model.custom_layer.register_forward_pre_hook(
    lambda layer, args: weights_seen.append((threading.current_thread().name, layer.weight is original))
)
input_tensor, target = torch.randn(32, 100).to(devices[0]), torch.randn(32, 50).to(devices[0])
nn.MSELoss()(dpcourse.DataParallel(model, devices=dpcourse.devices(2))(input_tensor), target).backward()
nn.MSELoss()(oracle(input_tensor), target).backward()
print("replica uses the original weight object:", sorted(weights_seen))
print("gradients equal the one-device oracle's:", examples.max_grad_difference(model, oracle) < 1e-5)

# %% [markdown]
# **False.** Neither replica uses the original `Parameter` object: each multiplies by the tensor `replicate`
# made for its device (`torch/nn/parallel/replicate.py: replicate`). For replica 0 that is a view sharing
# the original's memory (lesson 03), for replica 1 a copy on its own device, and the gradients match. Which
# operation consumes a registered parameter (`F.linear`, `torch.mm`, `torch.matmul`, `@`) makes no
# difference. What *does* stay behind is a plain tensor attribute, as in `ProblematicModel`.
#
# ### "Pytorch Advanced Part-1 DataParallel": a counter with `requires_grad = False`
# **Predict:** what does `MyModule()` do?

# %%
class MyModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = 0
        self.counter.requires_grad = False

    def forward(self, x):
        self.counter += 1
        return x


try:
    MyModule()
except AttributeError as error:
    print("AttributeError:", error)

# %% [markdown]
# **False code.** It never gets to DataParallel: only tensors have `requires_grad`, so the constructor
# raises. The article's point (an `int` counter stays 0 under DataParallel) is right, and lesson 03
# shows it. Corrected: a buffer, updated in place, which replica 0 shares with your model:

# %%
class MyModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("counter", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.counter += 1
        return x


counted = MyModule().to(devices[0])
dp = dpcourse.DataParallel(counted, devices=dpcourse.devices(2))
for _ in range(3):
    dp(torch.zeros(4, 1))
print("forwards counted on 2 devices:", counted.counter.item())

# %% [markdown]
# The articles' other examples need real GPUs to show anything: Example 2 of "Why is training not starting with nn.DataParallel?" (a 572 MiB model at
# batch 16) is taken apart in lesson 09, and the `cuda:1` / `device_ids=[2, 0, 1]` placements of "Pytorch Advanced Part-1 DataParallel" in
# lesson 07.


# %% [markdown]
# ## Write it yourself
# Write the function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: a loss that survives uneven chunks
# A common script computes the loss inside `forward`, on each replica's chunk. Write
# `per_sample_loss(output, target)`: the cross-entropy of the chunk's rows such that gathering the replicas'
# results and calling `.mean()` gives the full-batch loss, whatever the chunk sizes. The check calls your
# function once per chunk, gathers with `dpcourse.gather`, and compares.

# %% tags=["solution"]
def per_sample_loss(output, target):
    """One cross-entropy loss per row of the chunk: gathered, their mean is the full-batch loss."""
    ### BEGIN SOLUTION
    return nn.functional.cross_entropy(output, target, reduction="none")
    ### END SOLUTION


# %%
exercises.check("per_sample_loss", per_sample_loss)


# %% [markdown]
# ## Summary
# - DataParallel splits the batch, never the model: every device holds every weight.
# - Padded batches, custom `nn.Parameter`s and `torch.matmul` need nothing special; plain tensor attributes
#   and state written in `forward` do.
# - Overhead makes steps slower, never stuck; a hang is a replica or a copy that never finishes (often GPU
#   communication, sometimes a replica that blocks).
# - Run an example before believing it: three of the articles' examples fail for reasons unrelated to
#   DataParallel (a shape bug, a device guard, `requires_grad` set on an `int`), a fourth stops on a machine
#   without CUDA, and one of their fixes (a `Parameter` for running state) makes it worse.
#
# ## Exercises
# 1. Run Example 2 of the custom-model article (`MyModel` with `MyCustomLayer`) on 4 devices with a batch of 10, chunks
#    [3, 3, 3, 1]. Does its gradient still match the oracle? Write `example2_gradients(model, inputs, n)`, returning
#    the model's gradients after one forward and backward of `output.pow(2).mean()` under DataParallel.
# 2. Make `ReturnedState` work on 3 devices with a batch of 7: after one forward, `internal_state` must
#    equal the column sums of the batch. Write `accumulate(batch, n)` returning the updated model.

# %% tags=["solution"]
def example2_gradients(model, inputs, n):
    ### BEGIN SOLUTION
    dpcourse.DataParallel(model, devices=dpcourse.devices(n))(inputs).pow(2).mean().backward()
    return [p.grad for p in model.parameters()]
    ### END SOLUTION


# %%
exercises.check("example2_gradients", example2_gradients)

# %% tags=["solution"]
def accumulate(batch, n):
    ### BEGIN SOLUTION
    model = ReturnedState().to(dpcourse.devices(n)[0])
    _, partial_sums = dpcourse.DataParallel(model, devices=dpcourse.devices(n))(batch)
    model.internal_state += partial_sums.sum(dim=0)
    return model
    ### END SOLUTION


# %%
exercises.check("accumulate", accumulate)
