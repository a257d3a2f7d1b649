"""The running example: seeded, and DataParallel training matches the single-device oracle."""

import pytest
import torch
from torch import nn

import dpcourse
from dpcourse import examples


def test_model_and_batch_are_seeded():
    assert examples.max_weight_difference(examples.make_model(), examples.make_model()) == 0.0
    assert torch.equal(examples.make_batch(5)[0], examples.make_batch(5)[0])


def test_the_models_leave_the_global_random_state_alone():
    deeper = examples.make_model
    for build in (examples.make_model, lambda: examples.mlp((8, 32, 32, 4)), lambda: deeper(hidden=32, depth=3)):
        torch.manual_seed(5)
        build()
        drawn = torch.rand(3)
        torch.manual_seed(5)
        assert torch.equal(drawn, torch.rand(3))


def test_mlp_builds_the_layers_in_order_from_the_seed():
    torch.manual_seed(0)
    expected = nn.Sequential(
        nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )
    built = examples.make_model(batchnorm=True, hidden=32, depth=3)  # the running example, deeper
    assert [type(m) for m in built] == [type(m) for m in expected]
    assert examples.max_weight_difference(built, expected) == 0.0
    assert examples.max_weight_difference(examples.make_model(), examples.mlp((8, 16, 4))) == 0.0
    assert all(isinstance(m, nn.Linear) for m in examples.mlp((8, 8, 8), relu=False))


def test_mlp_rejects_widths_it_cannot_build():
    with pytest.raises(ValueError, match=r"widths=\(8,\) must be 2 or more whole numbers >= 1"):
        examples.mlp((8,))


def test_mlp_spec_builds_what_mlp_builds_and_counts_its_parameters():
    spec = examples.MLP([8, 32, 32, 4], batchnorm=True)
    assert spec.widths == (8, 32, 32, 4) and spec == examples.MLP((8, 32, 32, 4), batchnorm=True)
    built = spec.build(seed=3)
    assert examples.max_weight_difference(built, examples.mlp((8, 32, 32, 4), seed=3, batchnorm=True)) == 0.0
    assert spec.parameters == sum(p.numel() for p in built.parameters())
    assert examples.MLP((8, 16, 4)).parameters == 8 * 16 + 16 + 16 * 4 + 4


def test_mlp_spec_batch_is_the_running_examples_batch_for_its_widths():
    x, y = examples.MLP((8, 16, 4)).batch(10, seed=1)
    expected_x, expected_y = examples.make_batch(10, seed=1)
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y)
    x, y = examples.MLP((5, 7, 3)).batch(6, seed=0, device="cpu")
    assert x.shape == (6, 5) and y.shape == (6,) and int(y.max()) < 3


@pytest.mark.parametrize("widths", [(8,), (8, 0, 4), (8, 2.5, 4), (8, True, 4)])
def test_mlp_spec_names_the_widths_it_cannot_build(widths):
    with pytest.raises(ValueError, match=r"widths=.* must be 2 or more whole numbers >= 1"):
        examples.MLP(widths)


def test_seeded_helpers_draw_what_a_reseeded_global_generator_draws_and_leave_it_alone():
    torch.manual_seed(5)
    examples.seeded_randn(3, 2, seed=7)
    examples.seeded_module(lambda: nn.Linear(3, 2), seed=7)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))
    torch.manual_seed(7)
    assert torch.equal(examples.seeded_randn(3, 2, seed=7), torch.randn(3, 2))
    torch.manual_seed(7)
    assert torch.equal(examples.seeded_module(lambda: nn.Linear(3, 2), seed=7).weight, nn.Linear(3, 2).weight)


def test_regression_data_is_seeded_and_the_oracle_is_torch_sgd_on_its_slices():
    x, y = examples.regression_batch(6)
    assert x.shape == (6, 8) and y.shape == (6, 4) and torch.equal(y, examples.regression_batch(6)[1])
    reference = examples.single_device(steps=2, batch=3, lr=0.1)
    model = examples.make_model()
    for step in range(2):
        model.zero_grad()
        examples.regression_loss(model(x[3 * step : 3 * step + 3]), y[3 * step : 3 * step + 3]).backward()
        assert examples.max_difference(examples.flat_grad(model), reference["grads"][step]) < 1e-6
        examples.sgd_step(model, lr=0.1)  # torch.optim.SGD's update, rounded differently in the last bit
        assert examples.max_difference(examples.flat_weights(model), reference["weights"][step]) < 1e-6


