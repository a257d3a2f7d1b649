# %% [markdown]
# # 07 · End to end: training, checkpoints, and the errors people meet
#
# **After this lesson you will be able to explain**
# - why a DataParallel training loop tracks the one-device loop step for step, and what the optimizer updates;
# - what the keys of a DataParallel checkpoint look like, and the two ways to load it into a bare model;
# - what DataParallel checks about where your model's parameters and buffers are, and when;
# - where the outputs (and so the loss) land, and where the gradients land;
# - what unlucky batch sizes do to BatchNorm and to keyword arguments, and how to avoid them;
# - the two fixes every LSTM under DataParallel needs.

# %%
import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dpcourse
from dpcourse import examples, exercises, quiz

# Replicas that return a scalar get lesson 05's "all input tensors were scalars" warning; it is known here.
warnings.filterwarnings("ignore", message="Was asked to gather along dimension 0")
devices = dpcourse.devices(4)
x, y = examples.make_batch(10, device=devices[0])

# %% [markdown]
# ## A training loop
# `examples.train` is an ordinary loop: 20 steps on fresh seeded batches of 10 (zero_grad, forward, loss,
# backward, step), where the step is `torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)`'s update written
# out in `dpcourse/examples/oracle.py` (a test checks the two agree; the first torch optimizer a process creates
# imports `torch._dynamo`, torch's compiler, which this lesson does not need). Give it DataParallel on 3
# devices, then the oracle:

# %%
model = examples.make_model().to(devices[0])  # the model goes to devices[0] before it is wrapped
oracle = examples.twin(model)
dp = dpcourse.DataParallel(model, devices=dpcourse.devices(3))
dp_losses = examples.train(dp, steps=20)
oracle_losses = examples.train(oracle, steps=20)
print("DataParallel, loss every 5th step:", [round(v, 4) for v in dp_losses[::5]])
print("oracle,       loss every 5th step:", [round(v, 4) for v in oracle_losses[::5]])
print(f"after 20 steps: max |weight difference| = {examples.gap(examples.max_weight_difference(model, oracle))}")

# %% [markdown]
# The two runs stay together to float rounding (the last line prints the largest difference), momentum and
# all. The optimizer updates `dp.parameters()`, and those are your model's own parameters: DataParallel
# registers the model as its submodule and owns no other parameters.

# %%
print("dp.parameters() are the model's parameters:",
      all(p is q for p, q in zip(dp.parameters(), model.parameters(), strict=True)))

# %% [markdown]
# So one step is: outputs concatenated on `devices[0]` (lesson 05), the loss computed there, the replicas'
# gradients summed into those parameters (lesson 06), and the optimizer updating them, with one set of momentum
# buffers. The next forward copies the updated weights to the replicas again (lesson 03). There are no
# per-replica optimizers and nothing to keep in sync.

# %% [markdown]
# ## Checkpoints
# Save a checkpoint of `dp` and load it into the bare model, for inference on one device. Predict the keys first:

# %%
quiz.ask("07-state-dict-keys")

# %% tags=["reveals-answer"]
with quiz.reveal("07-state-dict-keys"):
    print("dp.state_dict() keys:", list(dp.state_dict()))
    try:
        examples.make_model().load_state_dict(dp.state_dict())
    except RuntimeError as error:
        print(error)

# %%
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

bare = examples.make_model()
bare.load_state_dict(dp.module.state_dict())  # 1. save the wrapped model's own state_dict
state = dp.state_dict()
consume_prefix_in_state_dict_if_present(state, "module.")  # 2. or strip the prefix when loading (in place)
bare.load_state_dict(state)
print("keys after stripping:", list(state))

# %% [markdown]
# A common guard, "wrap only when there are several GPUs", makes the keys depend on the machine that saved
# the checkpoint. DataParallel on one device runs fine, and it adds the prefix like any other; so does torch's
# own DataParallel, even on a machine without GPUs, where it only passes the batch through:

# %%
one = dpcourse.DataParallel(examples.make_model(), devices=dpcourse.devices(1))
print("one device runs:", list(one(x).shape), "| keys:", list(one.state_dict())[:2])
print("torch.nn.DataParallel keys:", list(torch.nn.DataParallel(examples.make_model()).state_dict())[:2])

# %% [markdown]
# Save `dp.module.state_dict()` every time, and the checkpoint loads anywhere.

