"""DDP in practice (lesson 17), on real ranks: samplers, checkpoints, uneven inputs, unused parameters, BatchNorm,
and the DataParallel script converted to DDP, each against its oracle (torch's own sampler, one device)."""

import multiprocessing
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DistributedSampler

from dpcourse.ddp.demos import batchnorm, checkpoint, sampling, uneven, unused
from dpcourse.ddp.implementations import syncbn
from dpcourse.ranks.torchrun import torchrun
from dpcourse.scripts import train_ddp, train_dp
from tests.torchrun_runs import run_torchrun


@pytest.fixture(scope="module")
def coverage() -> sampling.Coverage:
    return sampling.coverage(samples=12, epochs=3)


def test_each_rank_trains_on_what_its_loader_gives_it(coverage):
    for setup in sampling.SETUPS:
        offline = [sampling.rank_orders(setup, 12, 3, rank=r, world=2) for r in range(2)]
        assert coverage.orders[setup] == offline


def test_without_a_sampler_every_rank_trains_on_everything_in_the_same_order(coverage):
    orders = coverage.orders["no sampler"]
    assert all(coverage.times_trained("no sampler", epoch) == [2] * 12 for epoch in range(3))
    assert orders[0] == orders[1]


def test_a_seed_per_rank_repeats_some_samples_and_misses_others(coverage):
    for epoch in range(3):
        trained = coverage.times_trained("a seed per rank", epoch)
        assert sum(trained) == 12 and trained.count(0) == sum(n == 2 for n in trained) > 0


def test_without_set_epoch_every_epoch_repeats_the_first(coverage):
    assert coverage.repeats_epoch_0("no set_epoch")
    expected = [list(DistributedSampler(range(12), num_replicas=2, rank=r, seed=0)) for r in range(2)]
    assert [rank[2] for rank in coverage.orders["no set_epoch"]] == expected


def test_with_set_epoch_every_sample_once_per_epoch_in_a_new_order(coverage):
    assert not coverage.repeats_epoch_0("set_epoch")
    for epoch in range(3):
        assert coverage.times_trained("set_epoch", epoch) == [1] * 12
        for rank in range(2):
            sampler = DistributedSampler(range(12), num_replicas=2, rank=rank, seed=0)
            sampler.set_epoch(epoch)
            assert coverage.orders["set_epoch"][rank][epoch] == list(sampler)


def test_an_unknown_setup_is_named():
    with pytest.raises(ValueError, match="setup must be one of"):
        sampling.rank_orders("shuffle", 12, 1, rank=0, world=2)


def test_checkpoints_without_and_with_the_barrier():
    result = checkpoint.checkpoints(world_size=2, steps=2)
    assert result.read_steps("without_barrier") == [2, 0]  # rank 1 read the previous checkpoint
    stale = result.diff_to_rank0("without_barrier")
    assert stale[0] == 0 and stale[1] > 1e-3
    assert result.diff_to_rank0("without_barrier", "after_one_more_step")[1] > 1e-3  # DDP never re-syncs weights
    assert result.read_steps("with_barrier") == [2, 2]
    for rank in result.ranks:
        torch.testing.assert_close(rank["with_barrier"]["weights"], rank["trained"], rtol=0, atol=0)
    assert result.ranks[0]["saved_on"] == ["cpu"] and [r["loaded_on"] for r in result.ranks] == ["cpu", "cpu"]
    assert len({r["every_rank_file"]["sha256"] for r in result.ranks}) == 1


@pytest.fixture(scope="module")
def uneven_run() -> uneven.Uneven:
    return uneven.uneven(batches=(3, 2), timeout=1.0)


def test_without_join_the_rank_with_more_batches_times_out(uneven_run):
    assert uneven_run.steps("no join") == [2, 2]
    assert uneven_run.waited_for_timeout("no join") == [True, False]
    assert "Timed out" in uneven_run.errors("no join")[0]
    assert multiprocessing.active_children() == []


def test_with_join_every_rank_finishes_and_the_zeros_count_by_default(uneven_run):
    for mode in ("join", "join, divide by ranks left"):
        assert uneven_run.steps(mode) == [3, 2] and uneven_run.errors(mode) == [None, None]
    assert uneven_run.last_step_scale("join") == pytest.approx(0.5, abs=1e-5)
    assert uneven_run.last_step_scale("join, divide by ranks left") == pytest.approx(1.0, abs=1e-5)


def test_uneven_needs_a_batch_count_per_rank():
    with pytest.raises(ValueError, match="each rank's number of batches"):
        uneven.uneven(batches=(3,))


def test_an_unused_parameter_stops_ddp_and_the_two_fixes_work():
    result = unused.unused(timing_steps=2)
    for rank, record in enumerate(result.ranks):
        assert record["error"].startswith("Expected to have finished reduction in the prior iteration")
        assert f"did not receive grad for rank {rank}: 4 5" in record["error"]  # spare.weight, spare.bias
        assert record["found_error"] is None and record["static_error"] is None
        assert record["spare_grad"] is None
        torch.testing.assert_close(record["head_grad"], result.ranks[0]["head_grad"], rtol=0, atol=0)
    assert result.warning.startswith("find_unused_parameters=True was specified in DDP constructor")
    assert result.overhead() > 0


