"""The nine stages of one DataParallel training step: what each shows of a ``StepRecord``, and why it matters.

Each stage has a name, two or three sentences of explanation, the live tensors as HTML, and optionally the
``dpcourse.viz`` figure that pictures it. Figures are recomputed from a real run by the viz functions
themselves; ``StepThrough`` renders each one once per (devices, batch) setting.
"""

import dataclasses
import itertools
from collections.abc import Callable

import torch
from matplotlib.figure import Figure

from dpcourse import viz
from dpcourse.by_hand import tensor_at
from dpcourse.examples import max_difference

from .chunks import idle_warning
from .explorer import paragraph, table
from .step_run import LEARNING_RATE, StepRecord


def summary(t: torch.Tensor) -> str:
    """``[3, 8] on cpu: mean +0.123, min -1.234, max +2.345`` (a 0-d tensor: just its value)."""
    t = t.detach()
    if t.dim() == 0:
        return f"{t.item():+.4f} on {t.device}"
    v = t.float()
    return f"{list(t.shape)} on {t.device}: mean {v.mean():+.3f}, min {v.min():+.3f}, max {v.max():+.3f}"


def shapes(tensors: list[torch.Tensor]) -> str:
    return ", ".join(str(list(t.shape)) for t in tensors)


def _inputs(r: StepRecord) -> str:
    n_params = sum(w.numel() for w in r.weights_before.values())
    labels = str(r.y.tolist()) if r.y.numel() <= 16 else summary(r.y)
    return table(["tensor", "value"], [
        ["x (inputs)", summary(r.x)], ["y (labels)", labels],
        ["model", f"Linear(8, 16) → ReLU → Linear(16, 4): {n_params} parameters on {r.devices[0]}"]])


def _scatter(r: StepRecord) -> str:
    sizes = [c.shape[0] for c in r.chunks]
    starts = list(itertools.accumulate(sizes, initial=0))
    rows = [[i, d, f"x[{starts[i]}:{starts[i + 1]}]", summary(c), "view of x (no copy)" if _shares(c, r.x) else "copy"]
            for i, (c, d) in enumerate(zip(r.chunks, r.used, strict=True))]
    head = paragraph(f"chunk shapes {shapes(r.chunks)}. {idle_warning(r.x.shape[0], len(r.devices), sizes, 'row')}")
    return head + table(["replica", "device", "rows", "chunk", "memory"], rows)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _replicate(r: StepRecord) -> str:
    weight = next(iter(r.weights_before))
    original = tensor_at(r.model, weight)
    rows = []
    for i, (replica, d) in enumerate(zip(r.replicas, r.used, strict=True)):
        copy = tensor_at(replica, weight)
        memory = "the model's own memory" if _shares(copy, original) else "a copy"
        rows.append([i, d, f"{len(list(replica.parameters()))} Parameters", summary(copy), memory])
    head = paragraph(f"{len(r.replicas)} replicas, one per used device; what each holds for {weight}:")
    return head + table(["replica", "device", "replica.parameters()", weight, "memory"], rows)


def _parallel_apply(r: StepRecord) -> str:
    threads = {s.replica: s.thread for s in r.trace.steps("forward")}
    rows = [[i, d, threads.get(i, "?"), list(c.shape), summary(o)]
            for i, (c, o, d) in enumerate(zip(r.chunks, r.outputs, r.used, strict=True))]
    head = paragraph(f"output shapes {shapes(r.outputs)}")
    return head + table(["replica", "device", "thread", "input", "output"], rows)


def _gather(r: StepRecord) -> str:
    head = paragraph(f"outputs {shapes(r.outputs)} concatenated in replica order: gathered shape "
                     f"{list(r.gathered.shape)} on {r.gathered.device}")
    return head + table(["tensor", "value"], [["gathered", summary(r.gathered)]])


def _loss(r: StepRecord) -> str:
    return table(["", "cross-entropy"], [
        [f"DataParallel: gathered output, all {r.x.shape[0]} rows", f"{r.loss.item():.6f}"],
        ["single device: model(x), whole batch", f"{r.single_loss.item():.6f}"],
        ["|difference|", f"{(r.loss - r.single_loss).abs().item():.1e}"]])


