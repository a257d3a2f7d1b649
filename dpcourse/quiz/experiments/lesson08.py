"""Lesson 08's quiz experiments (``quizzes/08_myths.toml``): each myth about DataParallel, measured."""

import threading

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from ..lab import (
    data_parallel_over,
    error_summary,
    first_device,
    raised_by,
    rounded_values,
    seeded_module,
    seeded_randn,
)
from ..outcome import Outcome, only_true


def _linear_shapes(module: nn.Module) -> list[tuple[int, ...]]:
    """The weight shape of every ``nn.Linear`` that ``module`` (a model or one of its replicas) holds."""
    return [tuple(layer.weight.shape) for layer in module.modules() if isinstance(layer, nn.Linear)]


def not_model_parallel() -> Outcome:
    """A hook shows every replica holding every layer, at full size, and a slice of the batch.

    The hook runs before each replica's forward, so it would also see replicas that held only some layers
    (whose forward would then fail).
    """
    model = seeded_module(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    seen: list[tuple[int, list]] = []
    model.register_forward_pre_hook(lambda replica, args: seen.append((len(args[0]), _linear_shapes(replica))))
    error = raised_by(lambda: data_parallel_over(model, 3)(seeded_randn(9, 4)))
    full = _linear_shapes(model)
    text = (
        f"the model's Linear weights: {full}\n"
        + "\n".join(f"  a replica got {rows} rows and Linear weights {shapes}" for rows, shapes in seen)
        + f"\ndp(x) -> {error_summary(error)}"
    )
    held = [shapes for _, shapes in seen]
    whole_model = len(seen) == 3 and all(shapes == full for shapes in held) and all(rows == 3 for rows, _ in seen)
    split_layers = (
        len(seen) == 3
        and all(len(shapes) < len(full) for shapes in held)
        and sorted(shape for shapes in held for shape in shapes) == sorted(full)
    )
    value = only_true(
        {
            "No: every replica holds the whole model, and only the batch is split": whole_model and error is None,
            "Yes: each device holds some of the layers": split_layers,
        }
    )
    return Outcome(text, value)


def padded_batch_is_fine() -> Outcome:
    """A ``pad_sequence`` batch is a plain rectangular tensor: DataParallel splits its rows like any other."""
    batch = pad_sequence([seeded_randn(n, 3, seed=n) for n in (5, 2, 7, 1)], batch_first=True)
    model = seeded_module(lambda: nn.Linear(3, 2))
    outputs: list[torch.Tensor] = []
    error = raised_by(lambda: outputs.append(data_parallel_over(model, 2)(batch)))
    out = outputs[0] if outputs else None
    same = out is not None and out.shape == (4, 7, 2) and torch.allclose(out, model(batch))
    shape = "nothing" if out is None else tuple(out.shape)
    text = (
        f"padded batch {tuple(batch.shape)} -> dp(batch) {shape} ({error_summary(error)}); "
        f"equals model(batch): {same}"
    )
    value = only_true(
        {
            "It fails: DataParallel cannot split a padded batch": error is not None,
            "It works, and the output equals the single-device output": same,
            "It works but trims the padding": out is not None and out.shape[1] < batch.shape[1],
        }
    )
    return Outcome(text, value)


def batchnorm_running_mean() -> Outcome:
    """BatchNorm's running mean after one step: chunk 0's mean only, because only replica 0 updates the original."""
    x = torch.cat([torch.zeros(4, 1), torch.full((4, 1), 10.0)]).to(first_device())
    single, parallel = nn.BatchNorm1d(1, momentum=1.0).to(first_device()), nn.BatchNorm1d(1, momentum=1.0)
    single(x)
    data_parallel_over(parallel, 2)(x)
    text = (
        "BatchNorm1d(1, momentum=1.0); rows 0-3 are 0, rows 4-7 are 10:\n"
        f"  one device : running_mean = {single.running_mean.item():g}\n"
        f"  2 devices  : running_mean = {parallel.running_mean.item():g}  (replica 1's update went to a copy)"
    )
    return Outcome(text, parallel.running_mean.item())


class MatmulLayer(nn.Module):
    """``torch.matmul(x, self.weight)`` with a custom ``Parameter``; each call notes what its replica holds."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 2))
        self.held: list[tuple[str, int, bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.held.append(
            (
                threading.current_thread().name,
                self.weight.untyped_storage().data_ptr(),
                self.weight.device == x.device,
                self.weight.to(x.device) is self.weight,
            )
        )
        return torch.matmul(x, self.weight)


def custom_parameter_replicated() -> Outcome:
    """A custom ``nn.Parameter`` used with ``torch.matmul``: what each replica holds, and the gradient.

    Each replica notes where its ``self.weight`` lives: in the memory of the model's own weight (not copied)
    or in memory of its own (a copy), and whether it is on the device of the replica's chunk. The gradient
    alone cannot tell a copy from the original: two "replicas" that are both the model sum into the same
    ``.grad`` and match one device too.
    """
    model, x = seeded_module(MatmulLayer), seeded_randn(6, 3)
    model(x).pow(2).mean().backward()
    single = model.weight.grad.clone()
    model.weight.grad = None
    model.held.clear()
    data_parallel_over(model, 2)(x).pow(2).mean().backward()
    same = torch.allclose(model.weight.grad, single, atol=1e-6)
    original = model.weight.untyped_storage().data_ptr()
    held = sorted(model.held)
    reads_original = [pointer == original for _, pointer, _, _ in held]
    on_its_device = all(on_device for _, _, on_device, _ in held)
    own_copies = len(held) == 2 and not reads_original[1]
    lines = [
        f"  {thread}: weight in the model's own memory: {shared}; on the chunk's device: {on_device}; "
        f"self.weight.to(x.device) is self.weight: {unmoved}"
        for (thread, _, on_device, unmoved), shared in zip(held, reads_original, strict=True)
    ]
    text = (
        "what each replica's self.weight is:\n" + "\n".join(lines) + "\n"
        f"weight gradient, one device: {rounded_values(single)}\n"
        f"2 devices:                   {rounded_values(model.weight.grad)}\nequal: {same}"
    )
    value = only_true(
        {
            "It is replicated like `nn.Linear`'s weight, and the gradient matches one device": (
                own_copies and on_its_device and same
            ),
            "It is not copied: every replica reads the one weight on `devices[0]`": all(reads_original),
            "The matmul may use a weight on the wrong device: call `self.weight.to(x.device)` first": (
                not all(reads_original) and not (own_copies and on_its_device and same)
            ),
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    not_model_parallel,
    padded_batch_is_fine,
    batchnorm_running_mean,
    custom_parameter_replicated,
)
