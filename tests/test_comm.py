"""comm: buckets by dtype and size, coalesced copies (device 0 returned as-is), and the gradient sum."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcourse import comm
from dpcourse.comm import broadcast_coalesced, buckets, reduce_add_coalesced

CPU = torch.device("cpu")
DTYPES = [torch.float32, torch.float64, torch.int64]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DTYPES), st.integers(1, 40), st.booleans()), max_size=12))
def test_buckets_cover_every_tensor_once_one_dtype_each_closed_at_the_limit(specs):
    tensors = [torch.ones(n, dtype=d).to_sparse() if sparse else torch.ones(n, dtype=d) for d, n, sparse in specs]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(comm, "BROADCAST_BUCKET_BYTES", 64)  # small buckets, so that small tensors fill several
        groups = buckets(tensors)
    assert sorted(i for group in groups for i in group) == list(range(len(tensors)))
    for group in groups:
        assert len({tensors[i].dtype for i in group}) == 1
        # a bucket closes once it holds 64 bytes or more: only its last tensor can take it over the limit
        assert sum(tensors[i].numel() * tensors[i].element_size() for i in group[:-1]) < 64
        assert len(group) == 1 or not any(tensors[i].is_sparse for i in group)
        assert group == sorted(group)  # tensors keep their order inside a bucket
    dense = [g for g in groups if not tensors[g[0]].is_sparse]
    for group in dense:  # every dense bucket but the last of its dtype was closed by reaching the limit
        later = [g for g in dense if tensors[g[0]].dtype == tensors[group[0]].dtype and g[0] > group[0]]
        assert not later or sum(tensors[i].numel() * tensors[i].element_size() for i in group) >= 64


def test_broadcast_returns_the_inputs_for_device_0_and_one_flat_copy_per_bucket_elsewhere():
    tensors = [torch.randn(3, 2), torch.randn(4), torch.arange(5)]
    copies = broadcast_coalesced(tensors, [CPU, CPU, CPU])
    assert all(c is t for c, t in zip(copies[0], tensors, strict=True))
    for per_device in copies[1:]:
        assert all(torch.equal(c, t) and c.data_ptr() != t.data_ptr() for c, t in zip(per_device, tensors, strict=True))
        # the two float32 tensors share a bucket: one copy, two views of it
        assert per_device[0].untyped_storage().data_ptr() == per_device[1].untyped_storage().data_ptr()
        assert per_device[2].untyped_storage().data_ptr() != per_device[0].untyped_storage().data_ptr()


def test_broadcast_refuses_tensors_away_from_device_0():
    with pytest.raises(RuntimeError, match=r"devices\[0\] = cpu.*module.to\('cpu'\)"):
        broadcast_coalesced([torch.zeros(1, device="meta")], [CPU, CPU])


def test_reduce_add_sums_every_replica_into_a_new_tensor():
    per_replica = [[torch.full((2, 2), float(r)), torch.full((3,), 10.0 * r)] for r in range(1, 4)]
    sums = reduce_add_coalesced(per_replica, CPU)
    assert torch.equal(sums[0], torch.full((2, 2), 6.0)) and torch.equal(sums[1], torch.full((3,), 60.0))
    assert all(s.data_ptr() != per_replica[0][i].data_ptr() for i, s in enumerate(sums))


def test_one_replica_gives_a_copy_not_the_gradient_itself():
    grad = torch.ones(3)
    (total,) = reduce_add_coalesced([[grad]], CPU)
    assert torch.equal(total, grad) and total.data_ptr() != grad.data_ptr()


@pytest.mark.parametrize("sparse_replicas", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_sparse_and_dense_gradients_add_up(sparse_replicas):
    dense = [torch.zeros(4, 2).index_fill_(0, torch.tensor([r]), 1.0) for r in range(3)]
    grads = [[d.to_sparse() if r in sparse_replicas else d] for r, d in enumerate(dense)]
    (total,) = reduce_add_coalesced(grads, CPU)
    assert torch.equal(total.to_dense(), sum(dense))


def test_a_bucket_of_several_tensors_is_summed_flat_and_reshaped():
    per_replica = [[torch.ones(2, 3) * r, torch.ones(4) * r] for r in (1, 2)]
    summed = comm.sum_bucket(per_replica, CPU)
    assert [list(s.shape) for s in summed] == [[2, 3], [4]]
    assert torch.equal(summed[0], torch.full((2, 3), 3.0)) and torch.equal(summed[1], torch.full((4,), 3.0))
