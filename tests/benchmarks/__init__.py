"""Benchmarks of dpcourse: ``python -m tests.benchmarks --help``; docs/benchmarks.md holds the latest results.

``cpu`` times DataParallel on CPU devices, ``gpu`` compares it with torch.nn.DataParallel on GPUs,
``course`` times the notebooks and widgets; ``core_vs_torch`` compares dpcourse with torch's own DataParallel code
run on CPU devices by ``torch_on_cpu``; ``models`` is the models and the training step that cpu, gpu and
core_vs_torch share (from ``dpcourse.models_to_time`` and ``dpcourse.timing``); ``report`` prints the tables and writes
JSON, ``plots`` draws the CPU scaling figure.
"""
