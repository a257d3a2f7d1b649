"""trace: which steps are recorded, on which threads, with what sizes; plain data; nothing when off."""

import importlib
import json

import pytest
import torch
from torch import nn

import dpcourse
from dpcourse.trace import Trace


def traced_step(n=3, batch=10):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    dp = dpcourse.DataParallel(model, devices=dpcourse.devices(n))
    with dpcourse.trace() as t:
        dp(torch.randn(batch, 4)).pow(2).mean().backward()
    return t, model


def test_one_training_step_records_every_stage_in_order():
    t, _ = traced_step()
    order = [s.step for s in t.spans if s.step not in ("forward", "backward")]
    assert order == ["scatter", "replicate", "gather", "gather-backward", "reduce-add"]
    assert sorted(s.replica for s in t.steps("forward")) == [0, 1, 2]
    assert sorted(s.replica for s in t.steps("backward")) == [0, 1, 2]
    starts = {s.step: s.start for s in t.spans if s.replica is None}
    assert starts["scatter"] < starts["replicate"] < min(s.start for s in t.steps("forward"))
    assert max(s.end for s in t.steps("forward")) <= starts["gather"] < starts["reduce-add"]
    assert all(s.end >= s.start for s in t.spans)


def test_forwards_run_in_their_own_threads_with_their_chunk_shapes():
    t, _ = traced_step(n=3, batch=10)
    forwards = sorted(t.steps("forward"), key=lambda s: s.replica)
    assert [s.thread for s in forwards] == ["replica-0", "replica-1", "replica-2"]
    assert [s.shapes for s in forwards] == [[[4, 4]], [[4, 4]], [[2, 4]]]
    assert {s.device for s in forwards} == {"cpu"}


def test_bytes_copied_counts_replica_copies_and_gathered_outputs():
    t, model = traced_step(n=3, batch=10)
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert t.steps("replicate")[0].bytes_copied == 2 * param_bytes
    assert t.steps("reduce-add")[0].bytes_copied == 2 * param_bytes
    assert t.steps("gather")[0].bytes_copied == 10 * 2 * 4
    assert t.steps("scatter")[0].bytes_copied == 0  # chunks on the input's device are views


def test_a_trace_is_plain_data():
    t, _ = traced_step()
    data = json.loads(t.to_json())
    assert Trace.from_dict(data) == t
    assert set(data["spans"][0]) == {"step", "start", "end", "thread", "replica", "device", "shapes", "bytes_copied"}


def core_steps():
    """What every core module's names for the four steps refer to now."""
    modules = [importlib.import_module(f"dpcourse.{m}") for m in ("scatter_gather", "replicate", "data_parallel")]
    return [getattr(m, step, None) for m in modules for step in ("scatter", "replicate", "parallel_apply", "gather")]


def test_nothing_is_recorded_outside_a_trace_and_traces_do_not_nest():
    untouched = core_steps()
    with dpcourse.trace():
        assert core_steps() != untouched  # the steps are watched only while a trace is open
        with pytest.raises(RuntimeError, match="already open"):
            with dpcourse.trace():
                pass
    assert core_steps() == untouched and dpcourse.gather is importlib.import_module("dpcourse.scatter_gather").gather
    with dpcourse.trace():  # the closed trace left nothing open behind it
        pass


def test_a_backward_after_the_trace_closed_is_not_recorded():
    dp = dpcourse.DataParallel(nn.Linear(4, 2), devices=dpcourse.devices(2))
    with dpcourse.trace() as t:
        out = dp(torch.randn(6, 4))
    out.sum().backward()
    assert [s.step for s in t.spans if s.replica is None] == ["scatter", "replicate", "gather"]
    assert not t.steps("backward")


def test_standalone_steps_and_scatter_backward_are_recorded():
    x = torch.randn(6, 3, requires_grad=True)
    with dpcourse.trace() as t:
        chunks = dpcourse.scatter(x, dpcourse.devices(3))
        dpcourse.gather(list(chunks), "cpu").sum().backward()
        dpcourse.replicate(nn.Linear(3, 3), dpcourse.devices(2))
    assert [s.step for s in t.spans] == ["scatter", "gather", "gather-backward", "scatter-backward", "replicate"]
    assert t.steps("scatter-backward")[0].shapes == [[2, 3]] * 3
    assert t.steps("replicate")[0].bytes_copied == (9 + 3) * 4


def test_duration_is_first_start_to_last_end():
    t, _ = traced_step()
    assert t.start == min(s.start for s in t.spans) and t.end == max(s.end for s in t.spans)
    assert t.duration == t.end - t.start > 0
    assert Trace().duration == 0.0


def test_each_step_gets_its_own_backward_spans():
    model = nn.Linear(4, 2)
    dp = dpcourse.DataParallel(model, devices=dpcourse.devices(2))
    with dpcourse.trace() as t:
        for _ in range(3):
            dp(torch.randn(6, 4)).sum().backward()
    backward, reduce = t.steps("backward"), t.steps("reduce-add")
    assert len(backward) == 6 and len(reduce) == 3
    for step in range(3):  # every step's backward spans end before the next step's reduce-add
        assert all(s.end <= reduce[step].end for s in sorted(backward, key=lambda s: s.start)[2 * step : 2 * step + 2])
