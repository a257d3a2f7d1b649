"""Ring all-reduce against reduce-then-broadcast, on 2, 3 and 4 real ranks: bytes counted, times measured.

``compare()`` starts the ranks once. Every rank joins a group of the first ``n`` ranks for each ``n`` in
``world_sizes`` (``dist.new_group``), and the group's ranks run each algorithm of ``allreduce`` on every size,
plus gloo's own ``dist.all_reduce`` for reference. Per run it records, for every rank, the bytes it sent and
received (``traffic.counted``: deterministic) and how long the call took (best of ``repeats``, slowest rank:
it depends on the machine). A first, untimed run of every size checks the sum against ``dist.all_reduce``.

On one machine the ranks share its cores and memory, and gloo's "network" is the loopback interface, so the
times say little about GPUs linked by NVLink or machines on a network, where each rank has links of its own.
The bytes are the same everywhere: they are the algorithm's.
"""

import dataclasses
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from dpcourse import examples
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.trace import trace

from ...ranks.launcher import device, launch
from ...ranks.traffic import counted
from ..implementations.allreduce import reduce_then_broadcast, ring_all_reduce


def _gloo(tensor: torch.Tensor, group: dist.ProcessGroup) -> None:
    dist.all_reduce(tensor, group=group)


ALGORITHMS = {"reduce-then-broadcast": reduce_then_broadcast, "ring": ring_all_reduce, "gloo": _gloo}


def _run(name: str, numel: int, group: dist.ProcessGroup, repeats: int) -> dict:
    rank = dist.get_rank(group)
    algorithm = ALGORITHMS[name]
    tensor = torch.arange(numel, dtype=torch.float32, device=device()) % 7 + rank
    expected = tensor.clone()
    dist.all_reduce(expected, group=group)
    with counted() as traffic:  # a first run, not timed: it counts the bytes, checks the sum and warms up
        algorithm(tensor, group)
    correct = torch.equal(tensor, expected)
    seconds = []
    for _ in range(repeats):
        dist.barrier(group)
        start = time.perf_counter()
        algorithm(tensor, group)
        seconds.append(time.perf_counter() - start)
    return {"sent": traffic.sent, "received": traffic.received, "seconds": seconds, "correct": correct}


def _compare(numels: Sequence[int], world_sizes: Sequence[int], repeats: int) -> list[dict]:
    rows = []
    for n in world_sizes:
        group = dist.new_group(list(range(n)))  # every rank must call new_group, also those left out
        if dist.get_rank() < n:
            for numel in numels:
                for name in ALGORITHMS:
                    rows.append({"n": n, "numel": numel, "algorithm": name, **_run(name, numel, group, repeats)})
        dist.barrier()
    return rows


@dataclasses.dataclass
class Run:
    """One algorithm on ``n`` ranks and a tensor of ``nbytes``: bytes per rank, by rank, and the time."""

    algorithm: str
    n: int
    nbytes: int
    sent: list[int]
    received: list[int]
    seconds: float  # the slowest rank's time, best of the repeats
    correct: bool


@dataclasses.dataclass
class Comparison:
    runs: list[Run]

    def find(self, algorithm: str, n: int, nbytes: int) -> Run:
        return next(r for r in self.runs if (r.algorithm, r.n, r.nbytes) == (algorithm, n, nbytes))

    @property
    def sizes(self) -> list[int]:
        return sorted({r.nbytes for r in self.runs})

    @property
    def world_sizes(self) -> list[int]:
        return sorted({r.n for r in self.runs})

    def bytes_table(self, nbytes: int) -> str:
        """Bytes sent by each rank, counted, for a tensor of ``nbytes``, in multiples of it too, and their total."""
        lines = [f"tensor of S = {nbytes:,} bytes; bytes each rank sent (counted), and as a multiple of S:"]
        for n in self.world_sizes:
            for algorithm in ("reduce-then-broadcast", "ring"):
                sent = self.find(algorithm, n, nbytes).sent
                shown = ", ".join(f"{b:,} ({b / nbytes:.2f} S)" for b in sent)
                lines.append(f"  {n} ranks, {algorithm:<22} {shown}; total {sum(sent) / nbytes:.2f} S")
        return "\n".join(lines)

    def time_table(self) -> str:
        """The slowest rank's time per call, best of the repeats, in milliseconds: machine-dependent."""
        names = list(ALGORITHMS)
        lines = [f"{'ranks':>5} {'bytes':>11} " + "".join(f"{name:>24}" for name in names) + "   (ms)"]
        for n in self.world_sizes:
            for nbytes in self.sizes:
                times = "".join(f"{self.find(name, n, nbytes).seconds * 1e3:>24.2f}" for name in names)
                lines.append(f"{n:>5} {nbytes:>11,} {times}")
        return "\n".join(lines)


def compare(numels: Sequence[int] = (1_200, 24_000, 480_000), world_sizes: Sequence[int] = (2, 3, 4),
            repeats: int = 2, backend: str | None = None) -> Comparison:
    """Both all-reduces and the backend's own (gloo's on CPUs, ``"gloo"`` in the tables) on float32 tensors of
    ``numels`` values, for each rank count, in one launch; ``backend`` is ``launch``'s choice by default."""
    rows = launch(_compare, max(world_sizes), (list(numels), list(world_sizes), repeats), backend=backend)
    runs = []
    for row in rows[0]:  # rank 0 takes part in every group; the others' rows line up with its rows
        same = [next(o for o in ranks if (o["n"], o["numel"], o["algorithm"]) == (row["n"], row["numel"],
                                                                                  row["algorithm"]))
                for ranks in rows[: row["n"]]]
        slowest = [max(times) for times in zip(*(o["seconds"] for o in same), strict=True)]
        runs.append(Run(row["algorithm"], row["n"], row["numel"] * 4, [o["sent"] for o in same],
                        [o["received"] for o in same], min(slowest), all(o["correct"] for o in same)))
    return Comparison(runs)


def dataparallel_bytes(n: int, batch: int = 8) -> dict[str, int]:
    """Bytes through device 0 in one DataParallel training step of the course model on ``n`` CPU devices.

    Traced by ``dpcourse.trace``: ``replicate`` is what device 0 sent out (a copy of the parameters for each
    replica 1..n-1), ``reduce-add`` what it took in (each of those replicas' gradients, added into replica
    0's). ``parameters`` is the model's size in bytes, the ``S`` of an all-reduce of its gradients.
    """
    devices = choose_devices(n)
    model = examples.make_model().to(devices[0])
    x, y = examples.make_batch(batch, device=devices[0])
    with trace() as traced:
        examples.loss_fn(DataParallel(model, devices)(x), y).backward()
    return {"parameters": sum(p.numel() * p.element_size() for p in model.parameters()),
            **{step: sum(s.bytes_copied for s in traced.steps(step)) for step in ("replicate", "reduce-add")}}
