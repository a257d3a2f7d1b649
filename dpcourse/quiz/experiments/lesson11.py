"""Lesson 11's quiz experiments (``quizzes/11_review.toml``): the rules of the course, combined."""

import torch
from torch import nn

from ...examples import BufferCountingNet
from ..lab import data_parallel_over, gathered_means, run_three_forwards, seeded_module, seeded_randn
from ..outcome import Outcome


def review_nine_rows_scalar() -> Outcome:
    """A 0-d output, 9 rows on 4 devices: 3 chunks of 3, so a vector of 3."""
    out, warned = gathered_means(9, 4)
    text = f"forward returns x.mean(); 9 rows on 4 devices -> dp(x).shape = {out.shape}\n  warning: {warned}"
    return Outcome(text, tuple(out.shape))


def review_buffer_counter() -> Outcome:
    """3 forwards of 8 rows on 4 devices: buffers keep replica 0's in-place updates, the int keeps nothing."""
    model = run_three_forwards(BufferCountingNet(features=2), 4, rows=8)
    text = (
        "3 forwards, 8 rows each, 4 devices:\n"
        f"  buffer forwards += 1      -> {model.forwards.item():g}\n"
        f"  buffer rows += len(x)     -> {model.rows.item():g}  (replica 0's 2 rows per forward; 24 rows went in)\n"
        f"  plain int calls += 1      -> {model.calls}"
    )
    return Outcome(text, model.forwards.item())


def review_five_rows_output() -> Outcome:
    """``nn.Linear(3, 2)`` on 5 rows and 4 devices: 3 replicas run, and every row comes back."""
    out = data_parallel_over(seeded_module(lambda: nn.Linear(3, 2)), 4)(seeded_randn(5, 3))
    text = f"chunks {[len(c) for c in torch.arange(5).chunk(4)]} -> dp(x).shape = {out.shape}"
    return Outcome(text, tuple(out.shape))


EXPERIMENTS = (
    review_nine_rows_scalar,
    review_buffer_counter,
    review_five_rows_output,
)
