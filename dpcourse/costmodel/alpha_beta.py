"""The α-β model of a collective, its fit to measured times, and what it predicts for DDP and ZeRO-3 steps.

Pure arithmetic: nothing here starts a rank (``ranks.collective_times`` measures, ``ddp.overlap`` times a DDP step).

**The form.** A ring collective on ``p`` ranks over a tensor of ``n`` bytes (the whole tensor: what is all-reduced,
the output of an all-gather, the input of a reduce-scatter) takes ``s`` steps, and in all of them together each rank
sends ``f * n`` bytes (``ring_terms``)::

    t = s * alpha + f * n / beta         all-reduce: s = 2 (p - 1), f = 2 (p - 1) / p
                                         all-gather, reduce-scatter: s = p - 1, f = (p - 1) / p

``alpha`` is the seconds of one step's message whatever its size (latency), ``beta`` the bytes per second of one
link (bandwidth). It is the cost model's own form: lesson 09's DDP term is ``2 (N-1)/N * S/beta + 2 (N-1) k *
alpha`` (``costmodel.model.FORMULAS``), so ``hardware`` puts a fit into a ``Hardware`` unchanged.

**The fit.** ``fit_alpha_beta`` is least squares on *relative* errors: each measured point's row ``[s, f * n]`` and
its time are divided by the time, so a 4 KiB message counts as much as a 16 MiB one. Plain least squares on
seconds would let the largest sizes decide alone, and alpha, a few tens of microseconds, would come out as noise.

**A step.** A backward of ``layers`` layers, each ``backward`` seconds of compute and ``layer_bytes`` of gradients,
one bucket per layer: each bucket's collective starts when its layer is done and the previous collective is over
(one after another, as DDP's do). With every layer alike the whole backward takes (``exposed``)::

    layers * backward + m + (layers - 1) * max(0, m - backward)      m: one layer's communication

the last bucket's communication always shows (nothing is left to compute beside it); every other shows only by
what it exceeds a layer's compute. The Ultra-Scale Playbook's appendix A3 ("Math for compute/communication
overlap", https://huggingface.co/spaces/nanotron/ultrascale-playbook) states the same condition as t_comm /
t_compute <= 1, per bucket for DP and per layer for ZeRO-3. ZeRO-3 communicates more (``step_terms``): an
all-gather before each layer's forward, and an all-gather and a reduce-scatter around each layer's backward,
3 (p - 1) / p of the bytes where DDP's all-reduce has 2 (p - 1) / p.

A teaching model: equal layers, collectives that never share a link, compute that does not slow communication
down (a GPU's kernels, not a CPU whose cores also copy the messages).
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .model import Hardware

# How many times a ring goes round: an all-reduce is a reduce-scatter then an all-gather.
RING_ROUNDS = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}
KINDS = ("DDP", "ZeRO-3")


def ring_terms(collective: str, world_size: int) -> tuple[int, float]:
    """``(steps, factor)`` of a ring ``collective`` on ``world_size`` ranks: its time is ``steps * alpha +
    factor * n / beta`` for a tensor of ``n`` bytes (``2 (p - 1)`` and ``2 (p - 1) / p`` for an all-reduce)."""
    if collective not in RING_ROUNDS:
        raise ValueError(f"collective must be one of {list(RING_ROUNDS)}, not {collective!r}.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size is a number of ranks, a whole number >= 1; got {world_size!r}.")
    rounds = RING_ROUNDS[collective]
    return rounds * (world_size - 1), rounds * (world_size - 1) / world_size


def collective_time(collective: str, world_size: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Seconds of a ring ``collective`` of ``n_bytes`` on ``world_size`` ranks, by the α-β model."""
    steps, factor = ring_terms(collective, world_size)
    return steps * alpha + factor * n_bytes / beta


def _checked_points(sizes: Sequence[float], times: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    sizes, times = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    if sizes.shape != times.shape or sizes.ndim != 1:
        raise ValueError(f"sizes and times are two lists of one number per measurement, of one length; got "
                         f"{sizes.shape} and {times.shape}.")
    if len(set(sizes.tolist())) < 2:
        raise ValueError("Two unknowns, alpha and beta, need measurements at two sizes at least; got "
                         f"{sorted(set(sizes.tolist()))}.")
    if not (np.isfinite(times).all() and (times > 0).all() and (sizes > 0).all()):
        raise ValueError("Every size (bytes) and time (seconds) must be a finite number > 0.")
    return sizes, times


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float], steps: float, factor: float
                   ) -> tuple[float, float]:
    """``(alpha, beta)`` of ``t = steps * alpha + factor * n / beta`` fitted to one collective's measurements
    (``sizes`` in bytes, ``times`` in seconds), least squares on relative errors (the module's docstring)."""
    sizes, times = _checked_points(sizes, times)
    rows = np.stack([np.full_like(sizes, steps), factor * sizes], axis=1) / times[:, None]
    per_step, per_byte = np.linalg.lstsq(rows, np.ones_like(times), rcond=None)[0]
    if per_byte <= 0:
        raise ValueError("These times do not grow with the size: no bandwidth fits them. Measure larger sizes "
                         "(megabytes), whose time the bytes decide.")
    return float(per_step), float(1 / per_byte)


