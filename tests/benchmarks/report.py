"""What the benchmark prints and writes: the machine it ran on, plain-text tables, the targets, JSON."""

import datetime
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

OPENMP_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else whatever ``platform`` knows."""
    with_cpuinfo = Path("/proc/cpuinfo")
    if with_cpuinfo.exists():
        for line in with_cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The facts a number needs next to it to mean anything: CPU, cores, threads, GPUs, versions, date."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = [torch.cuda.get_device_name(i) for i in range(count)]
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # How idle OpenMP threads wait (spin or sleep) changes CPU-device results: see docs/benchmarks.md.
        "openmp_env": {k: os.environ[k] for k in OPENMP_VARIABLES if k in os.environ},
        "gpus": gpus,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.date.today().isoformat(),
    }


def table(title: str, rows: Sequence[dict], columns: Sequence[str]) -> str:
    """A fixed-width text table; floats get two decimals, missing cells a dash."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    if not cells:
        return f"{title}\n(nothing measured)"
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _target(name: str, goal: str, measured: float | None, met: bool | None, note: str = "") -> dict:
    status = "not measured" if met is None else "met" if met else "missed"
    return {"target": name, "goal": goal, "measured": measured, "status": status, "note": note}


def _cpu_ratio(mlp: dict | None) -> tuple[float | None, str]:
    """dp2 / single for the MLP: over the quiet rounds when there are 10 or more, else over all rounds."""
    if mlp is None:
        return None, ""
    scaling = mlp["scaling"]
    if scaling["quiet_rounds"] >= 10:
        return scaling["quiet"]["vs_single"]["dp2"]["median"], f"over {scaling['quiet_rounds']} quiet rounds"
    return scaling["vs_single"]["dp2"]["median"], f"over all rounds (only {scaling['quiet_rounds']} quiet)"


def targets(results: dict) -> list[dict]:
    """Where each of the issue's targets stands, from whatever parts of the benchmark ran."""
    found = []
    ratio, note = _cpu_ratio(results.get("cpu", {}).get("mlp"))
    found.append(_target("CPU: DP step on 2 devices / single-device step (MLP)", "<= 1.3", ratio,
                         None if ratio is None else ratio <= 1.3, note))
    gpu = results.get("gpu", {})
    versus = {case: v["vs_torch"]["dpcourse"]["median"] for case, v in gpu.get("versus_torch", {}).items()}
    worst = max(versus.values(), default=None)
    found.append(_target("GPU: dpcourse / torch.nn.DataParallel step (worst case)", "<= 1.05", worst,
                         None if worst is None else worst <= 1.05, gpu.get("skipped", "")))
    small = max((r for case, r in versus.items() if case.startswith("small-layers")), default=None)
    found.append(_target("GPU: same, 200-small-layer model (worst case)", "<= 1.00", small,
                         None if small is None else small <= 1.0, gpu.get("skipped", "")))
    share = gpu.get("replicate", {}).get("share_of_ceiling")
    found.append(_target("GPU: replicate bandwidth / device-to-device copy", ">= 0.70", share,
                         None if share is None else share >= 0.7, gpu.get("skipped", "")))
    course = results.get("course", {})
    total = course.get("notebooks", {}).get("total_s")
    found.append(_target("Course: all notebooks under nbval (s)", "<= 60", total,
                         None if total is None else total <= 60, course.get("notebooks", {}).get("note", "")))
    slowest = course.get("experiments", {}).get("slowest_s")
    found.append(_target("Course: slowest quiz experiment (s)", "<= 0.3", slowest,
                         None if slowest is None else slowest <= 0.3, course.get("experiments", {}).get("note", "")))
    widgets = course.get("widgets", {})
    median, worst_ms = widgets.get("slowest_median_ms"), widgets.get("worst_ms")
    found.append(_target("Widgets: median of the slowest control (ms)", "<= 100", median,
                         None if median is None else median <= 100, widgets.get("note", "")))
    found.append(_target("Widgets: worst interaction (ms)", "<= 500", worst_ms,
                         None if worst_ms is None else worst_ms <= 500, widgets.get("note", "")))
    return found


