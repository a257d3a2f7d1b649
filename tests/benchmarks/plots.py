"""The CPU scaling figure: step time and speed-up against the number of CPU devices, one PNG per model."""

import statistics
from pathlib import Path

from matplotlib.figure import Figure

from .rounds import QUIET_CORES


def _scaling_figure(measurements: dict[int, list[float]], title: str) -> Figure:
    """``dpcourse.viz.scaling`` when it exists (it is the course's figure); else a plain matplotlib one."""
    try:
        from dpcourse.viz import scaling

        figure = scaling(measurements)
    except ImportError:
        figure = Figure(figsize=(5, 3.5), layout="constrained")
        ax = figure.subplots()
        counts = sorted(measurements)
        ax.plot(counts, [statistics.median(measurements[n]) * 1e3 for n in counts], marker="o")
        ax.set(xticks=counts, xlabel="number of devices (replicas)", ylabel="step time (ms)", ylim=(0, None))
    # The machine goes under the figure's own title, where the layout keeps room for it.
    figure.suptitle(f"{figure.get_suptitle()}\n{title}".strip(), fontsize=9)
    return figure


def scaling_plots(results: dict, folder: Path) -> list[Path]:
    """One PNG per CPU workload: step time against the number of CPU devices (the ``dpN`` samples).

    Only the quiet rounds are drawn when there are at least 10 of them: one round in which another process
    took a core stretches the min-to-max bars tenfold and hides the rest.
    """
    folder.mkdir(parents=True, exist_ok=True)
    m = results["machine"]
    written = []
    for name, workload in results["cpu"].items():
        scaling = workload["scaling"]
        keep = [i for i, cores in enumerate(scaling["others_cores_per_round"]) if cores < QUIET_CORES]
        if len(keep) < 10:
            keep = list(range(len(scaling["others_cores_per_round"])))
        samples = {v: [s[i] for i in keep] for v, s in scaling["samples_s"].items()}
        measurements = {int(v[2:]): s for v, s in samples.items() if v.startswith("dp")}
        single = statistics.median(samples["single"]) * 1e3
        rounds = f"{len(keep)} of {len(scaling['others_cores_per_round'])} rounds (quiet: others < {QUIET_CORES} cores)"
        layers, batch = workload["model"]["layers"], workload["model"]["batch"]
        title = (f"{name}: {len(layers) - 1} Linear layers, batch {batch}; plain single-device step {single:.1f} ms; "
                 f"{rounds}\n{m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['date']}")
        path = folder / f"bench_cpu_{name.replace('-', '_')}.png"
        _scaling_figure(measurements, title).savefig(path, dpi=110)
        written.append(path)
    return written
