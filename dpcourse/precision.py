"""Mixed precision on the CPU: autocast is per thread, what float16 loses that GradScaler saves, GradScaler's loop.

    computed_dtypes(model[0], lambda: in_plain_thread(model, x))   # [("plain-thread", torch.float32)]
    print(gradient_underflow())                                    # float16 gradients flushed to zero, and saved
    steps = scaler_steps()                                         # GradScaler skipping steps on overflow

CPU autocast computes in bfloat16 by default, float16 when asked (``torch.autocast("cpu", dtype=torch.float16)``);
``torch.amp.GradScaler("cpu")`` works as on a GPU. The threads' dtypes run on the CPU, on a GPU machine too:
``torch.autocast("cpu")`` casts CPU tensors only, so a replica on ``cuda:0`` would compute in float32; their
DataParallel gets explicit CPU devices. ``scaler_steps`` trains on ``dpcourse.devices(n)``, with autocast and
``GradScaler`` of ``devices[0]``'s type: the CPU's on CPU devices, CUDA's on a GPU.
"""

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from . import examples
from .data_parallel import DataParallel
from .devices import devices as devices_for

# The devices of ``thread_dtypes``' DataParallel: the CPU, whatever the machine has (see the docstring).
CPU = torch.device("cpu")


def computed_dtypes(module: nn.Module, run: Callable[[], Any]) -> list[tuple[str, torch.dtype]]:
    """Call ``run()``; return, for each call of ``module`` during it, the calling thread's name and the output dtype.

    A forward hook records them. DataParallel's replicas share their original's hooks, so every replica's
    call is seen, each from its own thread. Threads finish in any order: the calls are sorted by thread name.
    """
    seen: list[tuple[str, torch.dtype]] = []
    hook = module.register_forward_hook(lambda _, args, out: seen.append((threading.current_thread().name, out.dtype)))
    try:
        run()
    finally:
        hook.remove()
    return sorted(seen, key=lambda call: call[0])


def _in_thread(name: str, work: Callable[[], Any]) -> Any:
    """Run ``work()`` in a new thread called ``name``; return its result, or raise its exception here."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except Exception as error:  # re-raised in the caller, as DataParallel re-raises a replica's
            outcome["error"] = error

    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def in_plain_thread(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a new ``threading.Thread`` and nothing more: it starts with autocast off."""
    return _in_thread("plain-thread", lambda: function(*args))


def in_torch_style_worker(function: Callable[..., Any], *args: Any, device_type: str = "cpu") -> Any:
    """``function(*args)`` in a new thread set up as torch's ``parallel_apply`` sets up its workers.

    ``_worker`` in ``torch/nn/parallel/parallel_apply.py`` re-enters
    ``torch.amp.autocast(device_type, enabled=autocast_enabled)``: the caller's *enabled flag*, no dtype. The
    worker thread then computes in its own default autocast dtype. torch reads the flag with
    ``torch.is_autocast_enabled()``, which reports CUDA's autocast; for the CPU this reads the CPU's.
    """
    enabled = torch.is_autocast_enabled(device_type)

    def work() -> Any:
        with torch.amp.autocast(device_type, enabled=enabled):
            return function(*args)

    return _in_thread("torch-style-worker", work)


# Four ways to run the course model's forward under the caller's autocast; each returns the output.
WAYS: dict[str, Callable[[nn.Module, torch.Tensor], Any]] = {
    "main thread": lambda model, x: model(x),
    "plain threading.Thread": in_plain_thread,
    "dpcourse.DataParallel, 2 CPU devices": lambda model, x: DataParallel(model, devices=[CPU, CPU])(x),
    "torch's worker, re-enacted": in_torch_style_worker,
}


def thread_dtypes(dtype: torch.dtype = torch.bfloat16) -> dict[str, list[tuple[str, torch.dtype]]]:
    """For each of ``WAYS``, inside ``torch.autocast("cpu", dtype=dtype)``: the thread and the output dtype of
    every call of the first Linear layer. Each way gets an autocast block of its own (see ``shared_cast_cache``)."""
    model, (x, _) = examples.make_model(), examples.make_batch(8)
    found = {}
    for way, run in WAYS.items():
        with torch.autocast("cpu", dtype=dtype):
            found[way] = computed_dtypes(model[0], lambda run=run: run(model, x))
    return found


def shared_cast_cache() -> str:
    """What happens when the main thread runs the model in float16 and then a torch-style worker in bfloat16.

    Autocast caches the low-precision copy of each weight while the outermost ``autocast`` block lasts, in one
    map for the whole process keyed by the weight alone (``aten/src/ATen/autocast_mode.cpp``:
    ``get_cached_casts``), while the autocast dtype is per thread. The worker finds the float16 copy.
    """
    model, (x, _) = examples.make_model(), examples.make_batch(8)
    with torch.autocast("cpu", dtype=torch.float16):
        model(x)
        try:
            return f"worker computed in {in_torch_style_worker(model, x).dtype}"
        except RuntimeError as error:
            return f"{type(error).__name__}: {error}"


def _flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _gradient(multiplier: float, dtype: torch.dtype | None, scale: float, batch: int) -> torch.Tensor:
    """The course model's gradient of ``loss * multiplier``, under autocast to ``dtype`` (None: float32)."""
    model = examples.make_model()
    x, y = examples.make_batch(batch)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = examples.loss_fn(model(x), y) * multiplier
    (loss * scale).backward()
    return _flat_grad(model) / scale