def write_json(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")


def _step_rows(label: dict, measured: dict, ratio_key: str) -> list[dict]:
    """One row per variant: all-round quartiles, the paired ratio, and the same over the quiet rounds."""
    quiet = measured.get("quiet", {})
    rows = []
    for name, s in measured["steps"].items():
        ratio, quiet_ratio = measured[ratio_key].get(name), quiet.get(ratio_key, {}).get(name)
        rows.append({**label, "variant": name, "median": s["median_ms"], "q1": s["q1_ms"], "q3": s["q3_ms"],
                     "min": s["min_ms"], "max": s["max_ms"], "ratio": ratio and ratio["median"],
                     "ratio q1-q3": ratio and f"{ratio['q1']:.2f}-{ratio['q3']:.2f}",
                     "quiet median": quiet.get("steps", {}).get(name, {}).get("median_ms"),
                     "quiet ratio": quiet_ratio and quiet_ratio["median"]})
    return rows


def _load(measured: dict) -> str:
    others = measured["others_cores"]
    return (f"other processes used {others['median']:.2f} cores (median; max {others['max']:.2f}); "
            f"{measured['quiet_rounds']} of {measured['steps'][next(iter(measured['steps']))]['n']} rounds quiet")


STEP_COLUMNS = ("variant", "median", "q1", "q3", "min", "max", "ratio", "ratio q1-q3", "quiet median", "quiet ratio")


def cpu_tables(cpu: dict) -> list[str]:
    scaling, parts, tracing, load = [], [], [], []
    for name, w in cpu.items():
        scaling += _step_rows({"model": name}, w["scaling"], "vs_single")
        parts += [{"model": name, "devices": n, **b} for n, b in w["breakdown"].items()]
        tracing += _step_rows({"model": name}, w["tracing"], "vs_off")
        load += [f"  {name}: scaling: {_load(w['scaling'])}; tracing: {_load(w['tracing'])}"]
    part_columns = ("model", "devices", "total", "scatter", "replicate", "forward", "gather", "gather-backward",
                    "backward", "reduce-add", "wake", "stagger", "other")
    return [
        table("CPU: training step (ms), interleaved; ratio = median over rounds of (variant / single)",
              scaling, ("model", *STEP_COLUMNS)),
        table("CPU: where a traced step goes (median ms; forward/backward span all replicas)", parts, part_columns),
        table("CPU: tracing off / on, 2 devices (ms); ratio = variant / off",
              tracing, ("model", *STEP_COLUMNS)),
        "Quiet rounds: other processes used under 0.25 cores on average\n" + "\n".join(load),
    ]


def gpu_tables(gpu: dict) -> list[str]:
    if "skipped" in gpu:
        return [f"GPU: skipped ({gpu['skipped']})"]
    versus = [row for case, v in gpu["versus_torch"].items() for row in _step_rows({"case": case}, v, "vs_torch")]
    tracing = [row for name, v in gpu["tracing"].items() for row in _step_rows({"model": name}, v, "vs_off")]
    rep = gpu["replicate"]
    copies = [{"variant": name, "median": s["median_ms"], "GB/s": rep["gb_per_s"][name]}
              for name, s in rep["steps"].items()]
    title = (f"GPU: replicate {rep['parameters'] / 1e6:.1f}M parameters onto {rep['devices']} "
             f"({rep['share_of_ceiling']:.0%} of the copy ceiling) {rep['note']}")
    ddp = [{"model": name, "ranks": d["ranks"], "backend": d["backend"], "median": d["steps"]["median_ms"],
            "q1": d["steps"]["q1_ms"], "q3": d["steps"]["q3_ms"], "/ dpcourse [0, 0]": d["vs_dp_0_0"]["dpcourse"],
            "/ torch [0, 0]": d["vs_dp_0_0"]["torch"]} for name, d in gpu.get("ddp", {}).items()]
    return [
        table("GPU: training step (ms, CUDA events); ratio = variant / torch.nn.DataParallel",
              versus, ("case", *STEP_COLUMNS)),
        table("GPU: DDP, ranks sharing cuda:0 (ms, slowest rank per step); ratios of medians to DataParallel [0, 0]",
              ddp, ("model", "ranks", "backend", "median", "q1", "q3", "/ dpcourse [0, 0]", "/ torch [0, 0]")),
        table(title, copies, ("variant", "median", "GB/s")),
        table("GPU: tracing off / on (ms); ratio = variant / off",
              tracing, ("model", *STEP_COLUMNS)),
    ]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def course_tables(course: dict) -> list[str]:
    notebooks, widgets = course["notebooks"], course["widgets"]
    load = f"other processes used {notebooks['others_cores']:.2f} and {widgets['others_cores']:.2f} cores meanwhile"
    return [
        table(f"Course: notebooks under nbval, total {_number(notebooks['total_s'])} s ({notebooks['note']})",
              notebooks["notebooks"], ("name", "seconds", "cells", "failed")),
        table(f"Widgets (ms per interaction): slowest control's median {_number(widgets['slowest_median_ms'])}, "
              f"worst {_number(widgets['worst_ms'])}. {widgets['note']}",
              widgets["controls"], ("explorer", "control", "n", "median_ms", "worst_ms")),
        f"Course: {load}",
    ]


def print_report(results: dict) -> None:
    sections = {"cpu": cpu_tables, "gpu": gpu_tables, "course": course_tables}
    m = results["machine"]
    print(f"\n{m['cpu']} ({m['cores']} cores, {m['torch_threads']} torch threads), GPUs: {m['gpus'] or 'none'}, "
          f"torch {m['torch']}, {m['date']}, OpenMP settings: {m['openmp_env'] or 'defaults'}")
    for name, tables in sections.items():
        if name in results:
            for text in tables(results[name]):
                print("\n" + text)
    print("\n" + table("Targets", results["targets"], ("target", "goal", "measured", "status", "note")))
