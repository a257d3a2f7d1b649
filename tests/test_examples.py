"""The running example: seeded, and DataParallel training matches the single-device oracle."""

import torch

import dpcourse
from dpcourse import examples


def test_model_and_batch_are_seeded():
    assert examples.max_weight_difference(examples.make_model(), examples.make_model()) == 0.0
    assert torch.equal(examples.make_batch(5)[0], examples.make_batch(5)[0])


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


def test_counting_net_loses_its_counter_but_not_its_list():
    net = examples.CountingNet()
    dpcourse.DataParallel(net, devices=dpcourse.devices(2))(torch.randn(6, 3))
    assert net.calls == 0 and sorted(net.seen) == [3, 3]