def _backward(r: StepRecord) -> str:
    weight = next(iter(r.weights_before))
    rows = [[i, summary(g), summary(grads[weight])]
            for i, (g, grads) in enumerate(zip(r.output_grads, r.replica_grads, strict=True))]
    head = paragraph(f"gradient of the output split back to the replicas: shapes {shapes(r.output_grads)}")
    return head + table(["replica", "d loss / d output", f"d loss / d {weight} (replica's copy)"], rows)


def _reduce_add(r: StepRecord) -> str:
    rows = [[name, summary(g), f"{max_difference(g, r.single_grads[name]):.1e}"] for name, g in r.grads.items()]
    head = paragraph(f"max |sum of {len(r.replicas)} replica gradients - single device| = "
                     f"{max_difference(r.grads, r.single_grads):.1e}")
    return head + table(["parameter", ".grad = sum over replicas", "max |diff| to single device"], rows)


def _optimizer(r: StepRecord) -> str:
    rows = [[name, f"{max_difference(r.weights_after[name], w):.2e}",
             f"{max_difference(r.weights_after[name], r.single_weights_after[name]):.1e}"]
            for name, w in r.weights_before.items()]
    head = paragraph(f"SGD, lr {LEARNING_RATE}: max |weights - single-device step's| = "
                     f"{max_difference(r.weights_after, r.single_weights_after):.1e}")
    return head + table(["parameter", "max |change|", "max |diff| to single device"], rows)


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    explanation: str
    tensors: Callable[[StepRecord], str]
    figure: Callable[[StepRecord], Figure] | None = None


def _gradient_figure(r: StepRecord) -> Figure:
    return viz.gradient_sum(batch=r.x.shape[0], n_devices=len(r.devices))


STAGES = (
    Stage("inputs", "The whole batch and the one real model start on devices[0]. DataParallel will split the "
          "batch, not the model: every replica gets the full model and a slice of the rows.", _inputs),
    Stage("scatter", "torch.chunk cuts x into chunks of ceil(B / n) rows, one per device; the last is smaller, "
          "and some devices may get nothing. The labels y are not scattered: the loss is taken after the gather.",
          _scatter, lambda r: viz.chunk_split(r.x.shape[0], len(r.devices))),
    Stage("replicate", "Each used device gets a replica: a shallow copy of every submodule whose parameters are "
          "swapped for copies made by Broadcast. Replica 0's copies are views that share the model's memory; a "
          "replica owns no Parameters, only computed tensors whose backward leads to the originals.",
          _replicate, lambda r: viz.replicate_map(r.model, r.used)),
    Stage("parallel_apply", "Every replica runs forward on its own chunk, each in its own thread (replica-i). "
          "The matrix products release the GIL, so the threads can overlap.", _parallel_apply),
    Stage("gather", "The outputs are copied, in replica order, into one new tensor on devices[0]. Nothing is "
          "reordered or padded, so row i of the result belongs to row i of x.",
          _gather, lambda r: viz.gather_view([o.shape[0] for o in r.outputs], target_device=r.devices[0])),
    Stage("loss", "The loss is computed once, on the gathered output and the unscattered labels, exactly as on "
          "one device: a mean over all B rows. That is why DataParallel's loss equals the single-device one.", _loss),
    Stage("backward (split)", "Gather's backward splits the output gradient with the same chunk sizes and sends "
          "each piece back to its replica; autograd then runs each replica's backward and gives a gradient for "
          "every replica's copy of every parameter.", _backward, _gradient_figure),
    Stage("reduce-add", "Broadcast's backward is ReduceAdd: the copies' gradients are summed into the model's "
          ".grad on devices[0]. A sum of per-chunk gradients of a batch-mean loss is the whole batch's gradient.",
          _reduce_add, _gradient_figure),
    Stage("optimizer step", "The optimizer updates the one real model on devices[0]; the replicas are thrown "
          "away and rebuilt from the new weights at the next forward. The figure is this step's timeline from "
          "dpcourse.trace(): the gap after gather is the loss and autograd starting the backward.",
          _optimizer, lambda r: viz.timeline(r.trace)),
)