# %% [markdown]
# ## Where the model lives
# The master parameters live on `devices[0]`, and replica 0 computes with them directly (lesson 03); the
# other replicas are copied from there at every forward:

# %%
replicas = dpcourse.replicate(model, dpcourse.devices(2))
same_memory = replicas[0][0].weight.data_ptr() == model[0].weight.data_ptr()
print("replica 0 computes with the master weight's memory:", same_memory)

# %% [markdown]
# So DataParallel checks that all parameters and buffers are on `devices[0]`. When, exactly?

# %%
quiz.ask("07-placement")

# %% [markdown]
# CPU devices are all the same device, so with them a real mismatch cannot happen. The `meta` device (tensors
# with a shape but no data) exists on every machine and stands in for "another device": move the last layer
# there, as if it had been added after the model was moved.

# %% tags=["reveals-answer"]
with quiz.reveal("07-placement"):
    model = examples.make_model().to(devices[0])
    model[2].to("meta")
    for stage in ("wrap", "forward"):
        try:
            if stage == "wrap":
                dp = dpcourse.DataParallel(model, devices=dpcourse.devices(2))
            else:
                dp(x)
            print(f"{stage}: no complaint")
        except RuntimeError as error:
            print(f"{stage}: {error}")

# %% [markdown]
# Because the check runs at forward time, moving the model *after* wrapping is fine; the check was moved from
# `__init__` to `forward` for exactly that (pytorch/pytorch#17363), and the official tutorial does
# `model = nn.DataParallel(model)` and then `model.to(device)` (pytorch/tutorials,
# `beginner_source/blitz/data_parallel_tutorial.py`). Meta tensors hold no data, so here moving back means
# allocating on `devices[0]` and loading the weights again; a layer on another GPU needs only `dp.to(devices[0])`:

# %%
dp.to_empty(device=devices[0])
dp.module.load_state_dict(examples.make_model().state_dict())
print("after the move, forward works and matches:", torch.allclose(dp(x), examples.make_model().to(devices[0])(x)))

# %% [markdown]
# Only with a single device does DataParallel move the module for you, in `__init__`
# (`if len(self.device_ids) == 1: self.module.to(self.src_device_obj)`; dpcourse does the same). The check
# covers parameters and buffers. What does `.to()` do with a plain tensor attribute?

# %%
quiz.ask("07-plain-tensor-stays")

# %% tags=["reveals-answer"]
class WithStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.register_buffer("counts", torch.zeros(2))
        self.stats = torch.zeros(2)  # a plain tensor attribute


with quiz.reveal("07-plain-tensor-stays"):
    stats_model = WithStats().to("meta")
    print("parameter:", stats_model.linear.weight.device, "| buffer:", stats_model.counts.device,
          "| plain tensor attribute:", stats_model.stats.device)

# %% [markdown]
# ## output_device
# Gather puts the outputs on `output_device`, which defaults to `devices[0]`. The loss is computed wherever the
# output is, so the targets must go there too. The gradients do not follow it: `Broadcast.backward` sums them
# onto the device of the original parameters (`ctx.input_device`), which is `devices[0]`
# (`torch/nn/parallel/_functions.py`). That is why a model on `cuda:2` with `device_ids=[2, 0, 1]` and
# `output_device=1` works: parameters and gradients on `cuda:2`, outputs and loss on `cuda:1` (that takes three
# GPUs; here it rests on the source).

# %%
dp = dpcourse.DataParallel(examples.make_model().to(devices[0]), devices=dpcourse.devices(2), output_device="cpu")
out = dp(x)
loss = examples.loss_fn(out, y.to(out.device))
loss.backward()
print("output_device:", dp.output_device, "| output on:", out.device, "| loss on:", loss.device,
      "| grads on:", dp.module[0].weight.grad.device)

# %% [markdown]
# On CPU devices every one of these is `cpu`; what matters is where each comes from. On a GPU machine the output
# and the loss are on `cpu` and the gradients on `cuda:0`. On GPUs, device 0 holds the master parameters, their
# gradients and the optimizer state, and also the outputs and the loss unless you move `output_device` (lesson 09
# measures it).
#
# One difference from torch: there `output_device` must be a GPU. `DataParallel.__init__` passes it through
# `torch._utils._get_device_index(output_device, True)`, which rejects `"cpu"` (only the deprecated `-1` means
# the CPU):

# %%
from torch._utils import _get_device_index

try:
    _get_device_index("cpu", True)
