"""CostModelCalculator: every control driven in plain pytest, what it shows checked against dpcourse.costmodel."""

import re

import pytest

from dpcourse import costmodel
from dpcourse.costmodel import PRESETS
from dpcourse.ui.controls import ERROR_STYLE
from dpcourse.widgets import CostModelCalculator
from dpcourse.widgets import costmodel as calculator_module
from tests.benchmarks.widget_latency import measure_interactions
from tests.widget_html import PNG, table_rows, text


def ddp_on_8(calculator: CostModelCalculator) -> float:
    return float(re.search(r"DDP on 8 devices: (\d+\.\d+)x", text(calculator.summary)).group(1))



def test_the_default_is_resnet50_on_8_gpus_over_pcie():
    c = CostModelCalculator()
    assert repr(c) == "CostModelCalculator(preset='8 GPUs, PCIe', batch=256, params=25600000, bandwidth=25)"
    assert list(c.controls) == ["preset_toggle", "batch_slider", "params_slider", "bandwidth_slider"]
    # the widget's default workload is costmodel's EXAMPLE, its 25,557,032 parameters rounded to 25.6M
    expected = costmodel.predict_speedup("8 GPUs, PCIe")
    assert c.speedup.dp == pytest.approx(expected.dp, rel=0.01)
    assert c.speedup.ddp == pytest.approx(expected.ddp, rel=0.01)
    summary = text(c.summary)
    assert summary.startswith("8 GPUs, PCIe: 25.6M parameters, batch 256.")
    assert expected.dp_best == 8 and f"DP still gains up to all 8 devices: {expected.dp[-1]:.2f}x." in summary
    assert f"DDP on 8 devices: {expected.ddp[-1]:.2f}x (ideal 8x)" in summary
    assert bytes(c.image.value).startswith(PNG)
    assert not c.message.value


def test_the_terms_table_lists_every_term_of_the_formula_for_n_2_and_8():
    c = CostModelCalculator()
    rows = table_rows(c.terms_table)
    assert rows["term (ms per step)"] == ["one device", "DataParallel n=2", "DataParallel n=8",
                                         "DDP n=2", "DDP n=8"]
    model = calculator_module.workload(25_600_000, 256)
    columns = [("one device", 1), ("DataParallel", 2), ("DataParallel", 8), ("DDP", 2), ("DDP", 8)]
    for column, (kind, n) in enumerate(columns):
        terms = costmodel.step_time(kind, n, model, PRESETS["8 GPUs, PCIe"])
        for term, seconds in terms.items():
            assert re.search(rf"\b{term}\b", costmodel.formula(kind))  # every row is a term of the formula
            assert rows[term][column] == f"{seconds * 1e3:.2f}", (kind, n, term)
        assert rows["step"][column] == f"{sum(terms.values()) * 1e3:.2f}"
    assert rows["allreduce"][:3] == ["—", "—", "—"] and rows["replicate"][3:] == ["—", "—"]
    assert "T_DDP(N) = compute" in c.formula.value and "T_DP(N) = compute" in c.formula.value


def test_the_preset_toggle_moves_the_bandwidth_and_nvlink_beats_pcie():
    c = CostModelCalculator()
    pcie = ddp_on_8(c)
    c.preset_toggle.value = "8 GPUs, NVLink"
    assert c.bandwidth_slider.value == 150 and c.bandwidth_slider.label == "150 GB/s"
    assert ddp_on_8(c) > pcie
    assert ddp_on_8(c) == pytest.approx(costmodel.predict_speedup("8 GPUs, NVLink").ddp[-1], abs=0.005)
    assert text(c.summary).startswith("8 GPUs, NVLink:")  # the preset's own link: no "link ... GB/s" in the name
    for preset, gbps in [("laptop CPU", 4), ("one GPU", 500)]:
        c.preset_toggle.value = preset
        assert c.bandwidth_slider.value == gbps
        summary = text(c.summary)
        assert "DP never pays off here: on 2 devices it runs at 0." in summary, summary
        assert "at best 1x: only 1 of them computes at a time" in summary
    assert not c.message.value


def test_choosing_a_preset_redraws_once(monkeypatch):
    drawn = []
    original = calculator_module.plot_speedup
    monkeypatch.setattr(calculator_module, "plot_speedup", lambda *a: drawn.append(a) or original(*a))
    c = CostModelCalculator()
    c.preset_toggle.value = "8 GPUs, NVLink"
    assert len(drawn) == 2  # construction, then the preset with its bandwidth: not once more for the bandwidth


