"""A DataParallel training step recorded once on a real GPU and shipped with the course, so every learner sees one.

Lessons 09 and 10 run on CPU devices. What a GPU does with the same step comes from this recording, made on a
lent data-centre GPU with ``python -m dpcourse.recording --out FILE`` and saved as
``dpcourse/recordings/gpu.json``:

* **traces**: lesson 09's training step (its MLP, batch 256, ``dp(x).pow(2).mean().backward()``) with 2, 3 and 4
  replicas on one GPU, recorded by ``dpcourse.trace``: every span timed by CUDA events on the GPU's stream,
  with the bytes it copied;
* **step times**: the same step, untraced, timed by CUDA events from an idle GPU to the end of its work, on
  1 to 4 replicas (1: the model alone, no DataParallel);
* **calibration**: ``costmodel.measure`` of the cost model's setups on the GPU, from which
  ``costmodel.fit_gpu`` fits the GPU's terms;
* **copy**: the bandwidth of one plain device-to-device copy, the ceiling for replicate's copies.

``load()`` reads it back. Every replica here shares one GPU: the recording shows what DataParallel's own
work costs next to a GPU's arithmetic, not what a link between two GPUs does.
"""

import argparse
import dataclasses
import datetime
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from . import costmodel, examples
from .data_parallel import DataParallel
from .timing import cuda_seconds
from .trace import Trace, trace

PATH = Path(__file__).parent / "recordings" / "gpu.json"
LESSON_MODEL = examples.MLP((256, 512, 256))  # lesson 09's compute-heavy MLP, built with its seed-0 weights
BATCH = 256
REPLICAS = (1, 2, 3, 4)
WARMUP_STEPS, TIMED_STEPS, TRACED_STEPS = 5, 30, 3

# The cost model's setups, timed on the GPU. Small models, whose steps are Python launching kernels, give the
# Python terms; wide ones, whose steps are the GPU's arithmetic, give its FLOP/s and memory bandwidth. The small
# ones span 4 to 32 modules: with two depths only, one noisy size set the per-module cost (seen on an H100).
SMALL, WIDE = ((64, 2), (128, 6), (32, 10), (32, 16)), ((2048, 4), (4096, 3))
SMALL_BATCHES, WIDE_BATCHES = (64, 256, 1024), (1024, 4096, 8192)
DP_REPLICAS = (2, 3, 4)
HELD_OUT = ((512, 4, 1024), (1024, 6, 4096))  # (hidden, depth, batch): measured, not fitted


def calibration_setups() -> list[costmodel.Setup]:
    """What ``costmodel.fit_gpu`` needs: single-device steps, traced and untraced DP steps, and held-out ones."""
    setup = costmodel.Setup.lesson_mlp
    singles = [setup(h, d, 1, b) for sizes, batches in ((SMALL, SMALL_BATCHES), (WIDE, WIDE_BATCHES))
               for h, d in sizes for b in batches]
    dp = [setup(h, d, n, batch, traced) for traced in (True, False)
          for sizes, batch in ((SMALL, 256), (WIDE, 4096)) for h, d in sizes for n in DP_REPLICAS]
    held_out = [setup(h, d, n, b) for h, d, b in HELD_OUT for n in (1, *DP_REPLICAS)]
    return singles + dp + held_out


