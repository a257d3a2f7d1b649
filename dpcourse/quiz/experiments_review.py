"""Experiments for lessons 08 (myths), 09 (what each DataParallel step costs) and 11 (review: rules combined).

See ``experiments`` for how an experiment reports its ``Outcome``.
"""

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

import dpcourse
from dpcourse import viz

from .lab import data_parallel, gathered_means, home, rounded, seeded, seeded_module, three_forwards
from .outcome import Outcome, experiment, only_true


@experiment
def not_model_parallel() -> Outcome:
    """A hook shows every replica holding every layer, at full size, and a slice of the batch."""
    model = seeded_module(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    seen: list[tuple[int, list]] = []

    def look(replica: nn.Module, args: tuple, output: torch.Tensor) -> None:
        seen.append((len(args[0]), [tuple(replica[i].weight.shape) for i in (0, 2)]))

    model.register_forward_hook(look)
    data_parallel(model, 3)(seeded(9, 4))
    full = [tuple(model[i].weight.shape) for i in (0, 2)]
    text = f"the model's weights: {full}\n" + "\n".join(f"  a replica got {r} rows and weights {w}" for r, w in seen)
    whole_model = len(seen) == 3 and all(w == full and rows == 3 for rows, w in seen)
    value = only_true(
        {
            "No: every replica holds the whole model, and only the batch is split": whole_model,
            "Yes: each device holds some of the layers": not whole_model,
        }
    )
    return Outcome(text, value)


@experiment
def padded_batch_is_fine() -> Outcome:
    """A ``pad_sequence`` batch is a plain rectangular tensor: DataParallel splits its rows like any other."""
    batch = pad_sequence([seeded(n, 3, seed=n) for n in (5, 2, 7, 1)], batch_first=True)
    model = seeded_module(lambda: nn.Linear(3, 2))
    out = data_parallel(model, 2)(batch)
    same = out.shape == (4, 7, 2) and torch.allclose(out, model(batch))
    text = f"padded batch {tuple(batch.shape)} -> dp(batch) {tuple(out.shape)}; equals model(batch): {same}"
    value = only_true(
        {
            "It works, and the output equals the single-device output": same,
            "It works but trims the padding": out.shape[1] < batch.shape[1],
        }
    )
    return Outcome(text, value)


@experiment
def batchnorm_running_mean() -> Outcome:
    """BatchNorm's running mean after one step: chunk 0's mean only, because only replica 0 updates the original."""
    x = torch.cat([torch.zeros(4, 1), torch.full((4, 1), 10.0)]).to(home())
    single, parallel = nn.BatchNorm1d(1, momentum=1.0).to(home()), nn.BatchNorm1d(1, momentum=1.0)
    single(x)
    data_parallel(parallel, 2)(x)
    text = (
        "BatchNorm1d(1, momentum=1.0); rows 0-3 are 0, rows 4-7 are 10:\n"
        f"  one device : running_mean = {single.running_mean.item():g}\n"
        f"  2 devices  : running_mean = {parallel.running_mean.item():g}  (replica 1's update went to a copy)"
    )
    return Outcome(text, parallel.running_mean.item())


class MatmulLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 2))
        self.moved_is_same: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.moved_is_same.append(self.weight.to(x.device) is self.weight)
        return torch.matmul(x, self.weight)


@experiment
def custom_parameter_replicated() -> Outcome:
    """A custom ``nn.Parameter`` used with ``torch.matmul``: replicated like any other, same gradient."""
    model, x = seeded_module(MatmulLayer), seeded(6, 3)
    model(x).pow(2).mean().backward()
    single = model.weight.grad.clone()
    model.weight.grad = None
    model.moved_is_same.clear()
    data_parallel(model, 2)(x).pow(2).mean().backward()
    same = torch.allclose(model.weight.grad, single, atol=1e-6)
    text = (
        f"weight gradient, one device: {rounded(single)}\n"
        f"2 devices:                   {rounded(model.weight.grad)}\nequal: {same}\n"
        f"in each replica, self.weight.to(x.device) is self.weight: {model.moved_is_same}  (nothing to move)"
    )
    value = only_true(
        {
            "It is replicated like `nn.Linear`'s weight, and the gradient matches one device": same,
            "The matmul may use a weight on the wrong device: call `self.weight.to(x.device)` first": not same,
        }
    )
    return Outcome(text, value)