def test_link_bandwidth_decides_whether_dp_pays_off_at_all():
    c = CostModelCalculator()
    c.batch_slider.value = 64
    c.bandwidth_slider.value = 1
    summary = text(c.summary)
    assert summary.startswith("8 GPUs, PCIe, link 1 GB/s:") and "DP never pays off here" in summary
    slow = ddp_on_8(c)
    c.bandwidth_slider.value = 300
    assert "DP stops paying off after" in text(c.summary) and ddp_on_8(c) > slow
    fast = costmodel.predict_speedup(calculator_module.hardware("8 GPUs, PCIe", 300), calculator_module.workload(
        c.params_slider.value, 64))
    assert c.speedup.dp == pytest.approx(fast.dp)
    assert c.preset_toggle.value == "8 GPUs, PCIe"  # moving the link keeps the machine


def test_a_bigger_batch_hides_more_communication_and_a_bigger_model_costs_more_per_step():
    c = CostModelCalculator()
    speedups = []
    for batch in calculator_module.BATCHES:
        c.batch_slider.value = batch
        assert f"batch {batch}." in text(c.summary)
        speedups.append(ddp_on_8(c))
    assert speedups == sorted(speedups) and speedups[0] < speedups[-1]
    steps = []
    for label, params in calculator_module.PARAMS:
        c.params_slider.value = params
        assert f": {label} parameters" in text(c.summary)
        steps.append(float(table_rows(c.terms_table)["step"][0]))
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert repr(c) == "CostModelCalculator(preset='8 GPUs, PCIe', batch=1024, params=400000000, bandwidth=25)"


def test_errors_show_in_the_message_area_and_the_next_good_interaction_clears_them(monkeypatch):
    c = CostModelCalculator()

    def broken(*args, **kwargs):
        raise ValueError("no such machine")

    monkeypatch.setattr(costmodel, "predict_speedup", broken)
    c.batch_slider.value = 64
    assert text(c.message) == "ValueError: no such machine"
    assert ERROR_STYLE in c.message.value
    c.preset_toggle.value = "8 GPUs, NVLink"  # the preset's handler reports errors too
    assert text(c.message) == "ValueError: no such machine"
    monkeypatch.undo()
    c.batch_slider.value = 128
    assert c.message.value == ""
    assert "batch 128." in text(c.summary)


def test_every_control_answers_without_error():
    results = measure_interactions(CostModelCalculator, repeats=1)
    assert set(results) == {"preset_toggle", "batch_slider", "params_slider", "bandwidth_slider"}
    assert all(stats["n"] >= 3 for stats in results.values())


def test_an_input_that_makes_no_sense_shows_its_error_and_clears_the_stale_results():
    c = CostModelCalculator()
    assert c.summary.value and c.terms_table.value and c.image.layout.display is None
    c.bandwidth_slider.options = [("0 GB/s", 0), *c.bandwidth_slider.options]  # as if the slider went to 0
    c.bandwidth_slider.value = 0
    assert text(c.message).startswith("ValueError: Hardware.bandwidth must be a number > 0")
    assert text(c.message).endswith("not 0.0.")
    assert c.summary.value == "" and c.terms_table.value == "" and c.image.layout.display == "none"
    c.bandwidth_slider.value = 25
    assert c.message.value == "" and "batch 256." in text(c.summary) and c.image.layout.display is None


BAD_ARGUMENTS = {
    "preset": ("TPU pod", "preset='TPU pod' is not one of the choices: pick one of ['laptop CPU', "),
    "batch": (100, "batch=100 is not one of the choices: pick one of [32, 64, 128, 256, 512, 1024]."),
    "params": (3, "params=3 is not one of the choices: pick one of [1000000, "),
    "bandwidth": (0, "bandwidth=0 is not one of the choices: pick one of [1, 4, 12, 25, 50, 150, 300, 500]."),
}


@pytest.mark.parametrize("argument", BAD_ARGUMENTS)
def test_a_constructor_value_that_is_not_a_choice_is_an_error_not_a_silent_default(argument):
    value, message = BAD_ARGUMENTS[argument]
    with pytest.raises(ValueError) as info:
        CostModelCalculator(**{argument: value})
    assert str(info.value).startswith(message)
