"""The mutation report: per exercise the mutants killed, survived and equivalent, the score, and the survivors.

``docs/benchmark_results/mutation.json`` holds one entry per exercise; a run of some lessons replaces their
entries and keeps the others, and the totals are summed again. The score is killed / (total - equivalent), where
a mutant stopped by the time limit counts as killed; an exercise meets the goal at 95 %.
"""

import datetime
import json
import subprocess
import tomllib
from pathlib import Path

import torch

from .exercises import ROOT

REPORT = ROOT / "docs" / "benchmark_results" / "mutation.json"
EQUIVALENT = Path(__file__).with_name("equivalent.toml")
GOAL = 0.95


def equivalent() -> dict[str, dict[str, str]]:
    """The reviewed equivalent mutants: exercise -> {mutant id: why no check can tell it from the solution}."""
    return tomllib.loads(EQUIVALENT.read_text())


def entry(lesson: str, total: int, killed: int, timeouts: int, survivors: list[dict], equivalents: int,
          stale: list[str], reference_seconds: float, limit: float, quick: bool) -> dict:
    """One exercise's entry. ``stale``: mutants listed as equivalent that the check killed (to unlist)."""
    judged = total - equivalents
    score = round(killed / judged, 4) if judged else 1.0
    return {"lesson": lesson, "mutants": total, "killed": killed, "timeouts": timeouts, "survived": len(survivors),
            "equivalent": equivalents, "score": score, "goal_met": score >= GOAL,
            "reference_seconds": round(reference_seconds, 2), "limit_seconds": round(limit), "quick": quick,
            "survivors": survivors, "listed_equivalent_but_killed": stale}


def write(path: Path, entries: dict[str, dict], wall_seconds: float, command: str) -> dict:
    """Merge ``entries`` into the report at ``path`` (new exercises replace old ones) and write it."""
    old = json.loads(path.read_text())["exercises"] if path.exists() else {}
    merged = {**old, **entries}
    report = {
        "command": command,
        "torch": torch.__version__,
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds_of_this_run": round(wall_seconds),
        "goal": GOAL,
        "totals": totals(merged),
        "exercises": merged,
    }
    path.write_text(json.dumps(report, indent=1) + "\n")
    return report


def totals(entries: dict[str, dict]) -> dict:
    """Mutants, killed, survived and equivalent summed over ``entries``, the overall score and the goal's count."""
    summed = {key: sum(e[key] for e in entries.values()) for key in ("mutants", "killed", "survived", "equivalent")}
    judged = summed["mutants"] - summed["equivalent"]
    summed["score"] = round(summed["killed"] / judged, 4) if judged else 1.0
    summed["exercises"] = len(entries)
    summed["exercises_meeting_goal"] = sum(e["goal_met"] for e in entries.values())
    return summed


def table(entries: dict[str, dict]) -> str:
    """A plain-text table: one row per exercise, then each survivor's diff under its exercise."""
    lines = [f"{'exercise':28} {'lesson':20} {'mutants':>7} {'killed':>6} {'equiv':>5} {'surv':>4} {'score':>6}"]
    for name, e in entries.items():
        mark = "" if e["goal_met"] else "  < goal"
        lines.append(f"{name:28} {e['lesson']:20} {e['mutants']:7} {e['killed']:6} {e['equivalent']:5} "
                     f"{e['survived']:4} {e['score']:6.0%}{mark}")
        lines.extend(f"    survives: {s['id']}" for s in e["survivors"])
    return "\n".join(lines)


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "dpcourse", "notebooks/src"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return result.stdout.strip() + ("+uncommitted changes" if dirty else "")
