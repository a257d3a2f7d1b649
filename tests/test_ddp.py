"""dpcourse.ddp: real DistributedDataParallel in 2 processes on the CPU (gloo), against single-device training.

The first launch starts the forkserver (a few seconds: it imports torch); later launches take well under a second.
"""

import multiprocessing
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from dpcourse import ddp
from dpcourse.trace import Trace
from tests.torchrun_runs import TEARDOWN_ABORT, crashed_after_finishing


def assert_all_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert multiprocessing.active_children() == []


def test_gradients_are_averaged_and_equal_the_full_batch_gradient_for_equal_shards():
    g = ddp.gradients(world_size=2, batch=8)
    assert g.shards == [[0, 2, 4, 6], [1, 3, 5, 7]]  # DistributedSampler(shuffle=False): interleaved
    for synced in g.synced:  # every rank holds the same averaged gradient
        torch.testing.assert_close(synced, g.mean_of_local, rtol=0, atol=1e-7)
    torch.testing.assert_close(g.synced[0], g.full_batch, rtol=0, atol=1e-6)
    torch.testing.assert_close(g.sum_of_local, 2 * g.full_batch, rtol=0, atol=1e-6)  # a sum would double it
    assert (g.local[0] - g.local[1]).abs().max() > 0.05  # the ranks' own gradients really differ


def test_unequal_shards_average_to_something_else_than_the_full_batch_gradient():
    g = ddp.gradients(world_size=2, batch=8, sizes=[5, 3])
    assert g.shards == [[0, 1, 2, 3, 4], [5, 6, 7]]
    torch.testing.assert_close(g.synced[1], g.mean_of_local, rtol=0, atol=1e-7)
    assert (g.synced[0] - g.full_batch).abs().max() > 0.01
    # The full batch weighs each shard by its size; DDP weighs each rank equally.
    torch.testing.assert_close(g.full_batch, (5 * g.local[0] + 3 * g.local[1]) / 8, rtol=0, atol=1e-6)
    torch.testing.assert_close(g.size_weighted_mean, g.full_batch, rtol=0, atol=1e-6)
    assert "DDP = full batch:" in str(g)


def test_weights_after_k_steps_equal_single_device_training_and_the_model_is_copied_once():
    t = ddp.train(world_size=2, steps=3, batch=16, lr=0.1)
    assert (t.ranks[1]["before_wrap"] - t.ranks[0]["before_wrap"]).abs().max() > 0.1  # seeds 0 and 1
    for rank in t.ranks:
        assert torch.equal(rank["after_wrap"], t.ranks[0]["before_wrap"])  # rank 0's weights, broadcast
        assert rank["same_storage"]
    assert all(diff < 1e-6 for diff in t.max_diff_to_single_device())
    assert t.matches_single_device()
    assert (t.single_device[-1] - t.ranks[0]["before_wrap"]).abs().max() > 1e-3  # training did move them


def test_buffers_come_from_rank_0_at_construction_and_at_every_forward():
    b = ddp.buffers(world_size=2, sync_buffers=True)
    rank0, rank1 = b.ranks
    assert rank1["before"][0] == 1 and torch.equal(rank1["after_wrap"], rank0["before"])
    assert not torch.allclose(rank0["after"][0], rank1["after"][0])  # each rank updated from its own shard
    torch.testing.assert_close(rank1["at_start"][1], rank0["after"][0], rtol=0, atol=0)  # rank 0's, broadcast
    assert not torch.allclose(rank0["after"][1], rank1["after"][1])


def test_without_forward_sync_each_rank_keeps_its_own_running_statistics():
    rank0, rank1 = ddp.buffers(world_size=2, sync_buffers=False).ranks
    assert torch.equal(rank1["after_wrap"], rank0["before"])  # construction still broadcasts
    torch.testing.assert_close(rank1["at_start"][1], rank1["after"][0], rtol=0, atol=0)
    assert not torch.allclose(rank1["at_start"][1], rank0["after"][0])


def test_bucketed_all_reduce_reimplementation_gives_ddp_gradients():
    check = ddp.check_buckets(world_size=2, batch=8, bucket_bytes=300)
    assert check.buckets == [["2.bias"], ["0.bias", "2.weight"], ["0.weight"]]
    assert check.still_to_come == [3, 1, 0]  # the first two all-reduces started while backward was running
    assert check.max_diff < 1e-7
    assert not torch.equal(check.ddp[0], torch.zeros_like(check.ddp[0]))


