"""The capstone's checks: a minimal DataParallel, forward and backward, written by the learner from their own pieces.

The pieces, each checked on its own, then all together against ``dpcourse.DataParallel`` on 1-4 CPU devices:

==========================  =============================================================================
exercise                    what the learner's code must do
==========================  =============================================================================
``capstone_scatter``        split a batch by ``torch.chunk``'s rule (fewer chunks than devices is allowed)
``capstone_broadcast``      an autograd Function: replica 0 gets the tensors themselves, the others copies;
                            backward **sums** every replica's gradient (reduce-add)
``capstone_replicate``      shallow copies of the module tree wired to the given tensors; replica 0 keeps the
                            original buffers (aliasing), the others get copies; plain attributes are shared
``capstone_parallel_apply`` one new thread per replica, outputs in replica order; a replica's exception is
                            raised again in the caller, after every thread has ended
``capstone_gather``         concatenate the outputs in replica order
``capstone_data_parallel``  all of it: outputs, gradients, BatchNorm statistics and rows per replica equal
                            to ``dpcourse.DataParallel``'s
``capstone_zero1``          Part III, after lesson 18: a whole ZeRO-1 training step on real ranks (all-reduce,
                            the optimizer on this rank's shard, all-gather), the same weights as one-device
                            Adam's and SGD's
==========================  =============================================================================
"""

import threading
import time
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
from torch import nn

from dpcourse.data_parallel import DataParallel
from dpcourse.ui.words import plural

from .check import Case, Exercise, equals, first_difference


def _rows(batch: int, features: int = 3) -> torch.Tensor:
    return torch.arange(batch * features, dtype=torch.float32).reshape(batch, features)


CAPSTONE_SCATTER = Exercise(
    "capstone_scatter",
    "Write scatter(x, n): the chunks of x for n replicas, by torch.chunk's rule.",
    lambda: [Case(f"{b} rows, {plural(n, 'device')}", (_rows(b), n), hint) for b, n, hint in [
        (10, 4, "chunks of ceil(10 / 4) = 3 rows, then what is left"),
        (6, 4, "6 rows on 4 devices give 3 chunks of 2: the 4th replica gets nothing"),
        (3, 1, "one device gets the whole batch"),
    ]],
    equals(lambda x, n: list(x.chunk(n))),
)


def _judge_broadcast(case: Case, outputs: Any) -> str | None:
    replicas, tensors = case.args[0], case.args[1:]
    expected = [t for _ in range(replicas) for t in tensors]
    if (difference := first_difference([t.detach() for t in expected], [o.detach() for o in outputs], "copies")):
        return difference
    for i, (copy, original) in enumerate(zip(outputs[: len(tensors)], tensors, strict=True)):
        if copy.data_ptr() != original.data_ptr():
            return f"replica 0's tensor {i} is a copy: replica 0 must get the original tensors themselves (aliasing)"
    for i, copy in enumerate(outputs[len(tensors):]):
        if any(copy.data_ptr() == t.data_ptr() for t in tensors):
            return f"copy {len(tensors) + i} shares memory with an original: replicas 1.. need real copies"
    weights = [float(i + 1) for i in range(len(outputs))]
    sum(w * o.sum() for w, o in zip(weights, outputs, strict=True)).backward()
    for i, t in enumerate(tensors):
        expected_grad = torch.full_like(t, sum(weights[r * len(tensors) + i] for r in range(replicas)))
        if (difference := first_difference(expected_grad, t.grad, f"gradient of tensor {i}")):
            return difference + " (backward must add up every replica's gradient)"
    return None


def _broadcast_cases() -> list[Case]:
    cases = [Case(f"{plural(n, 'replica')} of 2 tensors", (n, torch.ones(2, 2, requires_grad=True),
                                                  torch.arange(3.0, requires_grad=True)), hint) for n, hint in [
        (1, "with one replica, forward returns the tensors themselves"),
        (2, "replica 1's tensors are clones; the gradient of each original is the sum over replicas"),
        (3, "sum, do not average: each copy's gradient counts once"),
    ]]
    # One tensor: backward gets one gradient per replica, and a grouping off by one drops the last replica's
    hint = "with one tensor, grads holds one gradient per replica: every one of them belongs in the sum"
    return [*cases, Case("3 replicas of 1 tensor", (3, torch.arange(4.0, requires_grad=True)), hint)]


CAPSTONE_BROADCAST = Exercise(
    "capstone_broadcast",
    "Write Broadcast, an autograd Function: forward(ctx, n, *tensors) returns n copies (replica 0: the tensors "
    "themselves), backward sums the replicas' gradients.",
    _broadcast_cases,
    _judge_broadcast,
)


