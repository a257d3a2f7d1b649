"""Speed-up over one device for n = 1, 2, ... devices, and where DataParallel stops paying off."""

import dataclasses

from .model import Hardware, Workload, step_time
from .presets import EXAMPLE, PRESETS


@dataclasses.dataclass
class Speedup:
    """Speed-up ``T_1 / T(n)`` over one device for every n, and where DataParallel stops paying off."""

    hardware: Hardware
    workload: Workload
    devices: list[int]
    dp: list[float]
    ddp: list[float]

    @property
    def dp_best(self) -> int:
        """The number of devices at which DP is fastest: beyond it, every added device makes DP slower."""
        return self.devices[self.dp.index(max(self.dp))]

    @property
    def dp_slower_than_one_device(self) -> int | None:
        """The smallest n >= 2 at which DP is slower than one device (``None`` if it never is)."""
        return next((n for n, s in zip(self.devices, self.dp, strict=True) if n > 1 and s < 1), None)


def predict_speedup(preset: str | Hardware, workload: Workload = EXAMPLE, max_devices: int = 8) -> Speedup:
    """DP's and DDP's speed-up for n = 1..``max_devices``; the batch is global, n devices share it."""
    if isinstance(preset, str) and preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; choose one of {sorted(PRESETS)} or pass a Hardware.")
    if isinstance(max_devices, bool) or not isinstance(max_devices, int) or max_devices < 1:
        raise ValueError(f"max_devices must be a whole number >= 1 (curves run 1..max_devices), not {max_devices!r}.")
    hardware = PRESETS[preset] if isinstance(preset, str) else preset
    n_values = list(range(1, max_devices + 1))
    single = sum(step_time("one device", 1, workload, hardware).values())
    if single == 0:
        raise ValueError(f"{hardware.name!r} takes 0 s per step on one device (infinite rates, no overheads), so "
                         "there is no speed-up to compare; give it a finite rate or an overhead.")
    speedups = {kind: [single / sum(step_time(kind, n, workload, hardware).values()) for n in n_values]
                for kind in ("DataParallel", "DDP")}
    return Speedup(hardware, workload, n_values, speedups["DataParallel"], speedups["DDP"])


