"""Lesson 03's exercises: replica 0 aliases the original parameters, what replication copies (worked out, and
read from a trace), and a count that survives replication."""

import itertools

import torch

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from ..ui.words import plural
from .check import Case, Exercise, equals


def _replicas_judge(case: Case, answer) -> str | None:
    params, n = case.args
    if not isinstance(answer, (list, tuple)) or len(answer) != n:
        found = plural(len(answer), "list") if isinstance(answer, (list, tuple)) else type(answer).__name__
        return f"expected {plural(n, 'list')} of parameters, one per replica, got {found}"
    for r, replica in enumerate(answer):
        if len(replica) != len(params):
            return f"replica {r} has {plural(len(replica), 'tensor')}, expected {len(params)}"
        for j, (original, copy) in enumerate(zip(params, replica, strict=True)):
            if r == 0 and copy is not original:
                return f"replica 0, tensor {j} is not the original tensor: replica 0 must reuse it, not copy it"
            if r == 0:
                continue
            if copy.data_ptr() == original.data_ptr():
                return f"replica {r}, tensor {j} shares the original's memory: every other replica needs its own copy"
            if copy.shape != original.shape or not torch.equal(copy, original):
                return f"replica {r}, tensor {j} does not hold the original's values"
            if original.requires_grad and copy.grad_fn is None:
                return (f"replica {r}, tensor {j} is cut off from the original: its gradient could not flow back "
                        f"(clone keeps the link, detach cuts it)")
    return _shared_storage(answer)


def _shared_storage(replicas: list[list[torch.Tensor]]) -> str | None:
    """The first tensor whose memory (its storage) another replica also holds, the originals being replica 0's.

    Storages, not tensors, are compared: views of one clone are distinct tensors over the same memory, and a
    replica's update would show in every other. Tensors of one replica may share a storage (one flat buffer
    per device, as ``comm.broadcast_coalesced`` makes).
    """
    owner: dict[int, tuple[int, int]] = {}  # storage address -> (replica, tensor) that holds it first
    for r, replica in enumerate(replicas):
        for j, tensor in enumerate(replica):
            storage = tensor.untyped_storage()
            if storage.nbytes() == 0:  # an empty tensor holds no memory to share
                continue
            first_r, first_j = owner.setdefault(storage.data_ptr(), (r, j))
            if first_r != r:
                holder = f"original tensor {first_j}" if first_r == 0 else f"replica {first_r}'s tensor {first_j}"
                return (f"replica {r}, tensor {j} shares its memory with {holder}: each replica needs its own "
                        f"copies ([copies] * (n - 1) repeats one list: build a new list per replica)")
    return None


def _parameter_cases() -> list[Case]:
    params = list(examples.make_model().parameters())
    pair = [torch.ones(2, 3, requires_grad=True), torch.arange(4.0, requires_grad=True)]
    return [
        Case("the course model on 1 device", (params, 1), "one replica: the original tensors themselves"),
        Case("the course model on 2 devices", (list(examples.make_model().parameters()), 2),
             "list 0 holds the original tensors; lists 1, 2, ... hold clones"),
        Case("two tensors on 4 devices", (pair, 4)),
    ]


REPLICATE_PARAMETERS = Exercise(
    name="replicate_parameters",
    task="Write replicate_parameters(params, n): n lists of tensors, one per replica. List 0 holds the original "
         "tensors themselves; the others hold fresh copies that gradients can flow back through.",
    cases=_parameter_cases,
    judge=_replicas_judge,
)


def _replicate_bytes(model: torch.nn.Module, n: int) -> int:
    tensors = itertools.chain(model.parameters(), model.buffers())
    return (n - 1) * sum(t.numel() * t.element_size() for t in tensors)