except ValueError as error:
    print("torch:", error)

# %% [markdown]
# ## Batches that chunk unluckily
# DataParallel itself copes with any batch size, and the model does not have to know it is being split: the
# unchanged running example matches the oracle on 10 rows over 4 devices (lesson 06 also tried 7 and 13). The
# chunks are uneven, though; the trace shows how many rows each replica ran:

# %%
model = examples.make_model().to(devices[0])
oracle = examples.twin(model)
with dpcourse.trace() as t:
    examples.loss_fn(dpcourse.DataParallel(model, devices=dpcourse.devices(4))(x), y).backward()
examples.loss_fn(oracle(x), y).backward()
print("rows per replica:", [span.shapes[0][0] for span in sorted(t.steps("forward"), key=lambda s: s.replica)])
print(f"max |grad difference| vs the oracle: {examples.gap(examples.max_grad_difference(model, oracle))}")

# %% [markdown]
# Replica 3 does a third of the others' work, and `parallel_apply` waits for every replica (lesson 04), so the
# other devices set the pace. Nothing breaks until code looks across the batch, or the loss is averaged per
# replica. A recap of lesson 06:

# %%
quiz.ask("07-lone-sample-weight")

# %% tags=["reveals-answer"]
class ChunkMean(nn.Module):
    def forward(self, per_sample_losses):
        return per_sample_losses.mean()


with quiz.reveal("07-lone-sample-weight"):
    per_sample = torch.ones(10, requires_grad=True)
    dpcourse.DataParallel(ChunkMean(), devices=dpcourse.devices(4))(per_sample).mean().backward()
    print("weight of each sample's loss:", [f"1/{round(1 / w)}" for w in per_sample.grad.tolist()])

# %%
quiz.ask("07-batchnorm-last-chunk")

# %% tags=["reveals-answer"]
with quiz.reveal("07-batchnorm-last-chunk"):
    print("one device, all 10 rows:", list(examples.make_model(batchnorm=True).to(devices[0])(x).shape))
    try:
        dpcourse.DataParallel(examples.make_model(batchnorm=True).to(devices[0]), devices=dpcourse.devices(4))(x)
    except Exception as error:  # whatever it raises
        lines = str(error).strip().splitlines()
        print(lines[0], "...", lines[-1], sep="\n")

# %%
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = examples.make_model()

    def forward(self, x, temperature):
        return self.net(x) / temperature


try:
    dpcourse.DataParallel(Scaled().to(devices[0]), devices=dpcourse.devices(4))(x, temperature=torch.tensor([2.0]))
except TypeError as error:
    lines = str(error).strip().splitlines()
    print(lines[0], "...", lines[-1], sep="\n")

# %% [markdown]
# (torch 2.13 fails on this call too, with an `AssertionError` instead: "The number of modules 4 is not equal
# to the number of kwargs_tup 1", see lesson 02.) A Python number is not split, but it causes the mirror image
# when the batch is smaller than the device count: the number goes to all 4 replicas, one row makes one chunk,
# and replicas 1 to 3 get `temperature` without `x` (pytorch/pytorch#31460, still open; torch 2.13 pads the same way):

# %%
try:
    dpcourse.DataParallel(Scaled().to(devices[0]), devices=dpcourse.devices(4))(x[:1], temperature=2.0)
except TypeError as error:
    lines = str(error).strip().splitlines()
    print(lines[0], "...", lines[-1], sep="\n")

# %% [markdown]
# The same "missing argument" was reported for 9 rows on 4 GPUs (pytorch/pytorch#15161, 2018); today the fourth
# device just sits idle when all arguments are batch tensors (lesson 02). A warning for batches smaller than the
# GPU count was asked for; a maintainer doubted it should be one, since a small batch "can happen at the end of
# an epoch" (#9226, closed). The fixes:
# - a batch size that is a multiple of the number of devices, with at least 2 rows per device for BatchNorm:
#   the fix when every batch has the unlucky size;
# - `drop_last=True` in the `DataLoader`, when only the last batch of an epoch is short;
# - values that are not per sample passed as Python numbers (shared by reference, lesson 02), or given a batch
#   dimension.

# %%
data = torch.utils.data.TensorDataset(*examples.make_batch(22))
loader = torch.utils.data.DataLoader(data, batch_size=8, drop_last=True)
print("batch sizes:", [len(xb) for xb, _ in torch.utils.data.DataLoader(data, batch_size=8)],
      "| with drop_last=True:", [len(xb) for xb, _ in loader])
