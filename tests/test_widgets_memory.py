"""MemoryCalculator: every control driven in plain pytest, what it shows checked against dpcourse.memory.predict,
and every input that makes no sense shown as an error naming that input in the message area."""


import pytest

from dpcourse import memory
from dpcourse.memory import MIB, Setup, sized_mlp
from dpcourse.ui.controls import ERROR_STYLE
from dpcourse.widgets import MemoryCalculator
from tests.benchmarks.widget_latency import measure_interactions
from tests.widget_html import PNG, table_rows, text


def test_the_default_is_the_lessons_mlp_with_adam_on_4_devices():
    c = MemoryCalculator()
    assert repr(c) == "MemoryCalculator(width='512', depth=4, classes='1000', batch='256', optimizer='Adam', devices=4)"
    assert list(c.controls) == ["width_box", "depth_slider", "classes_box", "batch_box", "optimizer_toggle",
                                "devices_slider"]
    assert text(c.summary).startswith("1,071,592 parameters (4.09 MiB of float32). DataParallel on 4 devices: "
                                      "device 0 needs 22.78 MiB, 2.7 times device 1's 8.57 MiB")
    assert "That is more than one device training alone (19.87 MiB)" in text(c.summary)
    assert bytes(c.image.value).startswith(PNG) and not c.message.value


def test_the_table_shows_memory_predict_for_one_device_dataparallel_and_ddp():
    c = MemoryCalculator(width=256, depth=3, classes=32000, batch=64, optimizer="SGD with momentum", devices=2)
    common = {"batch": 64, "optimizer": "SGD with momentum", "model": sized_mlp(width=256, depth=3, classes=32000)}
    expected = [memory.predict(Setup(**common)).devices[0],
                *memory.predict(Setup(kind="DataParallel", devices=2, **common)).devices,
                memory.predict(Setup(kind="DDP", devices=2, **common)).devices[0],
                memory.predict(Setup(kind="DDP", devices=2, bucket_view=True, **common)).devices[0]]
    rows = table_rows(c.bytes_table)
    assert rows["MiB"] == ["one device", "DP device 0", "DP device 1", "DDP each rank", "DDP, bucket view"]
    for kind in memory.CATEGORIES:
        if kind in rows:
            assert rows[kind] == [f"{device[kind] / MIB:,.2f}" for device in expected], kind
    assert rows["total"] == [f"{sum(device.values()) / MIB:,.2f}" for device in expected]
    assert c.predictions["DataParallel"].devices == expected[1:3]


def test_every_control_changes_the_prediction():
    c = MemoryCalculator()
    seen = {text(c.summary)}
    for control, value in [("width_box", "1024"), ("depth_slider", 8), ("classes_box", "32000"),
                           ("batch_box", "1024"), ("optimizer_toggle", "SGD"), ("devices_slider", 8)]:
        c.controls[control].value = value
        assert not c.message.value, control
        seen.add(text(c.summary))
    assert len(seen) == 7
    assert repr(c) == ("MemoryCalculator(width='1024', depth=8, classes='32000', batch='1024', optimizer='SGD', "
                       "devices=8)")


def test_one_device_says_there_is_nothing_to_split():
    c = MemoryCalculator(devices=1)
    assert "DataParallel on one device runs the module itself" in text(c.summary)
    assert "DP device 1" not in table_rows(c.bytes_table)["MiB"]


BAD_TEXT = [
    ("batch_box", "nan", "ValueError: batch must be a whole number >= 1 (samples per step, all devices together); "
                         "got nan."),
    ("batch_box", "-3", "ValueError: batch must be a whole number >= 1 (samples per step, all devices together); "
                        "got -3."),
    ("batch_box", "0", "ValueError: batch must be a whole number >= 1"),
    ("width_box", "2.5", "ValueError: width must be a whole number >= 1 (units per hidden layer); got 2.5."),
    ("width_box", "inf", "ValueError: width must be a whole number >= 1 (units per hidden layer); got inf."),
    ("classes_box", "-1", "ValueError: classes must be a whole number >= 1 (outputs per sample); got -1."),
    ("classes_box", "many", "ValueError: classes='many' is not a number: type a whole number, such as 256."),
]


@pytest.mark.parametrize(("control", "typed", "message"), BAD_TEXT)
def test_a_typed_value_that_makes_no_sense_shows_its_error_and_clears_the_results(control, typed, message):
    c = MemoryCalculator()
    getattr(c, control).value = typed
    assert text(c.message).startswith(message)
    assert ERROR_STYLE in c.message.value
    assert c.summary.value == c.bytes_table.value == "" and c.image.layout.display == "none"
    getattr(c, control).value = "64"  # a good value clears the error and shows results again
    assert c.message.value == "" and c.bytes_table.value and c.image.layout.display is None


def test_a_whole_number_typed_with_a_decimal_point_or_underscores_is_read():
    c = MemoryCalculator()
    c.batch_box.value = "1_024"
    c.width_box.value = "256.0"
    assert not c.message.value
    assert c.predictions["one device"].setup.batch == 1024 and c.predictions["one device"].setup.model.widths[1] == 256


BAD_ARGUMENTS = [
    ({"batch": 0}, "batch must be a whole number >= 1"),
    ({"width": float("nan")}, "width must be a whole number >= 1 (units per hidden layer); got nan."),
    ({"optimizer": "RMSprop"}, "optimizer='RMSprop' is not one of ['SGD', 'SGD with momentum', 'Adam']."),
    ({"devices": 9}, "devices=9 is out of range: choose a whole number from 1 to 8."),
    ({"depth": 0}, "depth must be a whole number >= 1 (Linear layers); got 0."),
]


@pytest.mark.parametrize(("arguments", "message"), BAD_ARGUMENTS, ids=[str(a) for a, _ in BAD_ARGUMENTS])
def test_a_constructor_value_that_makes_no_sense_is_an_error_naming_it(arguments, message):
    with pytest.raises(ValueError) as info:
        MemoryCalculator(**arguments)
    assert str(info.value).startswith(message)


def test_every_control_answers_without_error():
    results = measure_interactions(MemoryCalculator, repeats=1)
    assert set(results) == set(MemoryCalculator().controls)
    assert all(stats["n"] >= 2 for stats in results.values())