def test_trace_ddp_steps_has_one_row_per_rank_and_all_reduces_inside_backward():
    trace = ddp.trace_ddp_steps(world_size=2, steps=3)
    assert Trace.from_dict(trace.to_dict()) == trace
    for rank in (0, 1):
        spans = [s for s in trace.spans if s.replica == rank]
        assert {s.thread for s in spans} == {f"rank-{rank}"} and {s.device for s in spans} == {"cpu"}
        count = {step: sum(s.step == step for s in spans) for step in ("replicate", "forward", "backward", "allreduce")}
        assert count == {"replicate": 1, "forward": 3, "backward": 3, "allreduce": 1 + 3 + 3}  # buckets rebuilt
        backwards = [s for s in spans if s.step == "backward"]
        for reduce in (s for s in spans if s.step == "allreduce"):
            assert any(b.start <= reduce.start <= b.end for b in backwards)
    dp_trace = ddp.trace_dp_steps(n=2, steps=3)
    assert len(dp_trace.steps("replicate")) == 3  # DataParallel replicates on every step


def test_the_in_process_parts_run_where_devices_0_stands_in_for_a_gpu(stand_in_gpu):
    # DataParallel's timeline puts its model on devices[0]; the single-device references compare on the
    # ranks' device, so a GPU machine runs them too.
    dp_trace = ddp.trace_dp_steps(n=2, steps=1, batch=8, hidden=16, depth=2)
    assert {s.step for s in dp_trace.spans} >= {"scatter", "replicate", "forward", "gather", "reduce-add"}
    assert ddp.train(world_size=2, steps=1, batch=8).matches_single_device()
    unequal = ddp.gradients(world_size=2, batch=8, sizes=[5, 3])
    assert "DDP = full batch:" in str(unequal)
    torch.testing.assert_close(unequal.size_weighted_mean, unequal.full_batch, rtol=0, atol=1e-6)


def test_a_raising_worker_names_its_rank_and_traceback_and_leaves_no_process():
    with pytest.raises(ddp.RankError) as info:
        ddp.crash("raise", rank=1)
    message = str(info.value)
    assert info.value.rank == 1
    assert message.startswith("rank 1 (pid")
    assert "Traceback (most recent call last)" in message and "ValueError: rank 1 failed on purpose" in message
    assert_all_gone(info.value.pids)


def test_a_killed_worker_gives_a_clear_error_and_no_orphans():
    with pytest.raises(ddp.RankError, match=r"rank 0 \(pid \d+\) was killed by SIGKILL") as info:
        ddp.crash("kill", rank=0, timeout=30)
    assert info.value.rank == 0
    assert_all_gone(info.value.pids)


def test_a_hanging_worker_hits_the_deadline_instead_of_hanging():
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] were still running after 2 s"):
        ddp.crash("hang", rank=1, timeout=2)
    assert multiprocessing.active_children() == []


def _nested_worker():
    def worker() -> int:
        return 0

    return worker


def _notebook_worker(monkeypatch):
    """A function as a notebook cell defines it: found in ``__main__``, which has no file a rank could import."""
    worker = _nested_worker()
    worker.__module__, worker.__qualname__ = "__main__", "worker"
    main = types.ModuleType("__main__")
    main.worker = worker
    monkeypatch.setitem(sys.modules, "__main__", main)
    return worker


@pytest.mark.parametrize("kind", ["lambda", "nested", "notebook"])
def test_a_worker_that_is_not_importable_is_refused_before_any_process_starts(kind, monkeypatch):
    makers = {"lambda": lambda: lambda: 0, "nested": _nested_worker, "notebook": lambda: _notebook_worker(monkeypatch)}
    with pytest.raises(TypeError, match=r"cannot be sent to the ranks .* A rank imports the function it runs"):
        ddp.launch(makers[kind](), world_size=2)
    assert multiprocessing.active_children() == []


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")
def test_when_the_launching_process_dies_its_ranks_exit_too():
    launcher = subprocess.Popen([sys.executable, "-c", "from dpcourse import ddp; ddp.crash('hang', timeout=600)"])
    deadline = time.monotonic() + 60
    while len(started := descendants(launcher.pid)) < 4:  # resource tracker, forkserver, 2 ranks
        assert time.monotonic() < deadline and launcher.poll() is None, started
        time.sleep(0.2)
    launcher.kill()  # as when a notebook kernel is killed: no clean-up code runs
    launcher.wait()
    deadline = time.monotonic() + 15
    while alive := [pid for pid in started if Path(f"/proc/{pid}").exists()]:
        assert time.monotonic() < deadline, f"processes left behind: {alive}"
        time.sleep(0.2)


def test_a_torchrun_run_is_repeated_only_for_an_abort_after_its_work_was_done():
    finished = lambda out: "done" in out  # noqa: E731
    abort = f"...\n{TEARDOWN_ABORT}\n"
    assert crashed_after_finishing(subprocess.CompletedProcess([], -6, "done", abort), finished)
    assert not crashed_after_finishing(subprocess.CompletedProcess([], -6, "half", abort), finished)
    assert not crashed_after_finishing(subprocess.CompletedProcess([], 1, "done", "Traceback ..."), finished)
    assert not crashed_after_finishing(subprocess.CompletedProcess([], 0, "done", ""), finished)
