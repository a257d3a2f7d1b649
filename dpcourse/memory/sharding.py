"""The ZeRO stages' bytes per rank (Rajbhandari et al., "ZeRO", 2020): what each of n ranks keeps, as formulas.

With P the parameter bytes, S the optimizer state's (``optimizer_state_bytes``) and ``shard(t)`` a rank's piece
of one tensor, per rank:

    kind               parameters                   gradients                  optimizer state  all-reduce buckets
    ZeRO-1             P                            P                          S / n            DDP's: P (0 viewed)
    ZeRO-2             P                            shards + one layer's full  S / n            none
    ZeRO-3             shards + one layer's full    shards + one layer's full  shards of S      none
    FSDP2, no reshard  shards + every layer's full  shards + one layer's full  shards of S      none
                       (gradients: the most, over the layers, of one layer's full gradients + its shards)

ZeRO-2 is the paper's stage 2 (P_os+g in its figure 1), the stage lesson 19 builds and ``costmodel.zero`` counts:
every rank keeps all the parameters and reduce-scatters the gradients, so only the gradients and the optimizer
state are divided by n (its gradient shards are counted by the row rule below, within a row per tensor of a
flat cut). "FSDP2, no reshard" (``setup.FSDP2_NO_RESHARD``) is ``fully_shard(...,
reshard_after_forward=False)``, often called FSDP's ZeRO-2: it shards the parameters too, but keeps every layer
gathered from its forward to its backward, so at the start of backward it holds P + P / n of them.

* **shards**: each tensor is cut along its first dimension into n pieces of ceil(rows / n) rows, the last ones
  padded with zeros, so every rank's piece has the same size: FSDP2's rule (``fully_shard``,
  ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py: FSDPParam._init_sharded_param``). ZeRO-1's S / n is a
  flat ceil(numel / n) per rank, as lesson 18 shards it; torch's ``ZeroRedundancyOptimizer`` gives each rank whole
  tensors instead (largest first, to the least loaded rank), so its ranks differ from S / n by up to one tensor.
* **one layer's full parameters** (ZeRO-3): the layer that runs, all-gathered just before its forward and again
  before its backward, freed after; the largest layer counts. FSDP2 without resharding
  (``reshard_after_forward=False``) keeps every layer's all-gathered parameters from its forward until its
  backward, beside the shards the optimizer updates: P + P / n at the start of backward.
* **one layer's full gradients**: a layer's gradients exist whole from its backward until the reduce-scatter
  that leaves this rank its shard. Backward runs the layers last to first, so while layer k's are whole, the
  layers after it hold their shards and the layers before it nothing yet: the most, over k, of layer k's full
  gradients + the shards of layers k+1.. (after backward: every shard).
* **optimizer state**: every kind keeps 1/n of it. ZeRO-1 and ZeRO-2 cut it flat, ceil(numel / n) per rank, as
  lessons 18 and 19 do; FSDP2's ranks (ZeRO-3, FSDP2 without resharding) each hold a piece of every tensor, so
  each keeps every tensor's 4-byte Adam step counter.
* activations, outputs and loss: as DDP's, for the rank's ceil(batch / n) samples.

Not counted, here or by ``dpcourse.sharded.memory``, because no public API shows them: FSDP2's short-lived
buffers for one layer's collectives (the all-gather output before it is copied into the parameters, the
previous layer's all-gather that backward prefetches, the reduce-scatter's input), each about one layer's size.
"""

import math

from .setup import FLOAT, FSDP2_NO_RESHARD, Setup, layer_shapes, parameter_tensors


def shard_numel(shape: tuple[int, ...], ranks: int) -> int:
    """Elements of one rank's piece of a tensor of ``shape``: ceil(rows / ranks) rows, padded (FSDP2's rule)."""
    return math.ceil(shape[0] / ranks) * math.prod(shape[1:])


def shards_bytes(setup: Setup) -> int:
    """Bytes of one rank's shards of all the parameters (padding included)."""
    return sum(shard_numel(shape, setup.devices) for layer in layer_shapes(setup.model) for shape in layer) * FLOAT


def gathered_layer_bytes(setup: Setup) -> list[int]:
    """Bytes of each layer's all-gathered parameters: ranks x its shards, padding included."""
    return [setup.devices * sum(shard_numel(shape, setup.devices) for shape in layer) * FLOAT
            for layer in layer_shapes(setup.model)]


def full_layer_bytes(setup: Setup) -> list[int]:
    """Bytes of each layer's full parameters, or its full gradients (no padding)."""
    return [sum(math.prod(shape) for shape in layer) * FLOAT for layer in layer_shapes(setup.model)]


def parameters_and_gradients(setup: Setup) -> dict[str, int]:
    """A rank's parameter, gradient and all-reduce bucket bytes under ``setup.kind``, a ZeRO stage or FSDP2."""
    whole = setup.model.parameters * FLOAT
    if setup.kind == "ZeRO-1":
        return {"parameters": whole, "gradients": whole, "all_reduce_buckets": 0 if setup.bucket_view else whole}
    if setup.kind == "ZeRO-2":  # all the parameters, on every rank
        return {"parameters": whole, "gradients": gradients_at_most(setup), "all_reduce_buckets": 0}
    gathered = gathered_layer_bytes(setup)
    held = sum(gathered) if setup.kind == FSDP2_NO_RESHARD else max(gathered)
    return {"parameters": shards_bytes(setup) + held, "gradients": gradients_at_most(setup), "all_reduce_buckets": 0}


def gradients_at_most(setup: Setup) -> int:
    """The most gradient bytes a rank that reduce-scatters each layer's gradients holds (ZeRO-2, ZeRO-3, FSDP2): over
    the layers k, k's full gradients + the later layers' shards."""
    shards = [gathered // setup.devices for gathered in gathered_layer_bytes(setup)]
    during = [full + sum(shards[k + 1 :]) for k, full in enumerate(full_layer_bytes(setup))]
    return max([*during, sum(shards)])


def state_share(setup: Setup, copies: int, counter: int) -> int:
    """A rank's optimizer state, ``copies`` parameter-sized buffers and a ``counter``-byte step per tensor."""
    if setup.kind in ("ZeRO-1", "ZeRO-2"):
        flat = math.ceil(setup.model.parameters / setup.devices) * FLOAT
        return copies * flat + counter * math.ceil(parameter_tensors(setup.model) / setup.devices)
    return copies * shards_bytes(setup) + counter * parameter_tensors(setup.model)
