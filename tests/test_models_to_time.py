"""dpcourse.models_to_time: the models the course times are examples.MLP specs with a label, built and fed seeded."""

from torch import nn

from dpcourse import examples
from dpcourse.models_to_time import WIDE_MLP, ModelToTime
from dpcourse.widgets.timing import MODELS


def test_a_model_to_time_is_the_same_every_time():
    many = ModelToTime("many", examples.MLP((8,) * 4, relu=False))
    assert [type(m) for m in many.mlp.build()] == [nn.Linear] * 3
    assert examples.max_weight_difference(WIDE_MLP.mlp.build(), WIDE_MLP.mlp.build()) == 0.0
    (x1, y1), (x2, y2) = WIDE_MLP.mlp.batch(6), WIDE_MLP.mlp.batch(6)
    assert x1.equal(x2) and y1.equal(y2) and tuple(x1.shape) == (6, 512) and int(y1.max()) < 10
    assert WIDE_MLP.describe() == "a 512-1024-1024-10 MLP: 3 Linear layers 512->...->10"


def test_the_explorers_small_model_is_the_running_example():
    assert MODELS["small"].mlp == examples.running_example()
    assert examples.max_weight_difference(MODELS["small"].mlp.build(), examples.make_model()) == 0.0