@pytest.mark.parametrize("sizes", [[4, 4], [6, 2], [3, 5, 8], [1, 7]])
def test_combined_statistics_equal_those_of_the_whole_batch(sizes):
    generator = torch.Generator().manual_seed(len(sizes))
    shards = [torch.randn(n, 3, generator=generator) * (r + 1) + r for r, n in enumerate(sizes)]
    mean, variance, count = syncbn.combine_stats(
        torch.stack([s.mean(0) for s in shards]), torch.stack([s.var(0, unbiased=False) for s in shards]),
        torch.tensor(sizes, dtype=torch.float32)[:, None])
    everything = torch.cat(shards)
    torch.testing.assert_close(mean, everything.mean(0))
    torch.testing.assert_close(variance, everything.var(0, unbiased=False))
    assert count.item() == sum(sizes)


def test_without_a_process_group_sync_batchnorm1d_is_batchnorm1d():
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    ours, theirs = syncbn.SyncBatchNorm1d(4), nn.BatchNorm1d(4)
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours.running_var, theirs.running_var)


def test_global_variance_of_two_shards_on_real_ranks():
    assert batchnorm.global_variance([[-1, 1], [1, 3]]) == {"mean": 1.0, "variance": 2.0, "count": 4.0}


def test_sync_batchnorm1d_under_ddp_matches_one_device_and_per_replica_does_not():
    result = batchnorm.batchnorm(world_size=2, batch=16)
    for what in ("running_mean", "running_var", "output", "weights"):
        assert max(result.diff("SyncBatchNorm1d", what)) < 1e-5, what
        assert min(result.diff("per-replica BatchNorm1d", what)) > 1e-3, what
    refused = result.ranks[0]["torch SyncBatchNorm"]
    assert refused.startswith("ValueError: SyncBatchNorm expected input tensor to be on GPU")


@pytest.mark.cuda
def test_sync_batchnorm1d_matches_torchs_sync_batchnorm_on_gpus():
    for rank in batchnorm.against_torch(world_size=2, batch=16):
        for what in ("output", "running_mean", "running_var"):
            torch.testing.assert_close(rank["dpcourse"][what], rank["torch"][what], rtol=1e-5, atol=1e-5)


def _losses(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith("epoch")]


def test_the_ddp_script_under_torchrun_reaches_the_dataparallel_scripts_weights(tmp_path, capsys):
    train_dp.main(["--devices", "2", "--out", str(tmp_path / "dp.pt")])
    dp_printed = capsys.readouterr().out
    saved = tmp_path / "ddp.pt"
    ran = run_torchrun("dpcourse.scripts.train_ddp", ["--out", str(saved)],
                       finished=lambda out: "max |w_DDP - w_one_device|" in out and saved.exists())
    assert ran.returncode == 0, f"stdout:\n{ran.stdout}\nstderr:\n{ran.stderr}"
    # rank 0 says where the ranks run (here: CPU devices, so the CPU and gloo), then prints the average of every
    # rank's loss, then trains on one device for its check: both the same numbers as the DataParallel script's
    assert ran.stdout.splitlines()[0] == "2 ranks, backend gloo, rank 0 on cpu"
    assert _losses(ran.stdout) == 2 * _losses(dp_printed) and len(_losses(dp_printed)) == 2
    assert float(ran.stdout.split("max |w_DDP - w_one_device| over all weights: ")[1].split()[0]) <= 1e-6
    dp, ddp = (torch.load(path, map_location="cpu") for path in (tmp_path / "dp.pt", saved))
    assert list(dp) == list(ddp)
    for name in dp:
        torch.testing.assert_close(ddp[name], dp[name], rtol=0, atol=1e-6)


def test_the_ddp_script_started_without_torchrun_runs_torchrun_itself(monkeypatch, capsys):
    calls = []

    def torchrun_here(module, args, nproc, timeout):
        calls.append((module, args, nproc))
        return subprocess.CompletedProcess([], 1, "what rank 0 printed\n", "")

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(train_ddp, "torchrun", torchrun_here)
    assert train_ddp.main(["--nproc", "3", "--epochs", "1", "--out", "w.pt"]) == 1  # the ranks' exit status
    assert calls == [("dpcourse.scripts.train_ddp", ["--epochs", "1", "--out", "w.pt"], 3)]
    assert capsys.readouterr().out == "what rank 0 printed\n"


def _ours(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``: the ones this test started, however deep below it."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table from /proc (Linux)")
def test_torchrun_past_its_deadline_leaves_no_process_behind(tmp_path):
    marker = f"dpcourse-deadline-{uuid.uuid4().hex}"
    with pytest.raises(TimeoutError, match="still running after 2 s"):
        torchrun("dpcourse.scripts.train_ddp", ["--out", str(tmp_path / marker)], nproc=2, timeout=2)
    assert _ours(marker) == []