bn_dp = dpcourse.DataParallel(examples.make_model(batchnorm=True).to(devices[0]), devices=dpcourse.devices(4))
print("BatchNorm with 8 rows on 4 devices:", [list(bn_dp(xb).shape) for xb, _ in loader])
scaled_dp = dpcourse.DataParallel(Scaled().to(devices[0]), devices=dpcourse.devices(4))
print("temperature as a float:", list(scaled_dp(x, temperature=2.0).shape))

# %% [markdown]
# ## RNNs and packed sequences
# Two LSTM habits meet DataParallel.
#
# **Weights in one block.** [cuDNN](00_start_here.ipynb#Glossary), the NVIDIA library whose kernels torch's
# LSTM runs on GPUs, wants an RNN's weights in one contiguous buffer; replicate copies them into new tensors
# for replicas 1, 2, …, so on GPUs the LSTM warns "RNN module weights are not part of single
# contiguous chunk of memory. This means they need to be compacted at every call, possibly greatly increasing
# memory usage. To compact weights again call flatten_parameters()." (the text users meet, pytorch/examples#248;
# under DataParallel, allenai/allennlp#2793). The fix is a call to `self.lstm.flatten_parameters()` at the start
# of `forward`. The warning comes from the cuDNN code path, so CPU devices never show it, and on the CPU the
# call is a no-op (its docstring says so, `torch/nn/modules/rnn.py: RNNBase.flatten_parameters`).
#
# **Padding to the longest sequence.** pack → LSTM → `pad_packed_sequence` pads the output to the longest
# sequence the function sees, and each replica sees only its own chunk:

# %%
class Tagger(nn.Module):
    """pack -> LSTM -> unpack: the usual way to run an LSTM over padded sequences of different lengths."""

    def __init__(self, total_length=False):
        super().__init__()
        self.lstm = nn.LSTM(3, 2, batch_first=True)
        self.total_length = total_length

    def forward(self, x, lengths):
        self.lstm.flatten_parameters()  # keeps cuDNN's one-block weight layout on GPUs; a no-op on the CPU
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        pad_to = x.size(1) if self.total_length else None
        return pad_packed_sequence(out, batch_first=True, total_length=pad_to)[0]


sequences = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0)).to(devices[0])  # padded to 6 steps
lengths = torch.tensor([6, 4, 3, 2])  # pack_padded_sequence wants the lengths on the CPU
torch.manual_seed(0)
try:
    dpcourse.DataParallel(Tagger().to(devices[0]), devices=dpcourse.devices(2))(sequences, lengths)
except RuntimeError as error:
    print(error)

# %% [markdown]
# Replica 0 got lengths 6 and 4 and padded to 6 steps; replica 1 got 3 and 2 and padded to 3, and outputs of
# different lengths cannot be concatenated (torch's gather says "Input tensor at index 1 has invalid shape").
# `total_length=x.size(1)` makes every replica pad to the input's length (requested for exactly this case in
# pytorch/pytorch#6299, added by PR #6327):

# %%
torch.manual_seed(0)
tagger = Tagger(total_length=True).to(devices[0])
out = dpcourse.DataParallel(tagger, devices=dpcourse.devices(2))(sequences, lengths)
print("output:", list(out.shape), "| equals one device:", torch.allclose(out, tagger(sequences, lengths), atol=1e-6))

# %% [markdown]
# Two more LSTM traps come from scatter splitting every tensor on dim 0. An initial state `(h0, c0)` has the
# batch on dim 1 (layers, batch, hidden), so passing it as an argument splits the *layers*:

# %%
class WithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 2, num_layers=2, batch_first=True)

    def forward(self, x, h0, c0):
        return self.lstm(x, (h0, c0))[0]


h0 = torch.zeros(2, 4, 2, device=devices[0])  # (layers, batch, hidden)
try:
    dpcourse.DataParallel(WithState().to(devices[0]), devices=dpcourse.devices(2))(sequences, h0, h0.clone())
except RuntimeError as error:
    lines = str(error).strip().splitlines()
    print(lines[0], "...", lines[-1], sep="\n")

# %% [markdown]
# Pass the state batch-first and transpose it inside `forward`, or let the module make it. And a `PackedSequence`
# cannot be the *input*: it is a namedtuple, so scatter splits each of its fields separately, and the pieces
# no longer describe each other (supporting it is still an open request, pytorch/pytorch#31422):

