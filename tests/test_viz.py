"""dpcourse.viz: each figure draws what the real dpcourse calls computed; checked by content, not pixels."""

import gc
import io
import time
import weakref

import matplotlib.pyplot as plt
import numpy
import PIL.Image
import pytest
import torch
import torch.nn.functional as F
from matplotlib.colors import same_color
from matplotlib.figure import Figure
from torch import nn

import dpcourse
from dpcourse import examples
from dpcourse._functions import SCALAR_GATHER_WARNING
from dpcourse.trace import Trace
from dpcourse.ui.png import collector_paused, css_width, png_bytes, rendered
from dpcourse.viz import (
    chunk_split,
    gather_view,
    gradient_sum,
    measure_scaling,
    per_replica_mean_bias,
    replicate_map,
    scaling,
    timeline,
)
from dpcourse.viz.gallery import FIGURES, example_scaling, example_trace
from dpcourse.viz.palette import device_color
from dpcourse.viz.replicate import BY_REFERENCE, COPY, SHARED
from dpcourse.viz.timeline import CRITICAL, critical_path


def patches(fig: Figure, gid: str) -> list:
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def legend_labels(fig: Figure) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def title(fig: Figure) -> str:
    return fig.get_suptitle()


def test_chunk_split_colours_each_row_by_its_device_and_names_the_chunks():
    fig = chunk_split(10, 4)
    assert title(fig) == "10 rows on 4 devices: chunks 3, 3, 3, 1"
    rows = patches(fig, "row")
    assert len(rows) == 10
    owners = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert all(same_color(r.get_facecolor(), device_color(i)) for r, i in zip(rows, owners, strict=True))
    assert len(patches(fig, "chunk")) == 4 and not patches(fig, "idle")
    assert "batch[9:10]  (1 row)" in texts(fig)


def test_chunk_split_shows_idle_devices_for_6_rows_on_4():
    fig = chunk_split(6, 4)
    assert title(fig) == "6 rows on 4 devices: chunks 2, 2, 2 (1 idle)"
    assert len(patches(fig, "idle")) == 1
    assert "idle" in texts(fig) and "idle: no chunk" in legend_labels(fig)


def test_chunk_split_kwargs_padding_and_dropped_rows_follow_scatter_kwargs():
    fig = chunk_split(10, 4, kwargs_batches={"a": 10, "b": 3})
    _, kwargs = dpcourse.scatter_kwargs((torch.zeros(10),), {"a": torch.zeros(10), "b": torch.zeros(3)},
                                        dpcourse.devices(4))
    assert len(patches(fig, "padded")) == 2 * sum(1 for kw in kwargs if not kw)  # replica 3 gets neither a nor b
    assert "no a: padded, called without it" in texts(fig)
    assert "dropped: no replica" in legend_labels(fig)  # a's 4th chunk: zipped with b's 3 chunks
    assert len(patches(fig, "row")) == 10 + 10 + 3


def test_chunk_split_along_another_dim():
    fig = chunk_split(torch.zeros(2, 7), 3, dim=1)
    assert title(fig) == "7 slices along dim 1 on 3 devices: chunks 3, 3, 1"


class Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)
        self.tag = ["a plain attribute"]


def test_replicate_map_marks_replica_0_shared_and_replica_1_copied(stand_in_gpu):
    devices = dpcourse.devices(2)
    fig = replicate_map(Tagged().to(devices[0]), devices)
    relations = fig.dpcourse_data["relations"]
    for name in ("fc.weight", "fc.bias", "bn.weight", "bn.running_mean", "bn.num_batches_tracked"):
        assert relations[name] == [SHARED, COPY], name
    assert relations["tag"] == [BY_REFERENCE, BY_REFERENCE]
    assert len(patches(fig, SHARED)) == len(patches(fig, COPY)) == 7  # 4 parameters + 3 buffers
    assert len(patches(fig, "original")) == len(relations)
    assert texts(fig).count(SHARED) == 7


def test_gather_view_places_rows_in_replica_order():
    fig = gather_view([3, 3, 3, 1])
    data = fig.dpcourse_data
    assert data["owners"] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3] and data["warning"] is None
    assert len(patches(fig, "output")) == len(patches(fig, "gathered")) == 10
    assert "[10]" in title(fig)


def test_gather_view_scalars_become_a_vector_with_the_warning_shown():
    fig = gather_view([5, 5, 5], scalars=True)
    assert fig.dpcourse_data["gathered"].tolist() == [0.0, 1.0, 2.0]
    assert fig.dpcourse_data["warning"] == SCALAR_GATHER_WARNING
    shown = " ".join(fig.axes[0].get_title().split())
    assert " ".join(SCALAR_GATHER_WARNING.split()) in shown


def tiny_model() -> nn.Module:
    return examples.make_model(seed=3)


