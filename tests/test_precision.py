"""Mixed precision (dpcourse.precision, dpcourse.ddp.demos.compression) on the CPU, against float32 and against torch.

The compression tests start 2 gloo ranks once for the whole module.
"""

import pytest
import torch

from dpcourse import precision
from dpcourse.ddp.demos import compression as ddp_compression
from dpcourse.examples import single_device


def test_autocast_is_per_thread_and_dpcourse_passes_flag_and_dtype_to_every_replica():
    for dtype in (torch.bfloat16, torch.float16):
        found = precision.thread_dtypes(dtype)
        assert found["main thread"] == [("MainThread", dtype)]
        assert found["plain threading.Thread"] == [("plain-thread", torch.float32)]  # a new thread: autocast off
        assert found["dpcourse.DataParallel, 2 CPU devices"] == [("replica-0", dtype), ("replica-1", dtype)]
        # torch's _worker passes the flag only: the thread's default CPU dtype, whatever the caller asked for
        assert found["torch's worker, re-enacted"] == [("torch-style-worker", torch.bfloat16)]


def test_a_thread_with_another_dtype_meets_the_cast_cache_of_the_main_thread():
    assert precision.shared_cast_cache().startswith("RuntimeError: mat1 and mat2 must have the same dtype")


def test_a_worker_thread_re_raises_its_exception_in_the_caller():
    def fails(x):
        raise ValueError(f"bad {x}")

    with pytest.raises(ValueError, match="bad 3"):
        precision.in_plain_thread(fails, 3)


def test_float16_flushes_small_gradients_to_zero_unless_scaled_and_bfloat16_keeps_them():
    rows = {(row["multiplier"], row["how"]): row for row in precision.gradient_underflow().rows}
    assert rows[(1e-6, "float16")]["lost"] == 1.0
    assert rows[(1e-6, "float16, scaled by 2**16")]["lost"] == 0.0
    assert rows[(1e-6, "bfloat16")]["lost"] == 0.0
    for multiplier in (1.0, 1e-4, 1e-6):
        scaled, bf16 = rows[(multiplier, "float16, scaled by 2**16")], rows[(multiplier, "bfloat16")]
        assert scaled["relative_error"] < 1e-3 < bf16["relative_error"] < 1e-2  # finer fraction, coarser bf16


def test_grad_scaler_skips_every_overflowing_step_halves_the_scale_and_grows_after_good_steps():
    steps = precision.scaler_steps(steps=12, init_scale=2.0**24, growth_interval=3)
    assert all(step.found_inf != step.stepped for step in steps)  # skipped exactly when an inf or NaN was found
    assert [step.stepped for step in steps[:5]] == [False] * 5
    for step in steps:
        factor = 0.5 if step.found_inf else step.next_scale / step.scale
        assert step.next_scale == step.scale * factor and factor in (0.5, 1.0, 2.0)
    grown = [i for i, step in enumerate(steps) if step.next_scale == 2 * step.scale]
    assert grown and all([s.stepped for s in steps[i - 2 : i + 1]] == [True] * 3 for i in grown)


def test_grad_scaler_under_data_parallel_updates_the_original_parameters():
    steps = precision.scaler_steps(steps=6, n_devices=2)
    assert not steps[0].stepped and any(step.stepped for step in steps)


@pytest.fixture(scope="module")
def compressed() -> ddp_compression.Compression:
    hooks = ("none", "fp16_compress_hook", "fp16, dpcourse's copy", "bf16, dpcourse's copy")
    return ddp_compression.compression(world_size=2, multipliers=(1.0, 1e-6, 2.0**24), hooks=hooks)


def test_our_float16_hook_gives_exactly_torchs_fp16_compress_hook(compressed):
    for multiplier in (1.0, 1e-6, 2.0**24):
        torch.testing.assert_close(compressed.grads[(multiplier, "fp16, dpcourse's copy")],
                                   compressed.grads[(multiplier, "fp16_compress_hook")], rtol=0, atol=0, equal_nan=True)


def test_compressed_all_reduce_errors_against_the_float32_all_reduce(compressed):
    rows = {(row["multiplier"], row["hook"]): row for row in compressed.rows}
    fp16, bf16 = rows[(1.0, "fp16_compress_hook")], rows[(1.0, "bf16, dpcourse's copy")]
    assert fp16["relative_error"] < 2 ** -10 and bf16["relative_error"] < 2**-7  # under one unit of the fraction
    assert fp16["relative_error"] < bf16["relative_error"] / 2
    assert rows[(1e-6, "fp16_compress_hook")]["lost"] > 0.5 and rows[(1e-6, "bf16, dpcourse's copy")]["lost"] == 0
    assert rows[(2.0**24, "fp16_compress_hook")]["not_finite"] > 0
    assert rows[(2.0**24, "bf16, dpcourse's copy")]["not_finite"] == 0
    assert compressed.ranks_agree
    # the uncompressed reference is DDP's average: the full-batch gradient of the 16 rows
    full_batch = single_device(steps=1, batch=16, lr=0.0)["grads"][0]
    torch.testing.assert_close(compressed.grads[(1.0, "none")], full_batch, rtol=0, atol=1e-6)


def test_ddp_accepts_bf16_compress_hook_exactly_when_the_build_check_passes(compressed):
    if ddp_compression.bf16_build_check()["passes"]:
        assert compressed.bf16_compress_hook == "accepted"
    else:
        assert compressed.bf16_compress_hook.startswith("TypeError: BF16 all reduce communication hook required")


def _register_bf16_hook_on_gloo_cpu() -> str:
    """One in-process gloo rank, a CPU module: DDP's answer to ``bf16_compress_hook``."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return "accepted"
    except TypeError as error:
        return f"TypeError: {error}"
    finally:
        dist.destroy_process_group()


def test_the_bf16_check_reads_the_build_not_the_backend_or_device(monkeypatch):
    """A planted CUDA build with NCCL 2.21: DDP accepts the hook on gloo with a CPU module, and so does our check."""
    import torch.distributed as dist

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    assert ddp_compression.bf16_build_check()["passes"]
    assert _register_bf16_hook_on_gloo_cpu() == "accepted"
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU-only build: refused, same backend and device
    assert not ddp_compression.bf16_build_check()["passes"]
    assert _register_bf16_hook_on_gloo_cpu().startswith("TypeError: BF16 all reduce")


def test_compression_rejects_unknown_hooks_before_starting_ranks():
    with pytest.raises(ValueError, match="include 'none'"):
        ddp_compression.compression(hooks=("fp16_compress_hook",))
    with pytest.raises(ValueError, match="choose the others from"):
        ddp_compression.compression(hooks=("none", "int8"))

