"""Ranks: start real processes, one per rank, run a function (a learner's too) on them, and count what they send.

Part II (DDP) and Part III (ZeRO, FSDP2) stand on this room; nothing here is DDP or ZeRO itself::

    from dpcourse import ranks
    ranks.launch(worker, 2)                     # worker(*args) on 2 ranks, their results by rank
    ranks.backend_for(2)                        # "nccl" when each rank can have a GPU of its own, else "gloo"
    ranks.train_on_ranks(program, 2)            # a learner's training program, next to ranks.one_device()

* ``launcher``: ``launch``, ``RankError`` (which rank failed first, and how), ``device``, ``backend_for``,
  ``init_from_env`` (what a rank does under torchrun too).
* ``waiting``: which collective each rank waits in, for the deadlock message.
* ``by_source``: a function written in a notebook cell, sent to the ranks as its source text.
* ``learner``: a learner's all-reduce on real ranks, next to torch's (lesson 13); the learner's exception back.
* ``training``: a learner's training program on real ranks, and the one-device oracle (lessons 18–21).
* ``traffic``: the bytes a rank sends and receives, and the collectives it calls.
* ``torchrun``: a script under ``torchrun``, with a deadline and no process left behind.
"""

from .by_source import SourceFunction
from .launcher import RankError, backend_for, checked_timeout, device, init_from_env, launch
from .traffic import Traffic, counted
from .training import (
    SGD_LR,
    TIMEOUT,
    WIDTHS,
    first_difference,
    first_gradient_square_sum,
    one_device,
    parameter_count,
    shippable,
    train_on_ranks,
    under_adam_and_sgd,
)

__all__ = [
    "SGD_LR",
    "TIMEOUT",
    "WIDTHS",
    "RankError",
    "SourceFunction",
    "Traffic",
    "backend_for",
    "checked_timeout",
    "counted",
    "device",
    "first_difference",
    "first_gradient_square_sum",
    "init_from_env",
    "launch",
    "one_device",
    "parameter_count",
    "shippable",
    "train_on_ranks",
    "under_adam_and_sgd",
]
