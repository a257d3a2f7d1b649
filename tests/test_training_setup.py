"""dpcourse.training_setup: one Setup (kind x devices x model x batch) that every topic extends, every field checked."""

import pytest

from dpcourse import costmodel, examples, memory
from dpcourse.training_setup import KINDS, Setup, whole


def test_both_topics_extend_the_one_setup_with_their_own_fields():
    assert issubclass(costmodel.Setup, Setup) and issubclass(memory.Setup, Setup)
    assert memory.KINDS == KINDS and costmodel.Setup.KINDS == ("DataParallel",)
    setup = Setup(kind="DDP", devices=2, model=examples.running_example(), batch=8)
    assert (setup.kind, setup.devices, setup.model.widths, setup.batch) == ("DDP", 2, (8, 16, 4), 8)


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "FSDP"}, f"kind='FSDP' is not one of {list(KINDS)}."),
    ({"devices": 0, "kind": "DDP"}, "devices must be a whole number >= 1 (replicas or ranks); got 0."),
    ({"batch": 2.5}, "batch must be a whole number >= 1 (samples per step, all devices together); got 2.5."),
    ({"devices": 3}, "devices=3 with kind='one device': use kind='DataParallel', 'DDP' or a ZeRO stage."),
    ({"model": (8, 16, 4)}, "model must be a dpcourse.examples.MLP, got tuple."),
])
def test_a_bad_field_raises_a_value_error_naming_it(fields, message):
    with pytest.raises(ValueError) as info:
        Setup(**fields)
    assert str(info.value) == message


def test_a_whole_float_is_a_whole_number_and_a_bool_is_not():
    assert whole("batch", 256.0, "samples") == 256
    with pytest.raises(ValueError, match="got True"):
        whole("batch", True, "samples")
