"""The benchmark runs end to end and writes what docs/benchmarks.md is made from. No timing is asserted.

`python -m tests.benchmarks --quick` runs in a subprocess, as CI would; the parts that this machine cannot
reach through it (widget explorers that do not exist yet, the GPU copies) are driven directly on CPU.
"""

import json
import subprocess
import sys
from pathlib import Path

import ipywidgets as w
import torch

from dpcourse import timing
from dpcourse.examples.model import MLP
from dpcourse.models_to_time import ModelToTime
from tests.benchmarks import course, gpu
from tests.benchmarks.rounds import watched

ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_writes_every_section_and_the_plots(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks", "--quick", "--json", str(out), "--plots", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Targets" in done.stdout
    results = json.loads(out.read_text())
    assert {"machine", "cpu", "gpu", "course", "targets"} <= set(results)
    assert {"cpu", "cores", "torch", "gpus", "date"} <= set(results["machine"])
    for name in ("mlp", "small-layers"):
        measured = results["cpu"][name]
        assert set(measured["scaling"]["steps"]) == {"single", "dp1", "dp2"}
        assert measured["scaling"]["vs_single"]["dp2"]["median"] > 0
        assert {"scatter", "replicate", "forward", "backward", "reduce-add"} <= set(measured["breakdown"]["2"])
        assert set(measured["tracing"]["steps"]) == {"off", "on"}
    assert ("skipped" in results["gpu"]) != torch.cuda.is_available()
    assert {"notebooks", "widgets"} <= set(results["course"])
    assert all(t["status"] in ("met", "missed", "not measured") for t in results["targets"])
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["bench_cpu_mlp.png", "bench_cpu_small_layers.png"]


def test_interleaving_rotates_the_order_and_drops_the_warmup():
    calls = []

    def variant(name):
        return lambda: calls.append(name) or 0.001

    measured = watched({"a": variant("a"), "b": variant("b"), "c": variant("c")}, rounds=3, warmup=1)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert {name: len(s) for name, s in measured.samples.items()} == {"a": 3, "b": 3, "c": 3}
    assert len(measured.others) == 3
    assert measured.report("a", "vs_a")["vs_a"]["b"]["median"] == 1.0


class FakeExplorer:
    """Stands in for a dpcourse.widgets explorer: public controls, each observed."""

    def __init__(self):
        self.changes = []
        self.devices = w.IntSlider(value=2, min=1, max=8)
        self.scale = w.FloatSlider(value=0.5, min=0.0, max=1.0)
        self.batch = w.IntRangeSlider(value=(2, 4), min=1, max=9)
        self.step = w.Dropdown(options=["scatter", "replicate", "gather"])
        self.trace = w.Checkbox(value=False)
        self.run = w.Button(description="run")
        self.note = w.Text()  # free text: nothing sensible to set
        self.title = w.Label("passive")
        self.output = w.Output()
        for control in (self.devices, self.scale, self.batch, self.step, self.trace):
            control.observe(lambda change: self.changes.append(change["new"]), names="value")
        self.run.on_click(lambda _: self.changes.append("click"))


def test_widget_latency_operates_every_control_and_restores_it():
    explorer = FakeExplorer()
    timed = course.interactions(explorer, count=3)
    assert {name: len(s) for name, s in timed.items()} == {
        "devices": 3, "scale": 3, "batch": 2, "step": 3, "trace": 2, "run": 3, "note": 0
    }
    assert explorer.changes.count("click") == 3
    assert (explorer.devices.value, explorer.step.value, explorer.trace.value) == (2, "scatter", False)

    result = course.widget_latency({"FakeExplorer": FakeExplorer}, count=2)
    assert [row["control"] for row in result["controls"]] == ["devices", "scale", "batch", "step", "trace", "run"]
    assert 0 < result["slowest_median_ms"] <= result["worst_ms"]


def test_the_course_part_copes_with_no_notebooks_and_no_widgets(tmp_path):
    assert course.notebook_times(tmp_path, run=True)["notebooks"] == []
    (tmp_path / "01_x.ipynb").write_text("{}")
    assert course.notebook_times(tmp_path, run=False)["notebooks"] == [{"name": "01_x.ipynb"}]
    found = course.explorers()
    assert isinstance(found, str) or all(issubclass(c, w.Widget) for c in found.values())
    assert course.widget_latency({"FakeExplorer": FakeExplorer}, run=False)["controls"] == []


def test_the_replicate_bandwidth_measurement_runs_on_cpu_devices():
    result = gpu.replicate_bandwidth([torch.device("cpu")] * 2, layers=2, width=32, rounds=2, warmup=1,
                                     timer=timing.wall_time)
    assert result["bytes_copied"] == 2 * (32 * 32 + 32) * 4
    assert set(result["gb_per_s"]) == {"copy coalesced", "copy per tensor", "dpcourse.replicate"}
    assert result["share_of_ceiling"] > 0


def test_the_ddp_measurement_runs_two_gloo_ranks_on_cpu():
    result = gpu.ddp_on_one_gpu(ModelToTime("tiny", MLP((8, 16, 4))), batch=8, rounds=3, warmup=1, device="cpu")
    assert result["ranks"] == 2 and result["devices"] == ["cpu", "cpu"]
    assert result["steps"]["n"] == 3 and result["steps"]["median_ms"] > 0
