"""dpcourse.workloads: the models the course times are seeded stacks of Linear layers with seeded batches."""

from torch import nn

from dpcourse import examples
from dpcourse.workloads import WIDE_MLP, ModelToTime, lesson_mlp


def test_a_model_to_time_is_the_same_every_time():
    many = ModelToTime("many", (8,) * 4, relu=False)
    assert [type(m) for m in many.model()] == [nn.Linear] * 3
    assert examples.max_weight_difference(WIDE_MLP.model(), WIDE_MLP.model()) == 0.0
    (x1, y1), (x2, y2) = WIDE_MLP.batch(6), WIDE_MLP.batch(6)
    assert x1.equal(x2) and y1.equal(y2) and tuple(x1.shape) == (6, 512) and int(y1.max()) < 10


def test_the_lesson_mlp_widened_is_the_running_example_at_its_own_size():
    assert lesson_mlp(hidden=16, depth=2).widths == (8, 16, 4)
    assert examples.max_weight_difference(lesson_mlp(16, 2).model(), examples.make_model()) == 0.0
    assert WIDE_MLP.describe() == "a 512-1024-1024-10 MLP: 3 Linear layers 512->...->10"
