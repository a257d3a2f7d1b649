"""DDP's machinery written small, to read next to torch's: what the lessons ask you to write, done once.

* ``reducer``: gradient buckets, a hook per parameter, async all-reduce, divide by N (torch's ``Reducer``,
  ``torch/csrc/distributed/c10d/reducer.cpp``).
* ``allreduce``: all-reduce from point-to-point messages, through one rank and around a ring.
* ``syncbn``: BatchNorm whose statistics are the global batch's (``nn.SyncBatchNorm``).
"""