def _judge_replicate(case: Case, replicas: Any) -> str | None:
    module, copies = case.args
    if not isinstance(replicas, (list, tuple)) or len(replicas) != len(copies):
        return f"expected a list of {len(copies)} replicas, got {type(replicas).__name__}"
    x = _rows(4)
    for i, (replica, tensors) in enumerate(zip(replicas, copies, strict=True)):
        weight = replica.body[0].weight
        if weight is not tensors[0]:
            return f"replica {i}'s first Linear does not use copies[{i}][0]: wire each replica to its own tensors"
        if replica.seen is not module.seen:
            return f"replica {i} has its own `seen` list: plain attributes are shared by reference, not copied"
        same_storage = replica.body[1].running_mean.data_ptr() == module.body[1].running_mean.data_ptr()
        if same_storage != (i == 0):
            return (f"replica {i}'s BatchNorm buffers " + ("are copies" if i == 0 else "are the original's") +
                    ": replica 0 keeps the original buffers, the others get copies")
        if (difference := first_difference(module.eval()(x), replica.eval()(x), f"replica {i}'s output")):
            return difference
    return None


def _replicate_cases() -> list[Case]:
    cases = []
    for n in (1, 2, 3):
        module = CapstoneModel()
        copies = [[p if i == 0 else p.detach().clone() for p in module.parameters()] for i in range(n)]
        hint = "use module._replicate_for_data_parallel() for every submodule"
        cases.append(Case(plural(n, "replica"), (module, copies), hint))
    return cases


def _probe(i: int, seen: list, delay: float = 0.0) -> Callable[[torch.Tensor], torch.Tensor]:
    """Replica ``i``: ``x * (i + 1)``, noting which thread ran it. ``delay`` seconds first, so that a parallel_apply
    that returns without joining its threads returns before this output exists, every time, not by chance."""

    def replica(x: torch.Tensor) -> torch.Tensor:
        seen.append((i, threading.current_thread().name))
        time.sleep(delay)
        return x * (i + 1)

    return replica


class ReplicaFailed(ValueError):
    """What the failing replica of a ``capstone_parallel_apply`` case raises: the caller must see it."""


def _failing(i: int, seen: list) -> Callable[[torch.Tensor], torch.Tensor]:
    def replica(x: torch.Tensor) -> torch.Tensor:
        seen.append((i, threading.current_thread().name))
        raise ReplicaFailed(f"replica {i} failed")

    return replica


def _call_parallel_apply(function: Callable, case: Case) -> Any:
    """The learner's outputs; in the case with a failing replica, the exception their function raised (or
    what it returned instead, which the judge then rejects). Every thread the call starts is noted in
    ``case.context["started"]``: a thread that does no replica's work, and fails where no one sees it, leaves
    no other trace."""
    caller, start, started = threading.current_thread(), threading.Thread.start, case.context["started"]

    def counted_start(thread: threading.Thread) -> None:
        if threading.current_thread() is caller:  # not a thread some other code starts meanwhile
            started.append(thread.name)
        start(thread)

    with mock.patch.object(threading.Thread, "start", counted_start):
        try:
            return function(*case.args)
        except ReplicaFailed as error:
            return error


def _judge_parallel_apply(case: Case, outputs: Any) -> str | None:
    (functions, inputs), seen, started = case.args, case.context["seen"], case.context["started"]
    if len(started) > len(functions):
        return (f"your parallel_apply started {len(started)} threads for {plural(len(functions), 'replica')}: "
                f"start one thread per replica, no more")
    if "fails" in case.context:
        if not isinstance(outputs, ReplicaFailed):
            return (f"replica {case.context['fails']} raised ReplicaFailed in its thread, but your parallel_apply "
                    f"returned {type(outputs).__name__}: the caller never saw the error")
        return None if len(seen) == len(functions) else (
            f"only {len(seen)} of {len(functions)} replicas ran: start every thread, even if one fails")
    expected = [x * (i + 1) for i, x in enumerate(inputs)]
    if (difference := first_difference(expected, outputs, "outputs")):
        return difference + " (output i must be functions[i](inputs[i]), in replica order)"
    threads = {name for _, name in seen}
    caller = threading.current_thread().name
    if len(functions) > 1 and (len(threads) != len(functions) or caller in threads):
        return (f"{len(functions)} replicas ran in {plural(len(threads), 'thread')} {sorted(threads)}: start one new "
                "thread each")
    return None


