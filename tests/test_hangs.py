"""Lesson 22's library: the stable part of torch's error messages, the divergence oracle and its generated records,
the stacks and stderr a rank keeps, the figure, and one real run of the three faults on 2 gloo ranks."""

import os
import sys
import threading
import time

import pytest
import torch.distributed as dist

from dpcourse.faults import hang_diagnosis, hang_runs, hang_tools, hangs
from dpcourse.viz.hangs import collective_lanes
from tests.figure_checks import problems

pytestmark = pytest.mark.lesson22

A, B = ("all_reduce", (4,)), ("broadcast", (4,))
MISMATCH = ("Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint("
            "SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
            "dtype=float (default), device=cpu)), but Rank 1 is running collective: CollectiveFingerPrint("
            "SequenceNumber=1, OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float, ...)")


@pytest.mark.parametrize(("message", "phrase"), [
    ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 2000ms "
     "for recv operation to complete", "Timed out waiting 2000ms for recv operation to complete"),
    ("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:56229. "
     "This is typically caused by a remote worker crashing.", "Connection closed by peer"),
    (MISMATCH, "Detected mismatch between collectives on ranks (rank 0: #1 ALLREDUCE [4]; rank 1: #1 BROADCAST [4])"),
    ("[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 2000 ms", "[Rank 0]: Ranks 1 failed to pass "
     "monitoredBarrier in 2000 ms"),
    ("", ""),
])
def test_key_phrase_keeps_what_is_the_same_on_every_run(message, phrase):
    assert hang_tools.key_phrase(message) == phrase


def test_log_lines_keep_gloo_s_reasons_without_times():
    text = ("[rank0]:[E1206 23:00:54.366 ProcessGroupGloo.cpp:2901] [Rank 0]: Rank 1 failed to pass monitoredBarrier "
            "in 2000 ms\nterminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  "
            "[enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. "
            "Received data size doesn't match expected size.")
    assert hang_runs.log_lines(text) == ["Rank 1 failed to pass monitoredBarrier in 2000 ms",
                                         "Received data size doesn't match expected size"]


@pytest.mark.parametrize(("records", "expected"), [
    ([[A, A, A], [A, A]], (2, [1])),
    ([[A, A], [A, B]], (1, [1])),
    ([[A, B], [A, B]], None),
    ([[A, A], [A, B], [A, A], [A, B]], (1, [1, 3])),
    ([[A, A, B], [A, A], [A, A]], (2, [0])),
    ([[B], [A], [A]], (0, [0])),
    ([[], []], None),
])
def test_first_divergence(records, expected):
    assert hang_diagnosis.first_divergence(records) == expected


@pytest.mark.parametrize("fault", ["skip", "other_op", "other_size", "stop"])
def test_every_planted_fault_diverges_at_or_after_the_planted_call(fault):
    for seed in range(40):
        records, answer = hang_diagnosis.planted(seed, fault)
        assert answer is not None, (seed, records)
        lengths = {len(record) for record in records}
        if fault in ("other_op", "other_size"):
            assert lengths == {len(records[0])}  # only ops or shapes differ: a length check cannot find it
        if fault == "other_size":
            assert len({tuple(op for op, _ in record) for record in records}) == 1  # only shapes differ


def test_planted_refuses_an_unknown_fault():
    with pytest.raises(ValueError, match="skip, other_op, other_size, stop"):
        hang_diagnosis.planted(0, "late")


def test_debug_level_is_restored_and_refuses_a_bad_level(monkeypatch):
    monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG", raising=False)
    with hang_tools.debug_level("DETAIL"):
        assert dist.get_debug_level() == dist.DebugLevel.DETAIL
    assert dist.get_debug_level() == dist.DebugLevel.OFF and "TORCH_DISTRIBUTED_DEBUG" not in os.environ
    with pytest.raises(ValueError, match="OFF, INFO or DETAIL"):
        with hang_tools.debug_level("detail"):
            pass


def test_stacks_name_the_line_a_blocked_thread_waits_on():
    release = threading.Event()
    waiter = threading.Thread(target=release.wait, name="waiter")
    with hang_tools.stacks(0.2) as dumped:
        waiter.start()
        time.sleep(0.6)
        release.set()
        waiter.join()
    assert any(frame.startswith("threading.py:wait:") for frame in dumped[waiter.ident])
    with hang_tools.stacks(None) as nothing:
        pass
    assert nothing == {}


def test_stderr_to_catches_what_c_code_writes_to_descriptor_2(tmp_path):
    path = tmp_path / "rank.log"
    with hang_tools.stderr_to(str(path)):
        os.write(2, b"from C: Received data size doesn't match expected size\n")
    print("back on the real stderr", file=sys.stderr)
    assert "Received data size" in path.read_text()


def test_the_figure_is_readable_and_marks_the_divergence():
    figure = collective_lanes([[A, A, A], [A, A]], "skip", ["timed out at step 2", "finished, no error"])
    assert problems(figure) == []
    texts = [text.get_text() for text in figure.findobj(lambda artist: hasattr(artist, "get_text"))]
    assert "nothing" in texts
    assert problems(collective_lanes([[A, B, A], [A, A, A], [A]], "three ranks")) == []
    assert problems(collective_lanes([[A], [A]], "no divergence")) == []


def test_observe_refuses_an_unknown_fault():
    with pytest.raises(ValueError, match="unknown fault"):
        hangs.observe(("late",), (), "/nonexistent")


def test_the_three_faults_on_real_ranks():
    run = hang_runs.run(("skip", "other_op"), detail=("other_size",), stacks_after=1.0)
    skip = [outcomes["skip"] for outcomes in run.outcomes]
    assert (skip[0]["failed_step"], skip[0]["waited"], skip[1]["error"]) == (2, True, None)
    assert skip[0]["sums"][1][0] == 13 and skip[0]["record"] == [A, A, A] and skip[1]["record"] == [A, A]
    assert any("hangs.py:train_steps: dist.all_reduce" in frame for frame in skip[0]["stack"])
    other = [outcomes["other_op"] for outcomes in run.outcomes]
    assert [o["failed_step"] for o in other] == [1, 1] and other[1]["record"] == [A, B]
    assert (other[0]["error"], other[1]["error"]) == ("Timed out waiting 2000ms for recv operation to complete",
                                                      "Connection closed by peer")
    assert any("dist.broadcast" in frame for frame in other[1]["stack"])
    detail = run.outcomes[1][hangs.key("other_size", True)]
    assert detail["error"] == ("Detected mismatch between collectives on ranks (rank 1: #1 ALLREDUCE [5]; "
                               "rank 0: #1 ALLREDUCE [4])") and not detail["waited"]
    assert "skip:" not in hang_runs.table(run, "skip") and "finished its 3 steps" in hang_runs.table(run, "skip")


def test_every_experiment_measures_its_keyed_answer():
    from dpcourse.quiz import load_lesson, run_experiment

    for question in load_lesson("22_hangs"):
        assert run_experiment(question.experiment).value == question.answer, question.id