def test_data_parallel_training_matches_the_oracle():
    model = examples.make_model()
    oracle = examples.twin(model)
    dp_losses = examples.train(dpcourse.DataParallel(model, devices=dpcourse.devices(3)), steps=5)
    oracle_losses = examples.train(oracle, steps=5)
    torch.testing.assert_close(dp_losses, oracle_losses)
    assert examples.max_weight_difference(model, oracle) < 1e-6
    assert examples.max_grad_difference(model, oracle) < 1e-6


def test_train_is_torch_sgd_with_momentum():
    model, reference = examples.make_model(), examples.make_model()
    examples.train(model, steps=3)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = examples.make_batch(10, seed=100 + step)
        optimizer.zero_grad()
        examples.loss_fn(reference(x), y).backward()
        optimizer.step()
    assert examples.max_weight_difference(model, reference) < 1e-6


def test_max_difference_pairs_tensors_in_order_and_dicts_by_key():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])
    assert examples.max_difference(a, b) == 0.5
    assert examples.max_difference([a, torch.zeros(2, 2)], [b, torch.full((2, 2), -3.0)]) == 3.0
    assert examples.max_difference({"w": a, "b": b}, {"b": b, "w": a}) == 0.0  # by name, not by position
    model = examples.make_model()
    assert examples.max_difference(model.parameters(), examples.make_model().parameters()) == 0.0
    with pytest.raises(ValueError):
        examples.max_difference([a, a], [b])  # a parameter missing on one side is not "no difference"


def test_the_models_differences_are_max_difference_of_their_weights_and_grads():
    model, other = examples.make_model(), examples.make_model()
    with torch.no_grad():
        other[0].weight[2, 3] += 0.25
    x, y = examples.make_batch(10)
    for m in (model, other):
        examples.loss_fn(m(x), y).backward()
    assert examples.max_weight_difference(model, other) == pytest.approx(0.25)
    grads = [[p.grad for p in m.parameters()] for m in (model, other)]
    assert examples.max_grad_difference(model, other) == examples.max_difference(*grads) > 0


def test_counting_net_loses_its_counter_but_not_its_list():
    net = examples.CountingNet()
    dpcourse.DataParallel(net, devices=dpcourse.devices(2))(torch.randn(6, 3))
    assert net.calls == 0 and sorted(net.seen) == [3, 3]


@pytest.mark.parametrize(("devices", "calls", "rows"), [(1, 3, 24), (4, 0, 6)])
def test_buffer_counting_net_counts_forwards_in_a_buffer_and_rows_only_of_replica_0(devices, calls, rows):
    net = examples.BufferCountingNet(features=2)
    dp = dpcourse.DataParallel(net, devices=dpcourse.devices(devices))
    for _ in range(3):
        dp(torch.randn(8, 2))
    assert (net.calls, net.forwards.item(), net.rows.item()) == (calls, 3, rows)
    assert "forwards" not in dict(examples.CountingNet().named_buffers())  # lesson 03's map keeps its exercise


def test_loss_inside_returns_one_mean_loss_per_replica_chunk():
    model, (x, y) = examples.make_model(), examples.make_batch(7)
    with pytest.warns(UserWarning, match="scalars"):  # gather's warning: each replica returns a scalar
        chunk_means = dpcourse.DataParallel(examples.LossInside(model), devices=dpcourse.devices(2))(x, y)
    expected = [examples.loss_fn(model(x[:4]), y[:4]), examples.loss_fn(model(x[4:]), y[4:])]
    assert torch.allclose(chunk_means, torch.stack(expected))



def test_gap_prints_float_rounding_as_a_bound_and_the_rest_to_two_digits():
    # 0.0, 3e-08 and 6e-08 are one step on three CPUs: they must read the same.
    assert {examples.gap(d) for d in (0.0, 3e-08, 6e-08)} == {"below 1e-6"}
    assert examples.gap(0.0312) == "0.031" and examples.gap(2e-6) == "2e-06"
    assert examples.gap(3e-6, rounding=1e-5) == "below 1e-5"
