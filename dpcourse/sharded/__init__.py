"""Part III, sharded data parallelism: ZeRO's three stages written by hand on real ranks, FSDP2 in practice, and
(lesson 26) HSDP.

Each rank of a DDP job keeps a whole copy of the parameters, the gradients and the optimizer state. ZeRO keeps
only a shard of them on each rank, stage by stage (lessons 18-21):

    stage 1   the optimizer state: each rank updates its shard, an all-gather shares the parameters
    stage 2   also the gradients: a reduce-scatter instead of DDP's all-reduce
    stage 3   also the parameters: each layer's are all-gathered before it runs and freed after (FSDP)
    HSDP      FSDP2 on a 2-D mesh: shard within a row of ranks, replicate across rows; only the gradient shards
              are all-reduced between rows (hsdp, hsdp_traffic, hsdp_tables; lesson 26)

The modules here run on ranks started by ``dpcourse.ranks.launcher.launch``, gloo on CPUs or NCCL on GPUs.
"""