def heights(fig: Figure, gid: str) -> list[float]:
    return [p.get_height() for p in patches(fig, gid)]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradient_sum_numbers_match_an_independent_single_device_run(reduction):
    fig = gradient_sum(tiny_model, batch=10, n_devices=4, reduction=reduction)
    data = fig.dpcourse_data
    model = tiny_model()
    x, y = data["inputs"], data["targets"]
    F.cross_entropy(model(x), y, reduction=reduction).backward()
    assert data["param"] == "0.weight"
    torch.testing.assert_close(data["single_device"], model[0].weight.grad)
    torch.testing.assert_close(data["sum"], model[0].weight.grad, atol=1e-6, rtol=1e-5)
    assert data["max_abs_diff"] == pytest.approx((data["sum"] - model[0].weight.grad).abs().max().item(), abs=1e-7)
    # Replica j's part is the loss restricted to its chunk of rows (3, 3, 3, 1), differentiated alone.
    scale = len(y) if reduction == "mean" else 1
    for j, rows in enumerate(torch.arange(10).split(data["chunks"])):
        model.zero_grad()
        (F.cross_entropy(model(x[rows]), y[rows], reduction="sum") / scale).backward()
        torch.testing.assert_close(data["per_replica"][j], model[0].weight.grad, atol=1e-6, rtol=1e-5)
    entries = data["entries"]
    drawn = [bar.get_height() for bar in sorted(patches(fig, "contribution"), key=lambda bar: bar.get_x())]
    expected = [data["per_replica"][j].flatten()[e].item() for e in entries for j in range(4)]
    assert drawn == pytest.approx(expected)
    assert heights(fig, "sum") == pytest.approx([data["sum"].flatten()[e].item() for e in entries])
    assert heights(fig, "single") == pytest.approx([data["single_device"].flatten()[e].item() for e in entries])
    assert f"{data['max_abs_diff']:.1e}" in fig.axes[0].get_title()


def test_mean_of_chunk_means_is_biased_only_for_uneven_chunks():
    uneven = per_replica_mean_bias(batch=7, n_devices=2).dpcourse_data
    even = per_replica_mean_bias(batch=8, n_devices=2).dpcourse_data
    assert uneven["chunks"] == [4, 3] and uneven["max_abs_diff"] > 1e-4
    assert even["chunks"] == [4, 4] and even["max_abs_diff"] < 1e-6
    assert uneven["weights"].tolist() == pytest.approx([1 / 8] * 4 + [1 / 6] * 3)
    assert uneven["weights"].tolist() == pytest.approx(uneven["expected_weights"])


def test_mean_bias_draws_the_measured_weights():
    fig = per_replica_mean_bias(batch=7, n_devices=2)
    assert heights(fig, "weight") == pytest.approx(fig.dpcourse_data["weights"].tolist())
    assert "1/8, 1/6, not 1/7" in title(fig)


def test_timeline_draws_one_bar_per_span_and_one_lane_per_thread():
    trace = example_trace(n_devices=3, batch=12)
    fig = timeline(trace)
    threads = {s.thread for s in trace.spans}
    assert {"MainThread", "replica-0", "replica-1", "replica-2"} <= threads
    assert len(patches(fig, "span")) == len(trace.spans)
    assert len(patches(fig, CRITICAL)) == len(critical_path(trace))
    lanes = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert lanes[0] == CRITICAL and lanes[1:3] == ["MainThread", "replica-0"] and set(lanes[1:]) == threads
    assert fig.axes[0].get_xlabel().endswith("(ms)")


def test_timeline_puts_a_note_under_its_title():
    fig = timeline(example_trace(), "recorded on a GPU, 2026-11-26")
    assert fig._suptitle.get_text().endswith("(dotted line)\nrecorded on a GPU, 2026-11-26")


def test_timeline_of_a_gpu_like_trace_stacks_overlapping_spans():
    spans = [
        {"step": "scatter", "start": 0.0, "end": 0.001, "thread": "MainThread"},
        {"step": "forward", "start": 0.002, "end": 0.005, "thread": "replica-1", "replica": 1, "device": "cuda:1"},
        {"step": "forward", "start": 0.002, "end": 0.004, "thread": "replica-0", "replica": 0, "device": "cuda:0"},
        {"step": "backward", "start": 0.006, "end": 0.009, "thread": "Dummy-3", "replica": 0, "device": "cuda:0"},
        {"step": "backward", "start": 0.006, "end": 0.008, "thread": "Dummy-3", "replica": 1, "device": "cuda:1"},
    ]
    fig = timeline(Trace.from_dict({"spans": spans}))
    bars = patches(fig, "span")
    assert len(bars) == 5
    backward = [b for b in bars if b.get_x() == pytest.approx(6.0)]
    assert len({round(b.get_y(), 6) for b in backward}) == 2  # one above the other, not on top of each other
    assert fig.dpcourse_data["duration_ms"] == pytest.approx(9.0)
    assert [s.replica for s in fig.dpcourse_data["critical"] if s.replica is not None] == [1, 0]