def _parallel_apply_cases() -> list[Case]:
    cases = []
    for n in (1, 2, 4):
        seen: list = []
        functions = [_probe(i, seen, delay=0.2 if i == n - 1 else 0.0) for i in range(n)]
        inputs = [_rows(2) + i for i in range(n)]
        hint = "start every thread, then join them all, then return the outputs"
        cases.append(Case(plural(n, "replica"), (functions, inputs), hint, {"seen": seen, "started": []}))
    seen = []
    functions = [_probe(0, seen), _failing(1, seen), _probe(2, seen)]
    hint = "in each thread, catch the exception and keep it in place of the output; after joining, raise it"
    cases.append(Case("3 replicas, replica 1 raises", (functions, [_rows(2)] * 3), hint,
                      {"seen": seen, "started": [], "fails": 1}))
    return cases


CAPSTONE_PARALLEL_APPLY = Exercise(
    "capstone_parallel_apply",
    "Write parallel_apply(functions, inputs): functions[i](inputs[i]) in a new thread each, outputs in order; "
    "a replica's exception raised again in the caller.",
    _parallel_apply_cases,
    _judge_parallel_apply,
    _call_parallel_apply,
)

CAPSTONE_REPLICATE = Exercise(
    "capstone_replicate",
    "Write replicate(module, copies): one shallow copy of the module tree per entry of copies, using its tensors.",
    _replicate_cases,
    _judge_replicate,
)

CAPSTONE_GATHER = Exercise(
    "capstone_gather",
    "Write gather(outputs): concatenate the replicas' outputs along dim 0, in replica order.",
    lambda: [Case(plural(len(sizes), "output"), ([_rows(b) + i for i, b in enumerate(sizes)],), "replica 0 first")
             for sizes in [(3, 3, 3, 1), (2,), (4, 2)]],
    equals(lambda outputs: torch.cat(outputs)),
)