def _copy_bandwidth(device: torch.device, megabytes: int = 400, repeats: int = 10) -> float:
    """Bytes per second that arrive in one plain copy of a ``megabytes`` buffer within ``device`` (median)."""
    source = torch.randn(megabytes * 2**20 // 4, device=device)
    target = torch.empty_like(source)
    seconds = [cuda_seconds(lambda: target.copy_(source), [device]) for _ in range(repeats + 2)][2:]
    return source.nbytes / statistics.median(seconds)


def _lesson_step(device: torch.device, replicas: int) -> dict[str, Any]:
    model = LESSON_MODEL.build().to(device)
    forward = model if replicas == 1 else DataParallel(model, devices=[device] * replicas)
    x = torch.randn(BATCH, LESSON_MODEL.widths[0], generator=torch.Generator().manual_seed(0)).to(device)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        forward(x).pow(2).mean().backward()

    for _ in range(WARMUP_STEPS):
        step()
    seconds = [cuda_seconds(step, [device]) for _ in range(TIMED_STEPS)]
    traces = []
    for _ in range(TRACED_STEPS if replicas > 1 else 0):
        with trace() as recorded:
            step()
        traces.append(recorded.to_dict())
    return {"replicas": replicas, "step_seconds": seconds, "traces": traces}


def record(device: str = "cuda:0") -> dict[str, Any]:
    """Everything in the recording, measured now on ``device``; a plain dict, ready for ``json.dump``."""
    gpu = torch.device(device)
    setups = calibration_setups()
    measured = costmodel.measure(setups, device=device)
    return {
        "gpu": torch.cuda.get_device_name(gpu),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        "model": {"widths": list(LESSON_MODEL.widths), "batch": BATCH, "step": "dp(x).pow(2).mean().backward()"},
        "lesson_steps": [_lesson_step(gpu, n) for n in REPLICAS],
        "calibration": [{**s.as_row(), "seconds": seconds, "spans": spans}
                        for s, (seconds, spans) in zip(setups, measured, strict=True)],
        "copy_bytes_per_second": _copy_bandwidth(gpu),
    }


@dataclasses.dataclass
class Recording:
    """The shipped recording, read back: ``traces[n]`` and ``step_seconds[n]`` for ``n`` replicas on one GPU."""

    gpu: str
    torch: str
    cuda: str
    date: str
    traces: dict[int, list[Trace]]
    step_seconds: dict[int, list[float]]
    calibration: list[dict[str, Any]]
    copy_bytes_per_second: float

    @property
    def label(self) -> str:
        """What every figure and table made from it says: ``"recorded on <GPU>, <date>"``."""
        return f"recorded on {self.gpu}, {self.date}"

    def step_ms(self, replicas: int) -> float:
        """The median untraced step time with ``replicas`` replicas, in milliseconds."""
        return statistics.median(self.step_seconds[replicas]) * 1e3

    def calibrated(self) -> costmodel.Calibration:
        """The cost model's terms for this GPU, fitted from the recording (``costmodel.fit_gpu``)."""
        return costmodel.fit_gpu(self.calibration, self.copy_bytes_per_second, f"{self.gpu} (calibrated)",
                                 f"fitted by costmodel.fit_gpu from the steps {self.label}; every replica on the one "
                                 f"GPU; ddp_overhead from the one GPU preset")


def load(path: Path = PATH) -> Recording:
    """The recording at ``path`` (by default the one shipped with the course)."""
    data = json.loads(Path(path).read_text())
    steps = {entry["replicas"]: entry for entry in data["lesson_steps"]}
    return Recording(
        data["gpu"], data["torch"], data["cuda"], data["date"],
        {n: [Trace.from_dict(t) for t in entry["traces"]] for n, entry in steps.items() if entry["traces"]},
        {n: entry["step_seconds"] for n, entry in steps.items()},
        data["calibration"], data["copy_bytes_per_second"],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dpcourse.recording", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PATH, help="where to write the recording (JSON)")
    parser.add_argument("--device", default="cuda:0", help="the GPU to record on")
    args = parser.parse_args(argv)
    if torch.device(args.device).type != "cuda" or not torch.cuda.is_available():
        raise SystemExit(f"A recording needs a CUDA GPU; {args.device} is not one here.")
    data = record(args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, separators=(",", ":")))
    for entry in data["lesson_steps"]:
        print(f"{entry['replicas']} replica(s): median step "
              f"{statistics.median(entry['step_seconds']) * 1e3:.3f} ms", flush=True)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes) on {data['gpu']}", flush=True)


if __name__ == "__main__":
    main()
