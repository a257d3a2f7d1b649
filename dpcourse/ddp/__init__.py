"""DistributedDataParallel for real: N processes, one replica each, gradients averaged by all-reduce.

DataParallel is one process with one thread per device that rebuilds the replicas on every forward and
**sums** the replicas' gradients onto device 0. DDP (``torch/nn/parallel/distributed.py``) is one
process per device, each holding its own long-lived replica. Its constructor broadcasts rank 0's weights
and buffers, once. Each rank trains on its own shard of the batch. During backward the gradients are
all-reduced in buckets and divided by the world size, so every rank ends up with the same **average**
and its optimizer takes the same step. Each rank's loss is already a mean over its shard, so with equal
shards that average is the full-batch gradient.

From a notebook, each function below starts the ranks (``launch``), runs one experiment and returns
numbers::

    from dpcourse import ddp
    print(ddp.gradients())              # averaged, = full batch; ddp.gradients(sizes=[5, 3]) is not
    print(ddp.train(steps=3))           # weights after every step = single-device training
    print(ddp.buffers())                # BatchNorm buffers broadcast from rank 0 at every forward
    print(ddp.check_buckets())          # GradientBuckets (ours, ~60 lines) = DDP's gradients
    trace = ddp.trace_ddp_steps()       # per-rank spans, a dpcourse.trace.Trace; ddp.trace_dp_steps() for DP
    ddp.crash("kill")                   # RankError: rank 1 was killed by SIGKILL

From a shell, the running example's training as a DDP script (lesson 17's), on one machine::

    torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --epochs 2
    python -m dpcourse.scripts.train_ddp --nproc 2 --epochs 2      # runs that torchrun itself

gloo on CPU, NCCL when every rank on a machine has a GPU of its own (rank ``r`` uses ``cuda:LOCAL_RANK``).

Several machines
----------------
Every machine runs torchrun with the same arguments. With the c10d rendezvous, which assigns the ranks
(HOST is any one of the machines, reachable by the others; the port is the rendezvous', 29400 by default)::

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_id=job1 --rdzv_backend=c10d \\
             --rdzv_endpoint=HOST:29400 -m dpcourse.scripts.train_ddp --epochs 100

Or with fixed machine ranks, the static rendezvous (``--node_rank`` differs per machine; HOST is node 0)::

    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \\
             -m dpcourse.scripts.train_ddp --epochs 100   # on node 0
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=8 --master_addr=HOST --master_port=29500 \\
             -m dpcourse.scripts.train_ddp --epochs 100   # on node 1

What changes on several machines:

* ``RANK`` (0..15 here) picks the data shard; ``LOCAL_RANK`` (0..7) picks the GPU. Only one rank should
  print or write checkpoints (``RANK == 0``), to a file system every machine can read.
* The network: NCCL picks an interface itself; pin it with ``NCCL_SOCKET_IFNAME=eth0`` (or
  ``^docker,lo`` to exclude some), and gloo's with ``GLOO_SOCKET_IFNAME``. ``NCCL_DEBUG=INFO`` prints
  the transport NCCL chose (NVLink/P2P and SHM inside a machine, InfiniBand or sockets between
  machines); ``NCCL_IB_DISABLE=1`` forces sockets. Firewalls must let the machines reach each other
  on the rendezvous port and on the ports NCCL and gloo open.
* ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` makes DDP check that all ranks call the same collectives.
* BatchNorm: each rank normalises with its own shard's statistics (as under DataParallel), and DDP
  broadcasts rank 0's running statistics. ``nn.SyncBatchNorm.convert_sync_batchnorm(model)`` before
  wrapping computes the statistics over the global batch (an all-gather inside every forward; GPUs and a
  few other accelerators, never CPU tensors: ``torch/nn/modules/batchnorm.py: SyncBatchNorm.forward``).
* The global batch is the per-rank batch times ``WORLD_SIZE``: 16 machines x 8 GPUs x 32 samples is a
  batch of 4096, and learning rates are usually rescaled for it. ``DistributedSampler.set_epoch(epoch)``
  reshuffles the shards each epoch.
* Timelines from different machines cannot be aligned: each machine has its own clock.
"""

from ..ranks.launcher import RankError, launch
from .demos.equivalence import Buffers, Gradients, Training, buffers, gradients, train
from .demos.failures import crash
from .demos.traced_steps import trace_ddp_steps, trace_dp_steps
from .implementations.reducer import BucketCheck, GradientBuckets, check_buckets

__all__ = [
    "BucketCheck",
    "Buffers",
    "GradientBuckets",
    "Gradients",
    "Training",
    "RankError",
    "buffers",
    "check_buckets",
    "crash",
    "gradients",
    "launch",
    "trace_ddp_steps",
    "trace_dp_steps",
    "train",
]
