"""Explorers: ipywidgets that run the real dpcourse primitives and show what they did, one control at a time.

* ``StepThrough``: one DataParallel training step, stage by stage (Back / Next / Reset, devices, batch);
* ``ChunkExplorer``: how scatter cuts a batch (batch, devices, dim), and which devices sit idle;
* ``GradientSum``: which loss reduction keeps the gradient equal to one device's (reduction, batch, devices);
* ``TraceExplorer``: trace a few training steps of a small, large or many-layered model and see where time goes;
* ``CostModelCalculator``: machine, batch, model size, link bandwidth -> DP's and DDP's predicted speed-ups;
* ``MemoryCalculator``: model shape, batch, optimizer, devices -> bytes per device for one device, DP and DDP.

One pattern for all of them: an explorer *is* an ``ipywidgets.VBox`` (their base class is ``Explorer``, in
``dpcourse/widgets/explorer.py``), so a notebook cell that ends with ``StepThrough()`` shows it. Its controls are
public attributes (``next_button``, ``batch_slider``, ``reduction_toggle``, ``run_button``, ...;
``explorer.controls`` lists them by name), so a plain pytest drives them with ``.click()`` and ``.value = ...``
without a kernel, and everything it shows lives in widget values a test can read: ``HTML`` text and the figure as
PNG bytes in ``explorer.image``. Errors raised inside a callback appear in red in ``explorer.message``.
``repr(explorer)`` is just the class name and the control values (``ChunkExplorer(batch=10, devices=4, dim=0)``),
stable for nbval, and nothing is printed. ``measure_all()`` in ``tests/benchmarks/widget_latency.py`` times every
control of every explorer. In a kernel, ``GradientSum``, ``StepThrough`` and ``MemoryCalculator`` look ahead
(``dpcourse/ui/look_ahead.py``): after a change they prepare the learner's likely next settings.
"""

from .chunks import ChunkExplorer
from .costmodel import CostModelCalculator
from .gradients import GradientSum
from .memory import MemoryCalculator
from .step_through import StepThrough
from .trace_explorer import TraceExplorer

__all__ = ["ChunkExplorer", "CostModelCalculator", "GradientSum", "MemoryCalculator", "StepThrough", "TraceExplorer"]
