"""Benchmarks of dpcourse: ``python -m dpcourse.bench --help``; docs/benchmarks.md holds the latest results.

``cpu`` times DataParallel on CPU devices, ``gpu`` compares it with torch.nn.DataParallel on GPUs,
``course`` times the notebooks and widgets; ``workloads`` and ``timing`` are what they share; ``report``
prints the tables and writes JSON, ``plots`` draws the CPU scaling figure.
"""