# %%
packed = pack_padded_sequence(sequences, lengths, batch_first=True)
for i, (piece,) in enumerate(dpcourse.scatter((packed,), dpcourse.devices(2))):
    print(f"replica {i} would get {len(piece.data)} rows of data with batch_sizes {piece.batch_sizes.tolist()}"
          f" (which describe {piece.batch_sizes.sum().item()} rows)")

# %% [markdown]
# Pack inside `forward`, as `Tagger` does.


# %% [markdown]
# ## Write it yourself
# Write each function's body in place of its stub, then run the check cell below it.
#
# ### Exercise: a training loop on n devices
# Write `train_on_devices(model, x, y, n, steps, lr)`: train `model` for `steps` steps of plain SGD
# (`p -= lr * p.grad`, or `examples.sgd_step(model, lr)`) on the batch `x, y`, with `dpcourse.DataParallel` on
# `n` devices, and return the model. The check passes `model`, `x` and `y` already on `devices[0]`, watches
# (with `dpcourse.trace()`) every step run one forward on `n` replicas and sum their gradients into `model`, and
# compares the weights with the same steps on one device.

# %% tags=["solution"]
def train_on_devices(model, x, y, n, steps, lr):
    """`steps` SGD steps of DataParallel training on one batch; the model is updated in place and returned."""
    ### BEGIN SOLUTION
    dp = dpcourse.DataParallel(model, devices=dpcourse.devices(n))
    for _ in range(steps):
        model.zero_grad()
        examples.loss_fn(dp(x), y).backward()
        examples.sgd_step(model, lr)
    return model
    ### END SOLUTION


# %%
exercises.check("train_on_devices", train_on_devices)

# %% [markdown]
# ### Exercise: strip the prefix
# Write `bare_state_dict(state_dict)`: a `state_dict` saved from a DataParallel model, with the `module.` that
# DataParallel put at the start of each key removed, so that it loads into the bare model.

# %% tags=["solution"]
def bare_state_dict(state_dict):
    """A DataParallel checkpoint's entries under the bare model's keys."""
    ### BEGIN SOLUTION
    return {key.removeprefix("module."): value for key, value in state_dict.items()}
    ### END SOLUTION


# %%
exercises.check("bare_state_dict", bare_state_dict)


# %% [markdown]
# ## Summary
# - A DataParallel loop tracks the one-device loop: one set of parameters, one optimizer, on `devices[0]`.
# - `state_dict()` keys start with `module.`: save `dp.module.state_dict()`, or strip the prefix on load.
# - Every forward checks that parameters and buffers are on `devices[0]`; wrap first and move after if you like.
# - Outputs and loss go to `output_device`; gradients always go to `devices[0]`.
# - Uneven chunks are fine for DataParallel, but not for BatchNorm on 1 row, for per-replica mean losses, or for
#   non-batch tensor arguments: use batch sizes that are multiples of the device count (and `drop_last=True`
#   for a short last batch), Python numbers for values that are not per sample.
# - LSTMs: `flatten_parameters()` in forward, `total_length=x.size(1)` when unpacking, state and packing inside.
#
# ## Exercises
# 1. Write `load_into_bare(model, state)` that loads a checkpoint saved from either `dp` or a bare model.
# 2. What is the smallest batch of at least 10 rows with which the BatchNorm model trains on 4 devices? Find it
#    by running, not by reasoning: write `batchnorm_trains(batch, n)`, then try it on batches from 10 up.

# %% tags=["solution"]
def load_into_bare(model, state):
    ### BEGIN SOLUTION
    state = dict(state)
    consume_prefix_in_state_dict_if_present(state, "module.")
    model.load_state_dict(state)
    return model
    ### END SOLUTION


# %%
exercises.check("load_into_bare", load_into_bare)

# %% tags=["solution"]
def batchnorm_trains(batch, n):
    ### BEGIN SOLUTION
    chosen = dpcourse.devices(n)
    bn_dp = dpcourse.DataParallel(examples.make_model(batchnorm=True).to(chosen[0]), devices=chosen)
    try:
        bn_dp(examples.make_batch(batch, device=chosen[0])[0])
    except ValueError:
        return False
    return True
    ### END SOLUTION


# %%
exercises.check("batchnorm_trains", batchnorm_trains)