def _models_on_up_to_6_devices() -> list[Case]:
    models = {
        "Linear(3, 2)": lambda: torch.nn.Linear(3, 2),
        "float64 Linear(5, 1)": lambda: torch.nn.Linear(5, 1).double(),
        "Linear(4, 4) without bias": lambda: torch.nn.Linear(4, 4, bias=False),
        "BatchNorm1d(6)": lambda: torch.nn.BatchNorm1d(6),
        "float16 Embedding(10, 3)": lambda: torch.nn.Embedding(10, 3).half(),
    }
    return [Case(f"{name} on {plural(n, 'device')}", (make(), n)) for name, make in models.items() for n in range(1, 7)]


REPLICATE_BYTES = Exercise(
    name="replicate_bytes",
    task="Write replicate_bytes(model, n): how many bytes replicating `model` onto n devices copies "
         "(parameters and buffers).",
    cases=lambda: [
        Case("the course model on 1 device", (examples.make_model(), 1), "replica 0 copies nothing"),
        Case("the course model on 4 devices", (examples.make_model(), 4),
             "replica 0 reuses the original: 3 copies, each of every parameter's numel() * element_size() bytes"),
        Case("the BatchNorm model on 3 devices", (examples.make_model(batchnorm=True), 3),
             "buffers are copied too: running_mean, running_var and the int64 num_batches_tracked"),
    ],
    judge=equals(_replicate_bytes),
    generated=_models_on_up_to_6_devices,
)


TRACED_REPLICATE_BYTES = Exercise(
    name="traced_replicate_bytes",
    task="Write traced_replicate_bytes(model, n): the bytes that dpcourse.replicate copies to put `model` on n "
         "devices, read from a trace.",
    cases=lambda: [
        Case("the course model on 4 devices", (examples.make_model(), 4),
             "the replicate span of a trace has a bytes_copied field"),
        Case("the BatchNorm model on 2 devices", (examples.make_model(batchnorm=True), 2)),
        Case("the course model on 1 device", (examples.make_model(), 1)),
    ],
    judge=equals(_replicate_bytes),
    generated=_models_on_up_to_6_devices,
)


def _forwards_counted(counter_class: type, n: int, rows: int, forwards: int) -> tuple[torch.nn.Module, list[int]]:
    """Build the learner's counter, run it ``forwards`` times under DataParallel on n devices, then once alone;
    return it and the count after each call."""
    counter = counter_class().to(devices(n)[0])
    dp = DataParallel(counter, devices=devices(n))
    counts = []
    for _ in range(forwards):
        dp(torch.zeros(rows, 1, device=devices(n)[0]))
        counts.append(int(counter.calls))
    counter(torch.zeros(rows, 1, device=devices(n)[0]))
    return counter, [*counts, int(counter.calls)]


def _counter_judge(case: Case, answer) -> str | None:
    n, rows, forwards = case.args
    counter, counts = answer
    if "calls" not in dict(counter.named_buffers()):
        return ("calls is not a registered buffer: an attribute or a tensor set on a replica is lost with it; "
                "register_buffer puts it in what replica 0 shares with your module")
    if counter.calls.is_floating_point():
        return f"calls is a {counter.calls.dtype} tensor: a count is a whole number (dtype=torch.long)"
    expected = list(range(1, forwards + 2))
    if counts != expected:
        return (f"after each call calls reads {counts}, expected {expected}: one per DataParallel forward (replica "
                f"0 counts, in place on the shared buffer), then one for the module called alone")
    return None


COUNTER = Exercise(
    name="Counter",
    task="Write the module Counter: its forward returns x unchanged and adds one to self.calls, a count that "
         "survives DataParallel (each forward under DataParallel counts once).",
    cases=lambda: [
        Case("1 forward on 2 devices", (2, 4, 1)),
        Case("3 forwards on 2 devices", (2, 4, 3), "update it in place, not by rebinding the attribute"),
        Case("2 forwards on 4 devices", (4, 8, 2), "only replica 0 shares the buffer's memory with your module"),
        Case("2 forwards on 1 device", (1, 3, 2)),
    ],
    judge=_counter_judge,
    call=lambda counter_class, case: _forwards_counted(counter_class, *case.args),
)

EXERCISES = (REPLICATE_PARAMETERS, REPLICATE_BYTES, TRACED_REPLICATE_BYTES, COUNTER)
