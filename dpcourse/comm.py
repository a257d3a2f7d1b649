# The core, mirror of torch/nn/parallel/comm.py (and torch/csrc/cuda/comm.cpp).
"""Moving many tensors at once: copy a module's tensors to every device, and add gradients back up.

These are the two collective operations DataParallel needs (torch: ``torch/nn/parallel/comm.py`` on top
of ``torch/csrc/cuda/comm.cpp``). Both work on *buckets*: tensors of one dtype are flattened into one
long buffer of at most ``BROADCAST_BUCKET_BYTES`` and moved with a single copy, because one 10 MiB copy is much
cheaper than a thousand 10 KiB copies (each copy has a fixed launch cost, on a GPU several microseconds).
"""

from collections.abc import Sequence

import torch

__all__ = ["broadcast_coalesced", "buckets", "reduce_add_coalesced", "sum_bucket"]

BROADCAST_BUCKET_BYTES = 10 * 1024 * 1024  # the same bucket size as torch's broadcast_coalesced


def buckets(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Group tensor indices into buckets, one dtype each, as torch's C++ ``take_tensors`` does.

    (``torch/csrc/utils/tensor_flatten.cpp``; Python's ``torch._utils._take_tensors`` closes a bucket *before*
    it would overflow instead. Seen on an H100 with torch 2.11: torch's replicate of 6 x [4096x4096 weight,
    4096 bias] flattens 7 buckets, 5 of them by ``cat``, as this rule gives.)

    Each dtype has one open bucket. A tensor joins its dtype's bucket, and the bucket closes as soon as it
    holds ``BROADCAST_BUCKET_BYTES`` or more, so a big tensor closes the bucket it joins (``[bias, big weight]`` is one
    bucket), and a bucket exceeds the limit only by its last tensor. Sparse tensors are not flattened: each
    is a bucket of its own.
    """
    closed: list[list[int]] = []
    open_by_dtype: dict[torch.dtype, tuple[list[int], int]] = {}
    for i, tensor in enumerate(tensors):
        if tensor.is_sparse:
            closed.append([i])
            continue
        bucket, filled = open_by_dtype.pop(tensor.dtype, ([], 0))
        bucket.append(i)
        filled += tensor.numel() * tensor.element_size()
        if filled >= BROADCAST_BUCKET_BYTES:
            closed.append(bucket)
        else:
            open_by_dtype[tensor.dtype] = (bucket, filled)
    closed.extend(bucket for bucket, _ in open_by_dtype.values())
    return sorted(closed)


def _copy_bucket(tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Fresh copies of ``tensors`` on ``device``: one flat copy, then views of it shaped like the originals."""
    if len(tensors) == 1:
        return [tensors[0].to(device, copy=True)]
    flat = torch.cat([t.reshape(-1) for t in tensors]).to(device, non_blocking=True)
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors, strict=True)]


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[torch.device]) -> list[list[torch.Tensor]]:
    """Return ``copies`` with ``copies[j][i]`` = ``tensors[i]`` on ``devices[j]``.

    The surprising part, kept from torch: ``copies[0]`` are **the tensors themselves**, not copies
    ("For device[0] in broadcast_coalesced, the input Variables are always returned as-is", comm.cpp).
    That is why replica 0 of a DataParallel module shares its parameters and buffers with the original.
    Every other entry is a real copy, also when the device repeats (``["cpu", "cpu"]``).
    """
    for tensor in tensors:
        if tensor.device != devices[0]:
            raise RuntimeError(
                f"All tensors to broadcast must be on devices[0] = {devices[0]}, but one is on {tensor.device}. "
                f"Move the module there first: module.to({str(devices[0])!r})."
            )
    copies = [list(tensors)]
    for device in devices[1:]:
        per_device: list[torch.Tensor] = [torch.empty(0)] * len(tensors)
        for bucket in buckets(tensors):
            for i, copy in zip(bucket, _copy_bucket([tensors[i] for i in bucket], device), strict=True):
                per_device[i] = copy
        copies.append(per_device)
    return copies


def _flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One tensor holding a bucket: the tensor itself when it is alone (sparse ones always are), else a flat copy."""
    return tensors[0] if len(tensors) == 1 else torch.cat([t.reshape(-1) for t in tensors])


def _unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if len(like) == 1:
        return [flat]
    return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in like]), like, strict=True)]


def sum_bucket(per_replica: Sequence[Sequence[torch.Tensor]], destination: torch.device) -> list[torch.Tensor]:
    """Add up one bucket's gradients from every replica, on ``destination``, into a new tensor.

    ``per_replica[j]`` is replica j's gradients of the bucket's parameters; the result holds one sum per
    parameter, shaped like replica 0's. ``reduce_add_coalesced`` calls it once per bucket; torch does the same
    with ``reduce_add`` on each flattened bucket (``torch/nn/parallel/comm.py``).

    The first sum makes the result (one pass over memory, where a copy then an add would be two). Sums stay
    out of place while the total is sparse, since a sparse gradient may meet a dense one.
    """
    flats = [_flatten(grads).to(destination) for grads in per_replica]
    total = flats[0].clone() if len(flats) == 1 else _add(flats[0], flats[1])
    for flat in flats[2:]:
        total = _add(total, flat) if total.is_sparse else total.add_(flat)
    return _unflatten(total, per_replica[0])


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # torch adds a sparse tensor to a dense one, but not a dense one to a sparse one
    return b + a if a.is_sparse and not b.is_sparse else a + b


def reduce_add_coalesced(
    per_replica: Sequence[Sequence[torch.Tensor]], destination: torch.device
) -> list[torch.Tensor]:
    """Sum ``per_replica[j][i]`` over replicas ``j``: the gradient of parameter ``i``, on ``destination``.

    This is where DataParallel's gradients are **summed**, never averaged: each replica's parameter is
    a copy of one original, so by the chain rule the original's gradient is the sum of its copies'
    gradients (torch: ``ReduceAddCoalesced`` in ``torch/nn/parallel/_functions.py``).
    """
    # A gradient counts as sparse if any replica's is (an unused copy gets dense zeros).
    probes = [next((g for g in column if g.is_sparse), column[0]) for column in zip(*per_replica, strict=True)]
    # Buckets save kernel launches on a GPU; on the CPU flattening would only add a pass over memory.
    groups = buckets(probes) if destination.type == "cuda" else [[i] for i in range(len(probes))]
    sums: list[torch.Tensor] = [torch.empty(0)] * len(probes)
    for bucket in groups:
        bucket_grads = [[grads[i] for i in bucket] for grads in per_replica]
        for i, total in zip(bucket, sum_bucket(bucket_grads, destination), strict=True):
            sums[i] = total
    return sums
