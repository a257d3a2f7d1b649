"""Count what one rank sends and receives, point to point, and which collectives it calls, of what size.

    with counted() as traffic:
        ring_all_reduce(tensor)
    traffic.sent, traffic.received, traffic.calls           # bytes, bytes, (collective, bytes) per call
    traffic.collectives                                      # the names alone, in order

Every point-to-point call of ``torch.distributed`` (``send``, ``isend``, ``recv``, ``irecv``, and
``batch_isend_irecv``, which calls those) ends in one method of the process group: ``group.send([tensor],
dst, tag)`` or ``group.recv([tensor], src, tag)`` (``torch/distributed/distributed_c10d.py: isend, irecv``).
``counted`` wraps those methods on the ``ProcessGroup`` class while it is open, so it sees every message of
every group in this process, whatever module-level name the caller used. The bytes are the tensors'
payload, ``numel() * element_size()``: what an algorithm asks to move, not what the wire adds to it.

Collectives run inside the backend, so what they send cannot be counted this way: that depends on the
backend's algorithm. ``counted`` records each call of one (``torch.distributed.all_reduce`` and its kin) with
the size of the whole collective, the bytes of its largest tensor argument: the tensor all-reduced or
broadcast, the full output of an all-gather (all shards), the full input of a reduce-scatter. The calls are
how a check tells a hand-written all-reduce from a call of the real one, and the sizes what lesson 18 compares.

``swapped(replacements)`` is how ``counted`` puts its recording collectives in, and the one way the course
replaces ``torch.distributed``'s functions for a while (``sharded.rings.ring_collectives`` swaps in rings).
"""

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

# The functions that move data between ranks inside the backend; barrier moves none and is not listed.
COLLECTIVES = (
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_single",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
)


@dataclasses.dataclass
class Traffic:
    """Bytes this rank sent and received point to point, and ``(name, bytes)`` per collective called, in order."""

    sent: int = 0
    received: int = 0
    calls: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    # Each send's request (dist.Work) by its id(), held weakly: a request holds its tensor, so keeping it would keep
    # the tensor's memory alive, and lesson 20 measures that memory.
    sends: dict[int, Callable[[], object]] = dataclasses.field(default_factory=dict)
    waited: set[int] = dataclasses.field(default_factory=set)  # the id() of each live request someone waited for
    dropped_unwaited: int = 0  # requests gone without anybody waiting for them

    def sent_request(self, request: dist.Work) -> None:
        """Follow ``request``: when it is gone, whether somebody waited for it is noted, and its id() forgotten
        (a later request may get the same id)."""
        key = id(request)

        def gone(_: weakref.ref) -> None:
            self.dropped_unwaited += key not in self.waited
            self.waited.discard(key)
            self.sends.pop(key, None)

        try:
            self.sends[key] = weakref.ref(request, gone)
        except TypeError:  # a torch whose Work takes no weak reference: kept, with its tensor, while counting
            self.sends[key] = lambda: request

    @property
    def unwaited(self) -> int:
        """Sends whose request nobody waited for (``dist.isend`` without ``.wait()``): torch lets the tensor change
        or be freed before it is sent (``torch/distributed/distributed_c10d.py: isend``). A blocking ``dist.send``
        waits for its own."""
        return self.dropped_unwaited + sum(key not in self.waited for key in self.sends)

    @property
    def collectives(self) -> list[str]:
        """The names of the collectives called, in order."""
        return [name for name, _ in self.calls]


def _payload(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _argument_bytes(argument: object) -> int:
    """A collective's argument: a tensor, a list of tensors (``all_gather``'s outputs), or not data (0 bytes)."""
    tensors = [argument] if isinstance(argument, torch.Tensor) else argument if isinstance(argument, list) else []
    return _payload([t for t in tensors if isinstance(t, torch.Tensor)])


@contextlib.contextmanager
def swapped(replacements: dict[str, Callable]) -> Iterator[None]:
    """Inside the ``with`` block, ``torch.distributed.<name>`` is ``replacements[name]``, for every name; after it
    (an exception too), each is what it was before.

    ``torch.distributed`` re-exports the functions of ``torch.distributed.distributed_c10d``, and torch's own
    functions call each other through the second module (``all_gather_into_tensor`` calls ``all_gather_single``
    there), so both are swapped. A name bound before the block (``from torch.distributed import all_reduce``)
    keeps the function it was bound to. ``counted`` swaps every collective for one that records its call;
    ``sharded.rings.ring_collectives`` swaps three for rings written with sends.
    """
    modules = (dist, distributed_c10d)
    for name in replacements:
        if not all(hasattr(module, name) for module in modules):
            raise AttributeError(f"torch.distributed has no {name} to swap (torch {torch.__version__}): name one of "
                                 "its functions, such as all_reduce or all_gather.")
    originals = [(module, name, getattr(module, name)) for module in modules for name in replacements]
    for module, name, _ in originals:
        setattr(module, name, replacements[name])
    try:
        yield
    finally:
        for module, name, function in originals:
            setattr(module, name, function)


def outermost_calls(record):
    """A wrapper factory for collectives: ``wrap(name, function)`` calls ``record(name, args, kwargs)`` for the calls
    the program made, not for those one collective makes inside another (torch 2.13's ``all_gather_into_tensor``
    calls ``all_gather_single``); every collective wrapped by one factory shares its depth."""
    inside = [0]

    def wrap(name, function):
        def collective(*args, **kwargs):
            if not inside[0]:
                record(name, args, kwargs)
            inside[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                inside[0] -= 1

        return collective

    return wrap


@contextlib.contextmanager
def counted() -> Iterator[Traffic]:
    """Count this process's point-to-point bytes and collective calls, with their sizes, inside the ``with`` block."""
    traffic = Traffic()
    group_class = dist.ProcessGroup
    # The class's own entries, put back as they were: reading ``group_class.send`` instead gives the bare
    # function, which, set back on the class, would no longer receive the group as ``self``.
    methods = {name: vars(group_class)[name] for name in ("send", "recv", "recv_anysource")}
    send, recv, recv_anysource = group_class.send, group_class.recv, group_class.recv_anysource

    def counting_send(group, tensors, dst, tag=0):
        traffic.sent += _payload(tensors)
        request = send(group, tensors, dst, tag)
        traffic.sent_request(request)
        return request

    wait = dist.Work.wait

    def noting_wait(request, *args, **kwargs):
        traffic.waited.add(id(request))
        return wait(request, *args, **kwargs)

    def counting_recv(group, tensors, src, tag=0):
        traffic.received += _payload(tensors)
        return recv(group, tensors, src, tag)

    def counting_recv_anysource(group, tensors, tag=0):
        traffic.received += _payload(tensors)
        return recv_anysource(group, tensors, tag)

    def note(name, args, kwargs):
        traffic.calls.append((name, max(map(_argument_bytes, [*args, *kwargs.values()]), default=0)))

    noting = outermost_calls(note)
    collectives = {name: noting(name, getattr(dist, name)) for name in COLLECTIVES if hasattr(dist, name)}
    group_class.send, group_class.recv, group_class.recv_anysource = (
        counting_send, counting_recv, counting_recv_anysource)
    dist.Work.wait = noting_wait
    try:
        with swapped(collectives):
            yield traffic
    finally:
        for name, method in methods.items():
            setattr(group_class, name, method)
        dist.Work.wait = wait
