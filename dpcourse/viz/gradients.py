"""Figures: DataParallel's gradient is the sum of the replicas' gradients, and when a mean of means is biased."""

import re
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from torch import nn

from dpcourse import by_hand, examples
from dpcourse._functions import SCALAR_GATHER_WARNING
from dpcourse.by_hand import tensor_at
from dpcourse.devices import devices as choose_devices

from .palette import COMBINED_COLOR, REFERENCE, device_color, device_handles, legend_below, new_figure, plural

SHOWN_ENTRIES = 6  # gradient entries drawn; the largest ones, so the bars are visible


def _forward(module: nn.Module, inputs: tuple, n_devices: int) -> by_hand.Forward:
    """``by_hand.forward`` on ``dpcourse.devices(n_devices)``, keeping the replicas; gather's warning about scalar
    outputs is silenced, since the figures explain it instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(SCALAR_GATHER_WARNING))
        return by_hand.forward(module, inputs, choose_devices(n_devices))


def _largest_entries(grad: torch.Tensor) -> list[int]:
    """Flat indices of the largest entries of ``grad``, in index order."""
    k = min(SHOWN_ENTRIES, grad.numel())
    return sorted(grad.detach().abs().flatten().topk(k).indices.tolist())


def _entry_labels(grad: torch.Tensor, entries: Sequence[int]) -> list[str]:
    """``"[3, 1]"``: where each flat index sits in ``grad``."""
    return [str([int(i) for i in torch.unravel_index(torch.tensor(e), grad.shape)]) for e in entries]


def _first_weight(model: nn.Module) -> str:
    return next(name for name, p in model.named_parameters() if p.dim() >= 2)


def gradient_sum(
    model_factory: Callable[[], nn.Module] | None = None,
    batch: int = 10,
    n_devices: int = 4,
    param: str | None = None,
    reduction: str = "mean",
) -> Figure:
    """Draw each replica's gradient for one parameter, their sum, and the single-device gradient beside it.

    Runs the four steps for real on ``dpcourse.devices(n_devices)``, takes the cross-entropy loss (``reduction``) on
    the gathered output, and asks autograd for the gradient with respect to every replica's *copy* of
    ``param`` (default: the model's first weight). Each copy came out of ``Broadcast``, whose backward is a
    **sum** (``ReduceAdd``), so the original's gradient is copy 0's + copy 1's + ... The bars add up
    replica by replica (a waterfall) to that sum; the hollow bar is plain ``model(x)`` on the whole batch.
    Both ``reduction="mean"`` and ``"sum"`` match, because the loss is taken after the gather.

    The returned figure carries ``fig.dpcourse_data`` with every tensor drawn and ``max_abs_diff``.
    """
    device = choose_devices(1)[0]
    model = (model_factory or examples.make_model)().to(device)
    name = param or _first_weight(model)
    names = [n for n, _ in model.named_parameters()]
    if name not in names:
        raise ValueError(f"The model has no parameter {name!r}; pick one of {names}.")
    original = tensor_at(model, name)
    x, y = examples.make_batch(batch, device=device)
    run = _forward(model, (x,), n_devices)
    chunks = run.rows
    loss = F.cross_entropy(run.gathered, y, reduction=reduction)
    copies, (reduced,) = run.gradients(loss, [name], also=[original])
    per_replica = [grad[name].to(device) for grad in copies]  # each copy's gradient is on its replica's device
    (single,) = torch.autograd.grad(F.cross_entropy(model(x), y, reduction=reduction), [original])
    total = torch.stack(per_replica).sum(0)
    diff = examples.max_difference(total, single)
    entries = _largest_entries(single)

    fig = new_figure(height=4.6)
    ax = fig.subplots()
    # A bar's base is "sticky": autoscaling adds no margin beyond it. A waterfall bar's base can be the lowest
    # point of the plot, and the bar ending there looked cut off by the frame.
    ax.use_sticky_edges = False
    group = len(per_replica) + 3  # per entry: a bar per replica, the sum, the single device, a gap
    starts = [g * group for g in range(len(entries))]
    running = [0.0] * len(entries)
    for j, grad in enumerate(per_replica):  # one call per replica, for all entries: a call per bar is slow
        values = grad.flatten()[entries].tolist()
        ax.bar([x0 + j for x0 in starts], values, bottom=running, color=device_color(j), width=0.9,
               gid="contribution")
        running = [r + v for r, v in zip(running, values, strict=True)]
    ax.bar([x0 + len(per_replica) for x0 in starts], total.flatten()[entries].tolist(), color=COMBINED_COLOR,
           width=0.9, gid="sum")
    ax.bar([x0 + len(per_replica) + 1 for x0 in starts], single.flatten()[entries].tolist(), width=0.9,
           gid="single", **REFERENCE)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([g * group + (group - 2) / 2 for g in range(len(entries))], _entry_labels(single, entries))
    ax.set_xlabel(f"the {len(entries)} largest entries of the gradient of {name}, by index")
    ax.set_ylabel(f"d loss / d {name}")
    ax.set_title(f"measured: max |sum - single device| = {diff:.1e}", fontsize=10)
    handles = device_handles([plural(b, "row") for b in chunks])
    handles += [Patch(color=COMBINED_COLOR, label="sum over replicas"), Patch(label="single device", **REFERENCE)]
    legend_below(fig, handles)
    replicas = plural(len(chunks), "replica's", "replicas'")
    fig.suptitle(f"Gradient of {name}: {replicas} gradients add up to the single-device one")
    fig.dpcourse_data = {
        "param": name, "inputs": x, "targets": y, "chunks": chunks, "entries": entries,
        "per_replica": per_replica, "sum": total, "reduced": reduced, "single_device": single, "max_abs_diff": diff,
    }
    return fig


def per_replica_mean_bias(batch: int = 7, n_devices: int = 2) -> Figure:
    """Draw why averaging the replicas' *mean* losses is not the batch mean when chunks are uneven.

    Each replica returns the mean loss of its chunk of ``b_j`` samples; gather turns the n scalars into a
    vector and ``.mean()`` averages it. Sample i of chunk j then weighs ``1 / (n * b_j)`` instead of
    ``1 / B``: 7 samples on 2 devices (chunks 4, 3) weigh 1/8 and 1/6, not 1/7. The weights are measured,
    not computed: autograd differentiates the same pipeline with respect to each sample's loss. With even
    chunks (8 on 2) the weights and so the gradients match the single-device ones.

    The returned figure carries ``fig.dpcourse_data`` with the weights, both gradients and ``max_abs_diff``.
    """
    device = choose_devices(1)[0]
    model = examples.make_model().to(device)
    x, y = examples.make_batch(batch, device=device)
    per_sample = torch.ones(batch, device=x.device, requires_grad=True)
    weighing = _forward(examples.ChunkMean(), (per_sample,), n_devices)
    chunks = weighing.rows
    (weights,) = torch.autograd.grad(weighing.gathered.mean(), [per_sample])
    name = _first_weight(model)
    original = tensor_at(model, name)
    losses = _forward(examples.LossInside(model), (x, y), n_devices).gathered
    (data_parallel,) = torch.autograd.grad(losses.mean(), [original])
    (single,) = torch.autograd.grad(F.cross_entropy(model(x), y), [original])
    diff = examples.max_difference(data_parallel, single)

    fig = new_figure(height=4.4)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.3])
    owners = [j for j, b in enumerate(chunks) for _ in range(b)]
    left.bar(range(batch), weights.tolist(), color=[device_color(j) for j in owners], gid="weight")
    left.axhline(1 / batch, color="black", linestyle="--", label=f"single device: 1/{batch}")
    left.set_xlabel("sample")
    left.set_ylabel("weight of the sample's loss")
    left.set_ylim(0, 1.3 * weights.max().item())
    left.legend(loc="upper left", fontsize=8)
    left.set_title("measured per-sample weights", fontsize=10)
    _compare_bars(right, name, data_parallel, single)
    right.set_title(f"gradient of {name}: max |diff| {examples.gap(diff)}", fontsize=10)
    handles = device_handles([plural(b, "row") for b in chunks])
    handles += [Patch(color=COMBINED_COLOR, label="mean of chunk means"), Patch(label="single device", **REFERENCE)]
    legend_below(fig, handles)
    fractions = list(dict.fromkeys(f"1/{len(chunks) * b}" for b in chunks))
    verdict = f"weighs samples {', '.join(fractions)}, not 1/{batch}" if fractions != [f"1/{batch}"] else (
        f"weighs every sample 1/{batch}, as one device does")
    fig.suptitle(f"{plural(batch, 'sample')} on {plural(len(chunks), 'device')} "
                 f"(chunks {', '.join(map(str, chunks))}):\na mean of means {verdict}")
    fig.dpcourse_data = {
        "chunks": chunks, "weights": weights, "expected_weights": [1 / (len(chunks) * chunks[j]) for j in owners],
        "data_parallel": data_parallel, "single_device": single, "max_abs_diff": diff,
    }
    return fig


def _compare_bars(ax: Axes, name: str, data_parallel: torch.Tensor, single: torch.Tensor) -> None:
    """Pairs of bars for the largest entries: the data-parallel gradient and the single-device one."""
    entries = _largest_entries(single)
    positions = range(len(entries))
    ax.bar([p - 0.2 for p in positions], [data_parallel.flatten()[e].item() for e in entries], width=0.4,
           color=COMBINED_COLOR, gid="data-parallel")
    ax.bar([p + 0.2 for p in positions], [single.flatten()[e].item() for e in entries], width=0.4,
           gid="single", **REFERENCE)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(positions, _entry_labels(single, entries))
    ax.set_xlabel(f"the {len(entries)} largest entries, by index")
    ax.set_ylabel(f"d loss / d {name}")