@experiment
def replicate_every_forward() -> Outcome:
    """Trace 3 forwards on 2 devices and count the replicate steps."""
    dp = data_parallel(seeded_module(lambda: nn.Linear(64, 64)), 2)
    with dpcourse.trace() as recorded:
        for _ in range(3):
            dp(seeded(8, 64))
    spans = recorded.steps("replicate")
    lines = [f"  replicate at {s.start * 1e3:.3f} ms copied {s.bytes_copied} bytes" for s in spans]
    return Outcome("3 forwards on 2 devices:\n" + "\n".join(lines), len(spans), viz.timeline(recorded))


@experiment
def replicate_bytes() -> Outcome:
    """The bytes one replicate step copies for ``nn.Linear(256, 256)`` on 4 devices."""
    model = seeded_module(lambda: nn.Linear(256, 256))
    with dpcourse.trace() as recorded:
        data_parallel(model, 4)(seeded(8, 256))
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    copied = recorded.steps("replicate")[0].bytes_copied
    text = (
        f"parameters: {sum(p.numel() for p in model.parameters())} float32 = {size} bytes\n"
        f"replicate on 4 devices copied {copied} bytes = {copied / size:g} x the parameters "
        "(replica 0 uses the originals)"
    )
    return Outcome(text, copied)


@experiment
def modules_per_forward() -> Outcome:
    """Count the module objects one replicate builds for 50 layers on 4 devices."""
    model = seeded_module(lambda: nn.Sequential(*(nn.Linear(2, 2) for _ in range(50))))
    replicas = dpcourse.replicate(model, dpcourse.devices(4))
    built = sum(len(list(replica.modules())) for replica in replicas)
    text = (
        f"nn.Sequential of 50 Linear layers = {len(list(model.modules()))} modules\n"
        f"one replicate on 4 devices built {built} module objects (each a shallow copy, made in Python)"
    )
    return Outcome(text, built)


@experiment
def review_nine_rows_scalar() -> Outcome:
    """A 0-d output, 9 rows on 4 devices: 3 chunks of 3, so a vector of 3."""
    out, warned = gathered_means(9, 4)
    text = f"forward returns x.mean(); 9 rows on 4 devices -> dp(x).shape = {out.shape}\n  warning: {warned}"
    return Outcome(text, tuple(out.shape))


class Tally(nn.Module):
    """Counts forwards and rows in buffers, and forwards in a plain int."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("forwards", torch.zeros(()))
        self.register_buffer("rows", torch.zeros(()))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        self.rows += len(x)
        self.calls += 1
        return x


@experiment
def review_buffer_counter() -> Outcome:
    """3 forwards of 8 rows on 4 devices: buffers keep replica 0's in-place updates, the int keeps nothing."""
    model = three_forwards(Tally(), 4, rows=8)
    text = (
        "3 forwards, 8 rows each, 4 devices:\n"
        f"  buffer forwards += 1      -> {model.forwards.item():g}\n"
        f"  buffer rows += len(x)     -> {model.rows.item():g}  (replica 0's 2 rows per forward; 24 rows went in)\n"
        f"  plain int calls += 1      -> {model.calls}"
    )
    return Outcome(text, model.forwards.item())


@experiment
def review_five_rows_output() -> Outcome:
    """``nn.Linear(3, 2)`` on 5 rows and 4 devices: 3 replicas run, and every row comes back."""
    out = data_parallel(seeded_module(lambda: nn.Linear(3, 2)), 4)(seeded(5, 3))
    text = f"chunks {[len(c) for c in torch.arange(5).chunk(4)]} -> dp(x).shape = {out.shape}"
    return Outcome(text, tuple(out.shape))
