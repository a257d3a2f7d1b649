"""The GPU recording that ships with the course: complete, consistent with the lesson model, and well fitted.

It was made on a lent GPU (``python -m dpcourse.recording``); these tests read it on any machine.
"""

import pytest
import torch

from dpcourse import recording
from dpcourse.trace import STEPS


@pytest.fixture(scope="module")
def gpu() -> recording.Recording:
    return recording.load()


def test_it_says_where_and_when_it_was_recorded(gpu):
    assert gpu.label == f"recorded on {gpu.gpu}, {gpu.date}"
    assert "NVIDIA" in gpu.gpu and gpu.torch and gpu.cuda
    assert gpu.copy_bytes_per_second > 1e11  # a GPU's memory, not a CPU's


def test_every_replica_count_has_its_step_times_and_traced_steps(gpu):
    assert sorted(gpu.step_seconds) == list(recording.REPLICAS)
    assert all(len(seconds) == recording.TIMED_STEPS for seconds in gpu.step_seconds.values())
    assert sorted(gpu.traces) == [n for n in recording.REPLICAS if n > 1]
    for n, traces in gpu.traces.items():
        assert len(traces) == recording.TRACED_STEPS
        for trace in traces:
            assert {s.step for s in trace.spans} == set(STEPS) - {"scatter-backward"}  # the input needs no grad
            assert len(trace.steps("forward")) == len(trace.steps("backward")) == n
            assert {s.device for s in trace.spans if s.device} == {"cuda:0"}
            assert all(0 <= s.start <= s.end for s in trace.spans)


def test_the_bytes_are_the_lesson_models(gpu):
    parameter_bytes = recording.LESSON_MODEL.parameters * 4
    output_bytes = recording.BATCH * recording.LESSON_MODEL.widths[-1] * 4
    for n, traces in gpu.traces.items():
        for trace in traces:
            (replicate,), (reduce_add,), (gather,) = (trace.steps(s) for s in ("replicate", "reduce-add", "gather"))
            assert replicate.bytes_copied == reduce_add.bytes_copied == (n - 1) * parameter_bytes
            assert gather.bytes_copied == output_bytes
            assert sum(s.bytes_copied for s in trace.steps("scatter")) == 0  # chunks of a cuda:0 input are views


def test_the_backward_ran_on_the_autograd_engines_gpu_thread_not_the_main_thread(gpu):
    for trace in gpu.traces[3]:
        threads = {s.thread for s in trace.spans if s.step in ("gather-backward", "backward", "reduce-add")}
        assert len(threads) == 1 and "MainThread" not in threads


def test_the_fitted_cost_model_predicts_the_held_out_sizes_within_25_percent(gpu):
    calibration = gpu.calibrated()
    held_out = [r for r in calibration.table if r["used"] == "held out"]
    assert len(held_out) == len(recording.HELD_OUT) * (1 + len(recording.DP_REPLICAS))
    assert all(abs(r["predicted"] / r["measured"] - 1) <= 0.25 for r in calibration.table)
    hardware = calibration.hardware
    assert hardware.asynchronous and hardware.compute_units == 1
    assert hardware.bandwidth == gpu.copy_bytes_per_second
    assert gpu.label in hardware.sources


def test_the_recording_holds_every_setup_the_fit_needs(gpu):
    assert [(r["hidden"], r["depth"], r["devices"], r["batch"], r["traced"]) for r in gpu.calibration] == [
        (s.hidden, s.depth, s.devices, s.batch, s.traced) for s in recording.calibration_setups()]


def test_recording_without_a_gpu_says_it_needs_one(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        recording.main(["--out", str(tmp_path / "gpu.json")])
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.cuda
def test_a_new_recording_on_this_gpu_loads_back(monkeypatch, tmp_path):
    # small sizes and few steps: this checks the recorder, not the numbers
    monkeypatch.setattr(recording, "SMALL", ((8, 3),))
    monkeypatch.setattr(recording, "WIDE", ((64, 2),))
    monkeypatch.setattr(recording, "SMALL_BATCHES", (8,))
    monkeypatch.setattr(recording, "WIDE_BATCHES", (16,))
    monkeypatch.setattr(recording, "HELD_OUT", ((16, 2, 8),))
    monkeypatch.setattr(recording, "TIMED_STEPS", 3)
    recording.main(["--out", str(tmp_path / "gpu.json")])
    loaded = recording.load(tmp_path / "gpu.json")
    assert loaded.gpu == torch.cuda.get_device_name(0)
    assert sorted(loaded.traces) == [2, 3, 4] and sorted(loaded.step_seconds) == [1, 2, 3, 4]
    assert all(s.device == "cuda:0" for trace in loaded.traces[2] for s in trace.spans if s.device)