@dataclasses.dataclass(frozen=True)
class Fit:
    """One collective's fitted ``alpha`` (s per step) and ``beta`` (bytes/s), and how well they explain the
    measured ``points`` (``(bytes, seconds)``): ``r_squared`` on the times, ``worst`` relative error."""

    collective: str
    world_size: int
    alpha: float
    beta: float
    points: tuple[tuple[float, float], ...]

    def predict(self, n_bytes: float, world_size: int | None = None) -> float:
        return collective_time(self.collective, world_size or self.world_size, n_bytes, self.alpha, self.beta)

    @property
    def r_squared(self) -> float:
        measured = np.array([t for _, t in self.points])
        predicted = np.array([self.predict(n) for n, _ in self.points])
        return float(1 - ((measured - predicted) ** 2).sum() / ((measured - measured.mean()) ** 2).sum())

    @property
    def worst(self) -> float:
        return max(abs(self.predict(n) / t - 1) for n, t in self.points)


def fit(collective: str, world_size: int, sizes: Sequence[float], times: Sequence[float]) -> Fit:
    """``fit_alpha_beta`` with ``collective``'s ring terms on ``world_size`` ranks, kept with its points."""
    steps, factor = ring_terms(collective, world_size)
    alpha, beta = fit_alpha_beta(sizes, times, steps, factor)
    return Fit(collective, world_size, alpha, beta, tuple(zip(map(float, sizes), map(float, times), strict=True)))


def exposed(communication: float, compute: float, layers: int) -> float:
    """Seconds of communication a chain of ``layers`` equal layers does not hide: the last one's whole, the
    others' by what they exceed a layer's compute (the module's docstring); none if there is none."""
    if not communication:
        return 0.0
    return communication + (layers - 1) * max(0.0, communication - compute)


def step_terms(kind: str, world_size: int, layers: int, layer_bytes: float, forward: float, backward: float,
                 alpha: float, beta: float) -> dict[str, float]:
    """One training step of ``kind`` ("DDP" or "ZeRO-3") on ``world_size`` ranks, term by term, in seconds.

    ``forward``, ``backward``: one layer's compute on one rank; ``layer_bytes``: one layer's parameters (and
    gradients). DDP: ``compute`` and the all-reduces' ``exposed`` part, one bucket per layer. ZeRO-3: also an
    all-gather before each layer's forward (``forward_exposed``, hidden behind the previous layer's forward),
    and an all-gather and a reduce-scatter per layer in the backward.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, not {kind!r}.")
    compute = layers * (forward + backward)
    if world_size == 1:
        return {"compute": compute, "forward_exposed": 0.0, "backward_exposed": 0.0}
    layer = layer_communication(kind, world_size, layer_bytes, alpha, beta)
    return {"compute": compute, "forward_exposed": exposed(layer["forward"], forward, layers),
            "backward_exposed": exposed(layer["backward"], backward, layers)}


def layer_communication(kind: str, world_size: int, layer_bytes: float, alpha: float, beta: float
                        ) -> dict[str, float]:
    """One layer's communication in each pass: what must hide behind that pass's compute of one layer."""
    if kind == "DDP":
        return {"forward": 0.0, "backward": collective_time("all_reduce", world_size, layer_bytes, alpha, beta)}
    gather = collective_time("all_gather", world_size, layer_bytes, alpha, beta)
    return {"forward": gather, "backward": gather + collective_time("reduce_scatter", world_size, layer_bytes,
                                                                     alpha, beta)}


def ranks_where_comm_stops_hiding(kind: str, layer_bytes: float, forward: float, backward: float, alpha: float,
                                  beta: float, most: int = 4096) -> int | None:
    """The fewest ranks at which one layer's communication takes longer than its compute in either pass (t_comm /
    t_compute > 1), each rank keeping its own batch: its compute per layer is the same at any rank count, while
    a ring's ``2 (p - 1)`` steps of latency grow with it. ``None`` if it still hides on ``most`` ranks."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, not {kind!r}.")
    for world_size in range(2, most + 1):
        layer = layer_communication(kind, world_size, layer_bytes, alpha, beta)
        if layer["forward"] > forward or layer["backward"] > backward:
            return world_size
    return None


def hardware(base: Hardware, fitted: Fit, name: str = "") -> Hardware:
    """``base`` with the fitted ``alpha`` and ``beta`` as its ``latency`` and ``bandwidth``: lesson 09's cost model
    (``costmodel.step_time``) then charges DDP's all-reduce exactly ``collective_time`` of the fit."""
    return dataclasses.replace(base, latency=fitted.alpha, bandwidth=fitted.beta,
                               name=name or f"{base.name}, α and β fitted to {fitted.collective} on this machine",
                               sources=f"{base.sources}; alpha and beta: fitted by costmodel.alpha_beta.fit to "
                                       f"{fitted.collective} measured on {fitted.world_size} ranks")


def per_mib(beta: float) -> float:
    """Seconds to move one MiB at ``beta`` bytes/s: how the lesson prints a bandwidth (a time, which varies)."""
    return 2**20 / beta if math.isfinite(beta) else 0.0