class CapstoneModel(nn.Module):
    """Linear -> BatchNorm -> ReLU -> Linear (or ``body``), noting the rows and thread of every forward in
    ``self.seen``."""

    def __init__(self, body: nn.Module | None = None) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        if body is None:
            body = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 2))
        self.body = body
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator))
        self.seen: list[tuple[int, str]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((len(x), threading.current_thread().name))
        return self.body(x)


def _step(out: torch.Tensor) -> torch.Tensor:
    """Backward of a loss that weighs every output row differently (so rows cannot be swapped); the output."""
    weights = torch.arange(1.0, out.numel() + 1).reshape(out.shape)
    (out * weights).sum().backward()
    return out.detach()


def _judge_data_parallel(case: Case, answer: Any) -> str | None:
    """The learner's step against ``dpcourse.DataParallel`` on ``n`` explicit CPU devices, on a GPU machine too.

    The learner's ``data_parallel(module, x, n)`` takes no devices: its replicas compute where the module's
    tensors are, here the CPU. So the reference runs on ``["cpu"] * n``, not on ``dpcourse.devices(n)``, which
    is ``[cuda:0, ...]`` on a GPU machine and would need the reference model moved there.
    """
    (mine, x, n), reference = case.args, case.context["reference"]
    expected = _step(DataParallel(reference, devices=["cpu"] * n)(x))
    if not isinstance(answer, torch.Tensor) or answer.grad_fn is None:
        return "data_parallel must return the gathered output, still attached to the graph (no .detach())"
    checks = [
        ("output", expected, _step(answer)),
        ("gradients", [p.grad for p in reference.parameters()], [p.grad for p in mine.parameters()]),
        ("BatchNorm running statistics", list(reference.buffers()), list(mine.buffers())),
        ("rows per replica forward", sorted(r for r, _ in reference.seen), sorted(r for r, _ in mine.seen)),
    ]
    if any(p.grad is None for p in mine.parameters()):
        return ("the module's parameters got no gradient: the replicas are cut off from them. Make the replicas' "
                "parameters with your Broadcast (copies autograd connects to the originals), not copy.deepcopy")
    for what, want, got in checks:
        if (difference := first_difference(want, got, what, atol=1e-4)):  # sums in another order differ by ~1e-5
            return f"{difference}. {_WHERE_TO_LOOK[what]}"
    threads = {t for _, t in mine.seen}
    if len(mine.seen) > 1 and (len(threads) != len(mine.seen) or threading.current_thread().name in threads):
        return (f"{len(mine.seen)} replica forwards ran in {len(threads)} thread(s): each replica needs its own. "
                f"{_WHERE_TO_LOOK['threads']}")
    return None


# What a difference in each checked quantity points to: the hint follows the failure, not the case.
_WHERE_TO_LOOK = {
    "output": "Look at scatter and gather: chunks in order (chunk i to replica i), concatenated back in that order",
    "gradients": "Look at Broadcast.backward: each parameter's gradient is the sum of its copies' gradients "
                 "(never their mean), and the scatter's chunks must reach the replicas in order",
    "BatchNorm running statistics": "Look at replicate: replica 0 must use the module's own buffers (not copies), "
                                    "so that its forward updates the statistics the module keeps",
    "rows per replica forward": "Look at scatter: torch.chunk's rule, chunks of ceil(rows / n), and no replica "
                                "for a device that gets no chunk",
    "threads": "Look at parallel_apply: start one thread per replica, then join them all",
}


def _data_parallel_cases() -> list[Case]:
    cases = []
    for batch, n in [(8, 1), (10, 2), (8, 3), (6, 4)]:  # the hints come from the judge: what differed, where to look
        mine, reference = CapstoneModel(), CapstoneModel()
        x = torch.randn(batch, 3, generator=torch.Generator().manual_seed(batch))
        cases.append(Case(f"{batch} rows on {plural(n, 'CPU device')}", (mine, x, n), "", {"reference": reference}))
    # One parameter: Broadcast's flat output holds one tensor per replica, so grouping it must not drop the last.
    # PReLU's slopes: Linear(bias=False) keeps a None bias in _parameters, which the lesson's replicate expects not
    mine, reference = (CapstoneModel(nn.Sequential(nn.PReLU(3), nn.Tanh())) for _ in range(2))
    hint = "with one parameter, each replica's copies are one entry of Broadcast's output: n groups of 1"
    cases.append(Case("7 rows on 3 CPU devices, a model with one parameter",
                      (mine, torch.randn(7, 3, generator=torch.Generator().manual_seed(7)), 3), hint,
                      {"reference": reference}))
    return cases


CAPSTONE_DATA_PARALLEL = Exercise(
    "capstone_data_parallel",
    "Write data_parallel(module, x, n) from your scatter, Broadcast, parallel_apply and gather: output, "
    "gradients and BatchNorm statistics as dpcourse.DataParallel's.",
    _data_parallel_cases,
    _judge_data_parallel,
)


# Part III: ZeRO-1 from nothing. The learner's training program runs on 2, 3 and 4 real ranks and is judged as
# lesson 18's zero1_training is, on a model the lesson did not use (8 -> 13 -> 4: 173 parameters, uneven shards
# on 2, 3 and 4 ranks), with other steps, learning rates and seeds.
from .lesson18 import SLOW, same_weights_and_sharded_state, train_each_case  # noqa: E402 (this part came later)


def _zero1_cases() -> list[Case]:
    settings = [(2, 4, 5e-3, 1, "flatten, all-reduce and average the gradients, as DDP would"),
                (3, 3, 2e-2, 2, "173 numbers on 3 ranks: shards of 58, 58 and 57; pad the last for the all-gather"),
                (4, 5, 1e-2, 3, "each rank's optimizer is built once, over its own shard, and steps it every step")]
    return [Case(f"{n} ranks, {steps} steps, lr {lr:g}, seed {seed}", (n,), hint,
                 {"training": {"steps": steps, "lr": lr, "seed": seed, "widths": (8, 13, 4)}})
            for n, steps, lr, seed, hint in settings]


CAPSTONE_ZERO1 = Exercise(
    "capstone_zero1",
    "Write zero1(model, batches, lr, optimizer_class), run on every rank: ZeRO-1 training with F.mse_loss, each "
    "rank's optimizer_class([shard], lr=lr) over its own shard of the flat parameters (the check passes "
    "torch.optim.Adam, then torch.optim.SGD); return the final full parameters.",
    _zero1_cases,
    same_weights_and_sharded_state,
    train_each_case,
    slow=SLOW,
)

# Part IV: a run that survives a killed rank. The learner's snapshot and resume run on 2 real ranks under lesson
# 24's restarting launcher, rank 1 killed as step 14 starts, and are judged as lesson 24's snapshot_and_resume is:
# where each rank resumed, each state right after resume, then the final weights, bit for bit.
from .lesson24 import SNAPSHOT_AND_RESUME  # noqa: E402 (this part came later)

CAPSTONE_RESUME = Exercise(
    "capstone_resume",
    "Write snapshot(directory, model, optimizer, epoch, done) and resume(directory, model, optimizer), run on every "
    "rank: the first saves everything this rank's next step reads, the second loads it back and returns (epoch, "
    "done), or None when nothing was saved; check the pair (snapshot, resume).",
    SNAPSHOT_AND_RESUME.cases,
    SNAPSHOT_AND_RESUME.judge,
    SNAPSHOT_AND_RESUME.call,
    slow=SNAPSHOT_AND_RESUME.slow,
)

EXERCISES = (CAPSTONE_SCATTER, CAPSTONE_BROADCAST, CAPSTONE_PARALLEL_APPLY, CAPSTONE_REPLICATE, CAPSTONE_GATHER,
             CAPSTONE_DATA_PARALLEL, CAPSTONE_ZERO1, CAPSTONE_RESUME)
