"""How long one training step takes under DataParallel, DDP and the ZeRO stages, term by term, and when DP stops
paying off.

``formula(kind)`` gives the model as text for ``kind`` in ``KINDS``, the course's one list of kinds
(``training_setup.KINDS``: ``"one device"``, ``"DataParallel"``, ``"DDP"``, ``"ZeRO-1"`` to ``"ZeRO-3"``; FSDP is
ZeRO-3). ``step_time(kind, n, workload, hardware)`` returns every term separately (a widget can stack them);
``predict_speedup(preset)`` gives the speed-up over one device for n = 1..8. ``PRESETS`` are rough numbers for
common machines, each with its sources (``Hardware.sources``); ``calibrate()`` measures *this* machine's terms from
DataParallel steps on CPU devices. ``dpcourse.viz.plot_speedup`` draws the curves. The GPU presets come from
published specifications and assumed orders of magnitude, not from a GPU measurement: what they give is a
prediction of the cost model. ``fit_gpu`` fits one real GPU's terms from the steps recorded on it
(``dpcourse.recording``). ``zero_memory(kind, params, n)`` predicts the bytes per rank of a large model under
DDP and the ZeRO stages.

The modules: ``model`` (``Workload``, ``Hardware``, the formulas, ``step_time``), ``presets`` (``PRESETS``,
ResNet-50, ``EXAMPLE``), ``flops`` (a step's FLOPs, counted by torch, and their formula), ``speedup``
(``predict_speedup``), ``zero`` (``zero_memory``), ``measure`` (timing DP steps on this machine) and ``fit``
(``calibrate``, ``fit_gpu``).

A teaching model: each term is one line of the formula, not a simulation. It ignores memory limits, kernel
fusion, uneven chunks and GPU scheduling. Its job is to show which term grows with what.

How FLOPs are counted, here and everywhere in the course: by torch's ``FlopCounterMode``
(``torch.utils.flop_counter``), on the meta device (``flops.counted``), or by a formula that
tests/test_costmodel.py holds against it. A multiply-add is 2 FLOPs (as GPU datasheets count them, so C and
F agree); only matrix products and convolutions count. Backward runs two products for each forward one, the
gradient of the layer's weights and of its input, except for the first layer: its input, the data, needs no
gradient. So a training step's FLOPs are 3 times the forward's less the first layer's forward: an MLP's C is
2 * (3 * sum(w_i) - w_1) for layers of w_i weights (``flops.mlp``), below 6P; ResNet-50's is
``resnet50_flops()``.
"""

from . import alpha_beta, flops
from .fit import Calibration, calibrate, fit_gpu
from .measure import Setup, measure
from .model import DDP_BUCKET_BYTES, FORMULAS, KINDS, SYMBOLS, Hardware, Workload, formula, step_time
from .presets import EXAMPLE, PRESETS, resnet50_flops, resnet50_layers, resnet50_modules, resnet50_params
from .speedup import Speedup, predict_speedup
from .zero import ZERO_MEMORY, zero_memory

__all__ = [
    "DDP_BUCKET_BYTES",
    "EXAMPLE",
    "FORMULAS",
    "KINDS",
    "PRESETS",
    "SYMBOLS",
    "ZERO_MEMORY",
    "alpha_beta",
    "Calibration",
    "Hardware",
    "Setup",
    "Speedup",
    "Workload",
    "calibrate",
    "fit_gpu",
    "flops",
    "formula",
    "measure",
    "predict_speedup",
    "resnet50_flops",
    "resnet50_layers",
    "resnet50_modules",
    "resnet50_params",
    "step_time",
    "zero_memory",
]
