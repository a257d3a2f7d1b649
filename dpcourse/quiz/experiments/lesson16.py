"""Experiments for lesson 16: autocast in threads, GradScaler skipping a step, DDP's compressed all-reduce.

See ``experiments`` for how an experiment reports its ``Outcome``. The compression one starts 2 real gloo ranks.
"""

from collections.abc import Callable

import torch

from dpcourse import examples, precision
from dpcourse.ddp.demos.compression import compression

from ..lab import error_summary, raised_by
from ..outcome import Outcome, only_true


def _first_layer_dtypes(dtype: torch.dtype, run: Callable) -> list[tuple[str, torch.dtype]]:
    model, (x, _) = examples.make_model(), examples.make_batch(8)
    with torch.autocast("cpu", dtype=dtype):
        return precision.computed_dtypes(model[0], lambda: run(model, x))


def _thread_outcome(caller: torch.dtype, run: Callable, claims: Callable[[torch.dtype], dict[str, bool]]) -> Outcome:
    """The first layer's dtype in the main thread and in the thread ``run`` starts, under autocast to ``caller``."""
    (main,) = _first_layer_dtypes(caller, lambda model, x: model(x))
    (thread,) = _first_layer_dtypes(caller, run)
    text = (f"inside torch.autocast('cpu', dtype={caller}): {main[0]} computed in {main[1]}, "
            f"{thread[0]} in {thread[1]}")
    return Outcome(text, only_true(claims(thread[1])))


def plain_thread_dtype() -> Outcome:
    """Inside ``torch.autocast("cpu")`` the main thread computes in bfloat16, a new plain thread in float32."""
    return _thread_outcome(torch.bfloat16, precision.in_plain_thread, lambda dtype: {
        "bfloat16, like the thread that started it": dtype == torch.bfloat16,
        "float16: a new thread's default autocast dtype": dtype == torch.float16,
        "float32: a new thread starts with autocast off": dtype == torch.float32,
    })


def torch_worker_dtype() -> Outcome:
    """Under float16 autocast, a thread that re-enters autocast with the enabled flag only computes in bfloat16."""
    return _thread_outcome(torch.float16, precision.in_torch_style_worker, lambda dtype: {
        "bfloat16: the new thread's own default, since only the flag was passed": dtype == torch.bfloat16,
        "float16, the caller's dtype": dtype == torch.float16,
        "float32: autocast is off in a new thread": dtype == torch.float32,
    })


def overflow_skips_the_step() -> Outcome:
    """GradScaler starting at 2**24 under float16 autocast: the first step overflows, is skipped, the scale halves.

    An error that names a parameter is a result too (the second option); any other error is raised as it is.
    """
    steps: list[precision.ScalerStep] = []
    error = raised_by(lambda: steps.extend(precision.scaler_steps(steps=1)))
    names = [name for name, _ in examples.make_model().named_parameters()]
    names_a_parameter = error is not None and any(name in str(error) for name in names)
    if error is not None and not names_a_parameter:
        raise error  # not an answer to the question: show it as it is
    returned = steps[0] if steps else None
    if returned is None:
        text = f"the step raised {error_summary(error)}"
    else:
        text = (f"scale {returned.scale:.0f}: inf or NaN in the unscaled gradients: {returned.found_inf}; weights "
                f"changed by scaler.step: {returned.stepped}; scale after scaler.update(): {returned.next_scale:.0f}")
    value = only_true({
        "`optimizer.step()` runs with the infs clipped to the largest float16": (
            returned is not None and returned.stepped),
        "`scaler.step` raises an error naming the overflowing parameter": names_a_parameter,
        "`optimizer.step()` is skipped and `update()` halves the scale": (
            returned is not None and returned.found_inf and not returned.stepped
            and returned.next_scale == returned.scale / 2),
    })
    return Outcome(text, value)


def compressed_allreduce_error() -> Outcome:
    """2 gloo ranks, gradients of ordinary size: fp16_compress_hook's error against bfloat16 compression's."""
    result = compression(multipliers=(1.0,))
    errors = {row["hook"]: row["relative_error"] for row in result.rows}
    fp16, bf16 = errors["fp16_compress_hook"], errors["bf16, dpcourse's copy"]
    text = f"max |error| / max |g| against the float32 all-reduce: fp16 {fp16:.1e}, bf16 {bf16:.1e}\n{result}"
    value = only_true({
        "`fp16_compress_hook`: float16 keeps 10 bits of fraction, bfloat16 7": fp16 < bf16 / 2,
        "bfloat16: it was designed for deep learning": bf16 < fp16 / 2,
        "The same: both send 16 bits per gradient": fp16 / 2 <= bf16 <= 2 * fp16,
    })
    return Outcome(text, value)


EXPERIMENTS = (plain_thread_dtype, torch_worker_dtype, overflow_skips_the_step, compressed_allreduce_error)
