"""Every figure of the course, written as PNG files: ``python -m dpcourse.viz.gallery out/``.

Each picture is computed from a real run on ``dpcourse.devices(n)`` (CPU devices on a laptop), so the
gallery doubles as a check that the figures still draw after a change to the primitives.
"""

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from matplotlib.figure import Figure
from torch import nn

from dpcourse import examples, memory, recording
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.trace import Trace, trace

from ..ui.png import png_bytes
from .chunks import chunk_split
from .gather import gather_view
from .gradients import gradient_sum, per_replica_mean_bias
from .memory import memory_bars, memory_timeline
from .replicate import replicate_map
from .scaling import measure_scaling, scaling
from .timeline import timeline


def example_trace(n_devices: int = 3, batch: int = 64) -> Trace:
    """A real trace of one training step of the course model under DataParallel on ``n_devices`` devices.

    One step runs first, untraced: the very first one also pays for starting up allocators and threads.
    """
    devices = choose_devices(n_devices)
    model = examples.make_model().to(devices[0])
    data_parallel = DataParallel(model, devices)
    x, _ = examples.make_batch(batch, device=devices[0])
    data_parallel(x).pow(2).mean().backward()
    model.zero_grad()
    with trace() as recorded:
        loss = data_parallel(x).pow(2).mean()
        loss.backward()
    return recorded


def example_replicate_map(devices: list[torch.device]) -> Figure:
    """Lesson 03's map: ``CountingNet`` moved to ``devices[0]`` first, as DataParallel requires, then replicated."""
    return replicate_map(examples.CountingNet().to(devices[0]), devices)


def example_scaling(device_counts: Sequence[int] = (1, 2, 3, 4), steps: int = 5) -> Figure:
    """Scaling of a model big enough for its matrix products to outweigh DataParallel's own overhead."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 256))
        x = torch.randn(512, 256)
    return scaling(measure_scaling(model, x, device_counts, steps))


def recorded_gpu_timeline() -> Figure:
    """The 3-replica step of the shipped GPU recording (``dpcourse.recording``), titled with where and when."""
    gpu = recording.load()
    return timeline(gpu.traces[3][-1], gpu.label)


FIGURES: dict[str, Callable[[], Figure]] = {
    "chunk_split": lambda: chunk_split(10, 4),
    "chunk_split_idle_and_kwargs": lambda: chunk_split(6, 4, kwargs_batches={"mask": 6, "lengths": 2}),
    "replicate_map": lambda: example_replicate_map(choose_devices(3)),
    "gather_view": lambda: gather_view([3, 3, 3, 1]),
    "gather_view_scalars": lambda: gather_view([3, 3, 3, 1], scalars=True),
    "gradient_sum": gradient_sum,
    "per_replica_mean_bias": per_replica_mean_bias,
    "timeline": lambda: timeline(example_trace()),
    "timeline_recorded_on_a_gpu": recorded_gpu_timeline,
    "scaling": example_scaling,
    "memory_bars": lambda: memory_bars([memory.measure(memory.Setup()),
                                        memory.measure(memory.Setup(kind="DataParallel", devices=4))]),
    "memory_timeline": lambda: memory_timeline(memory.profile_step(memory.Setup()),
                                               memory.predict(memory.Setup()).totals[0]),
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dpcourse.viz.gallery", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write the PNG files (created if missing)")
    folder = parser.parse_args(argv).folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, make in FIGURES.items():
        path = folder / f"{name}.png"
        path.write_bytes(png_bytes(make(), pixel_ratio=1))
        print(path)


if __name__ == "__main__":
    main()
