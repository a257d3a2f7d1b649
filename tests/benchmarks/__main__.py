"""``python -m tests.benchmarks [--quick] [--json out.json] [--plots DIR] [--only cpu gpu course]``.

Prints the tables and writes every number (with the raw CPU samples) as JSON. ``--quick`` uses small
models and few rounds, so that CI can check that the whole benchmark runs; its numbers mean little.
"""

import argparse
import time
from pathlib import Path

import matplotlib

from . import report

SECTIONS = ("cpu", "gpu", "course")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (for CI)")
    parser.add_argument("--json", type=Path, default=Path("out/bench.json"), help="where to write the results")
    parser.add_argument("--plots", type=Path, help="write the CPU scaling figures into this folder")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="run these parts only")
    parser.add_argument("--rounds", type=int, help="measured rounds per comparison (default 40, quick 5)")
    parser.add_argument("--warmup", type=int, help="unmeasured rounds first (default 5, quick 2)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    matplotlib.use("Agg")  # before anything imports pyplot: figures are written to files, never shown
    from . import course, cpu, gpu, plots  # after the backend is chosen: widgets may import pyplot

    rounds = args.rounds or (5 if args.quick else 40)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    started = time.perf_counter()
    results: dict = {"machine": report.machine(), "quick": args.quick, "rounds": rounds, "warmup": warmup}
    if "cpu" in args.only:
        results["cpu"] = cpu.run(args.quick, rounds, warmup)
    if "gpu" in args.only:
        results["gpu"] = gpu.run(args.quick, rounds, warmup)
    if "course" in args.only:
        results["course"] = course.run(args.quick)
    results["targets"] = report.targets(results)
    results["seconds"] = time.perf_counter() - started
    report.print_report(results)
    report.write_json(args.json, results)
    print(f"\nwrote {args.json}")
    if args.plots and "cpu" in results:
        for path in plots.scaling_plots(results, args.plots):
            print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