def test_scaling_draws_the_ideal_line_and_accepts_traces():
    trace = Trace.from_dict({"spans": [{"step": "scatter", "start": 1.0, "end": 1.0125, "thread": "MainThread"}]})
    fig = scaling({1: [0.02, 0.03, 0.025], 2: [0.0125], 4: [trace, 0.0125]})
    speed = fig.axes[1]
    ideal = [line for line in speed.get_lines() if line.get_gid() == "ideal"]
    assert len(ideal) == 1 and list(ideal[0].get_ydata()) == [1, 2, 4]
    assert fig.dpcourse_data["speedup"] == pytest.approx([1.0, 2.0, 2.0])
    assert "ideal: n×" in [t.get_text() for t in speed.get_legend().get_texts()]


def test_measure_scaling_times_real_steps():
    measured = measure_scaling(examples.make_model(), examples.make_batch(8)[0], [1, 2], steps=2)
    assert sorted(measured) == [1, 2]
    assert all(len(times) == 2 and all(t > 0 for t in times) for times in measured.values())


# The gallery's scaling run times 24 steps of a wide model; 2 steps of it draw the same figure.
QUICK = {**FIGURES, "scaling": lambda: example_scaling(device_counts=(1, 2), steps=1)}


@pytest.mark.parametrize("name", list(QUICK))
def test_every_gallery_figure_renders_with_agg(name, stand_in_gpu):  # and runs as on a GPU machine
    open_before = plt.get_fignums()
    fig = QUICK[name]()
    assert isinstance(fig, Figure) and plt.get_fignums() == open_before  # nothing leaked into pyplot
    assert fig.get_figwidth() <= 9 and title(fig)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: an axes without labels"
    start = time.perf_counter()
    fig.savefig(io.BytesIO(), format="png")
    print(f"{name}: rendered in {(time.perf_counter() - start) * 1e3:.0f} ms")


def test_gradient_sum_names_the_parameters_when_one_is_unknown():
    with pytest.raises(ValueError, match=r"no parameter 'fc.weight'; pick one of \['0.weight'"):
        gradient_sum(param="fc.weight")


def test_a_figure_shows_itself_in_jupyter_without_pyplot():
    png = chunk_split(4, 2)._repr_png_()  # IPython's fallback when matplotlib-inline never registered Figure
    assert png.startswith(b"\x89PNG")


def test_widget_images_have_two_pixels_per_css_px_of_their_display_width():
    fig = chunk_split(4, 2)
    pixels = int.from_bytes(png_bytes(fig)[16:20], "big")  # the PNG header's width
    assert css_width(fig) == "900px" and pixels == 2 * 900


def test_the_course_png_encoder_gives_the_pixels_matplotlib_drew():
    fig = chunk_split(10, 4)
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=200)  # Pillow's encoder, the same canvas size
    ours = PIL.Image.open(io.BytesIO(png_bytes(fig)))
    assert ours.mode == "RGBA" and ours.size == (1800, fig.get_figheight() * 200)
    assert numpy.array_equal(numpy.asarray(ours), numpy.asarray(PIL.Image.open(drawn)))


def test_gather_view_with_features_shows_the_shapes_the_lesson_prints():
    fig = gather_view([3, 3, 3, 1], features=4)
    assert tuple(fig.dpcourse_data["gathered"].shape) == (10, 4)
    assert fig.dpcourse_data["owners"] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert "shape [10, 4]" in title(fig) and "replica 0\nshape [3, 4]" in texts(fig)


def test_every_gradient_sum_bar_ends_inside_the_frame():
    axes = gradient_sum(batch=10, n_devices=4).axes[0]
    low, high = axes.get_ylim()
    ends = [end for bar in axes.patches for end in (bar.get_y(), bar.get_y() + bar.get_height())]
    margin = 0.02 * (high - low)
    assert low + margin < min(ends) and max(ends) < high - margin


def test_replicate_map_leaves_out_the_settings_of_torchs_own_layers():
    devices = dpcourse.devices(2)
    relations = replicate_map(Tagged().to(devices[0]), devices).dpcourse_data["relations"]
    assert "tag" in relations and not {"fc.in_features", "bn.eps", "bn.momentum"} & set(relations)


def test_a_rendered_figure_is_freed_by_a_young_collection_and_the_collector_is_left_as_it_was():
    made = []

    def make() -> Figure:
        made.append(weakref.ref(fig := chunk_split(10, 4)))
        return fig

    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            png, width = rendered(make)
            assert gc.isenabled() == enabled
        finally:
            gc.enable()
        gc.collect(generation=0)  # a figure promoted while it was drawn would survive this
        assert made[-1]() is None
        assert png == png_bytes(chunk_split(10, 4)) and width == "900px"


def test_the_collector_comes_back_after_an_error():
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("drawing failed")
    assert gc.isenabled()
