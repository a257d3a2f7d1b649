"""Lesson 09's quiz experiments (``quizzes/09_performance.toml``): what replicate costs on every forward."""

import torch
from torch import nn

from dpcourse import viz
from dpcourse.devices import devices as choose_devices
from dpcourse.replicate import replicate
from dpcourse.trace import trace

from ..lab import data_parallel_over, seeded_module, seeded_randn
from ..outcome import Outcome


def replicate_every_forward() -> Outcome:
    """Trace 3 forwards on 2 devices and count the replicate steps."""
    dp = data_parallel_over(seeded_module(lambda: nn.Linear(64, 64)), 2)
    with trace() as recorded:
        for _ in range(3):
            dp(seeded_randn(8, 64))
    spans = recorded.steps("replicate")
    lines = [f"  replicate at {s.start * 1e3:.3f} ms copied {s.bytes_copied} bytes" for s in spans]
    return Outcome("3 forwards on 2 devices:\n" + "\n".join(lines), len(spans), viz.timeline(recorded))


def _copied_bytes(replica: nn.Module, originals: set[int]) -> int:
    """Bytes of ``replica``'s tensors that live in memory of their own, not in the original module's storage."""
    tensors = [t for module in replica.modules() for t in vars(module).values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors if t.untyped_storage().data_ptr() not in originals)


def replicate_bytes() -> Outcome:
    """The bytes one replicate step copies for ``nn.Linear(256, 256)`` on 4 devices, read from the replicas.

    A replica's tensor is a copy when its storage is not one of the model's own; replica 0's are the model's.
    """
    model = seeded_module(lambda: nn.Linear(256, 256))
    replicas = replicate(model, choose_devices(4))
    originals = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    per_replica = [_copied_bytes(replica, originals) for replica in replicas]
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    copied = sum(per_replica)
    text = (
        f"parameters: {sum(p.numel() for p in model.parameters())} float32 = {size} bytes\n"
        f"bytes in memory of their own, per replica: {per_replica}\n"
        f"replicate on 4 devices copied {copied} bytes = {copied / size:g} x the parameters"
    )
    return Outcome(text, copied)


def modules_per_forward() -> Outcome:
    """Count the module objects one replicate builds for 50 layers on 4 devices: those that are not the model's."""
    model = seeded_module(lambda: nn.Sequential(*(nn.Linear(2, 2) for _ in range(50))))
    replicas = replicate(model, choose_devices(4))
    originals = {id(module) for module in model.modules()}
    new = [sum(id(module) not in originals for module in replica.modules()) for replica in replicas]
    text = (
        f"nn.Sequential of 50 Linear layers = {len(originals)} modules\n"
        f"one replicate on 4 devices built {sum(new)} new module objects (each a shallow copy, made in Python): "
        f"{', '.join(f'replica {i}: {n}' for i, n in enumerate(new))}\n"
        f"replica 0 is the model itself: {replicas[0] is model}"
    )
    return Outcome(text, sum(new))


EXPERIMENTS = (
    replicate_every_forward,
    replicate_bytes,
    modules_per_forward,
)