@dataclasses.dataclass
class Underflow:
    """Gradients computed in float16 or bfloat16, against float32: the share flushed to zero, the largest error."""

    rows: list[dict]

    def __str__(self) -> str:
        lines = [f"{'loss x':>7}  {'autocast to':<24} {'entries lost (0)':>16} {'max |error| / max |g|':>22}"]
        for row in self.rows:
            lines.append(f"{row['multiplier']:>7.0e}  {row['how']:<24} {row['lost']:>16.1%} "
                         f"{row['relative_error']:>22.1e}")
        return "\n".join(lines)


def gradient_underflow(multipliers: Sequence[float] = (1.0, 1e-4, 1e-6), batch: int = 64) -> Underflow:
    """The course model's gradient under CPU autocast, for its loss multiplied by each of ``multipliers``.

    Small multipliers stand in for small gradients. Three ways: float16; float16 with the loss multiplied by
    GradScaler's default scale, 2**16, and the gradients divided by it afterwards; bfloat16. Each is compared
    with float32: the share of gradient entries that became exactly 0, and the largest error relative to the
    largest gradient entry.
    """
    ways = {"float16": (torch.float16, 1.0), "float16, scaled by 2**16": (torch.float16, 2.0**16),
            "bfloat16": (torch.bfloat16, 1.0)}
    rows = []
    for multiplier in multipliers:
        exact = _gradient(multiplier, None, 1.0, batch)
        for how, (dtype, scale) in ways.items():
            got = _gradient(multiplier, dtype, scale, batch)
            errors = gradient_errors(exact, got)
            rows.append({"multiplier": multiplier, "how": how, "lost": errors["lost"],
                         "relative_error": errors["relative_error"]})
    return Underflow(rows)


def gradient_errors(exact: torch.Tensor, got: torch.Tensor) -> dict:
    """How far a low-precision gradient ``got`` is from ``exact``: largest and relative error (NaN as soon as one entry
    is not finite), the share of entries that became 0, and how many are inf or NaN."""
    error = (got - exact).abs().max().item() if torch.isfinite(got).all() else float("nan")
    return {
        "max_abs_error": error,
        "relative_error": error / exact.abs().max().item(),
        "lost": ((got == 0) & (exact != 0)).float().mean().item(),
        "not_finite": int((~torch.isfinite(got)).sum()),
    }


class PlainSGD:
    """What ``GradScaler`` and a training loop need of an optimizer: ``param_groups``, ``zero_grad()``, ``step()``.

    ``examples.sgd_step`` does the update (a test checks it against ``torch.optim.SGD``): the first torch
    optimizer a process builds imports ``torch._dynamo``, which a lesson cannot spare the time for.
    """

    def __init__(self, model: nn.Module, lr: float) -> None:
        self.model, self.lr = model, lr
        self.param_groups = [{"params": list(model.parameters())}]

    def zero_grad(self) -> None:
        self.model.zero_grad()

    def step(self) -> None:
        examples.sgd_step(self.model, self.lr)


@dataclasses.dataclass
class ScalerStep:
    """One training step with GradScaler: the scale it used, whether the unscaled gradients had an inf or a NaN,
    whether the optimizer changed the weights, and the scale ``update()`` set for the next step."""

    scale: float
    found_inf: bool
    stepped: bool
    next_scale: float


def scaler_steps(
    steps: int = 12, init_scale: float = 2.0**24, growth_interval: int = 3, lr: float = 0.1, n_devices: int = 1
) -> list[ScalerStep]:
    """Train the course model under float16 autocast with ``torch.amp.GradScaler``; record every step.

    ``init_scale`` is set too high on purpose: the scaled gradients overflow float16, the scaler skips those
    steps and halves the scale (``backoff_factor=0.5``) until they fit; after ``growth_interval`` steps in a
    row without an inf it doubles the scale again (``growth_factor=2``). With ``n_devices`` > 1 the forward
    runs through ``DataParallel``; the scaler and the optimizer see the original model's parameters either way.
    The optimizer is ``PlainSGD``: ``GradScaler`` treats it as any torch optimizer. It runs on
    ``dpcourse.devices(n_devices)``; autocast and the scaler take ``devices[0]``'s type (``"cpu"`` or ``"cuda"``).
    """
    devices = devices_for(n_devices)
    kind = devices[0].type  # torch.autocast and GradScaler work per device type: where the model is
    model = examples.make_model().to(devices[0])
    runner = model if n_devices == 1 else DataParallel(model, devices=devices)
    optimizer = PlainSGD(model, lr)
    scaler = torch.amp.GradScaler(kind, init_scale=init_scale, growth_interval=growth_interval)
    x, y = examples.make_batch(64, device=devices[0])
    history = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(kind, dtype=torch.float16):
            loss = examples.loss_fn(runner(x), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()  # the loss times the scale: every gradient is scaled too
        scaler.unscale_(optimizer)  # divides the gradients by the scale and looks for inf and NaN
        found_inf = not all(torch.isfinite(p.grad).all() for p in model.parameters())
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)  # skipped if unscale_ found an inf or a NaN
        stepped = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
        scaler.update()
        history.append(ScalerStep(scale, found_inf, stepped, scaler.get_scale()))
    return history
