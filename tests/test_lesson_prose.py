"""What the lessons' prose may say: rules a reviewer would otherwise have to re-check by hand after every edit.

* A number that depends on the machine (a time, a speed-up, a thread's cost) is never typed into a markdown
  cell: a code cell measures and prints it, and the sentence says what holds on any machine, or points at the
  printed value.
* The audit's claim ids ("001-8", "S000") are bookkeeping for docs/seed_coverage.md. Learners never see them:
  not in a lesson, not in a quiz. Lessons and quizzes cite the article by its title instead.
* The terms of the glossary (lesson 00, section "Glossary") are linked to it where a lesson first uses them.
"""

import re
import tomllib
from pathlib import Path

import pytest

from dpcourse import course

REPO = Path(__file__).parents[1]
SOURCES = [REPO / "notebooks" / "src" / f"{lesson.name}.py" for lesson in course.LESSONS]
QUIZZES = sorted((REPO / "dpcourse" / "quizzes").glob("*.toml"))
GLOSSARY_LESSON = "00_start_here"

# A time with its unit, a speed-up written as a multiple, or a vague amount of time ("a fraction of a
# millisecond"): each depends on the machine that ran it.
TIME = re.compile(r"\d(?:[\d.,]*\d)?\s*(?:[–-]\s*\d(?:[\d.,]*\d)?\s*)?"
                  r"(?:ns|µs|us|ms|s|secs?|seconds?|milliseconds?|microseconds?|minutes?)\b")
SPEEDUP = re.compile(r"\d+\.\d+\s?[×x]|\d\s?[×x](?!\s*[\d(])")  # "1.6×", "2x faster"; not "8 × 4"
VAGUE_TIME = re.compile(r"\b(?:fraction of a|a few|several)\s+(?:milli|micro)?seconds?\b", re.IGNORECASE)
# Numbers that are a lesson's own inputs, not measurements: (lesson, text, why).
ALLOWED = {
    ("08_myths", "50 ms"): "the nap the lesson's SlowReplica1 takes on purpose",
}

AUDIT_ID = re.compile(r"\bS?00[0-3]-\d+\b|\bS00[0-3]\b")

TERMS = {
    "GIL": re.compile(r"\bGIL\b"),
    "NCCL": re.compile(r"\bNCCL\b"),
    "P2P": re.compile(r"\bP2P\b|\bpeer-to-peer\b", re.IGNORECASE),
    "all-reduce": re.compile(r"\ball-reduc", re.IGNORECASE),
    "coalesced": re.compile(r"\bcoalesced\b", re.IGNORECASE),
    "version counter": re.compile(r"\bversion counters?\b", re.IGNORECASE),
    "intra-op threads": re.compile(r"\bintra-op\b", re.IGNORECASE),
    "cuDNN": re.compile(r"\bcuDNN\b"),
    "CUDA stream": re.compile(r"\bCUDA streams?\b"),
    "PCIe": re.compile(r"\bPCIe\b"),
    "NVLink": re.compile(r"\bNVLink\b"),
}
# Defined in the glossary and linked at first use in lessons 00-17; lessons 18-21 join the rule (move the term
# into TERMS) once their first uses link to the glossary.
TERMS_LINKED_UP_TO_17 = {
    "rank": re.compile(r"\branks?\b", re.IGNORECASE),
    "process group": re.compile(r"\bprocess[ -]groups?\b", re.IGNORECASE),
    "autocast": re.compile(r"\bautocast\b", re.IGNORECASE),
    "FSDP": re.compile(r"\bFSDP\b"),
    "ZeRO": re.compile(r"\bZeRO\b"),
}
# Part III's terms (lessons 18-21), defined in the glossary; they join the rule above once those lessons link them.
TERMS_OF_PART_III = ("shard", "ZeRO stage", "reshard", "device mesh", "DTensor")
# Part IV's terms (lessons 22-26): defined in the glossary and linked at their first use in those lessons.
TERMS_OF_PART_IV = {
    "straggler": re.compile(r"\bstragglers?\b", re.IGNORECASE),
    "comm hook": re.compile(r"\bcomm(?:unication)? hooks?\b", re.IGNORECASE),
    "desync": re.compile(r"\bdesync", re.IGNORECASE),
    "Flight Recorder": re.compile(r"\bFlight Recorder\b", re.IGNORECASE),
    "snapshot": re.compile(r"\bsnapshots?\b", re.IGNORECASE),
    "HSDP": re.compile(r"\bHSDP\b"),
    "bucket": re.compile(r"\bbuckets?\b", re.IGNORECASE),
    "α-β model": re.compile(r"α-β model"),
    "InfiniBand": re.compile(r"\bInfiniBand\b"),
}
GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\((?:00_start_here\.ipynb)?#Glossary\)")


def markdown_cells(path: Path) -> list[str]:
    """The markdown cells of a percent-format lesson source, with their leading '# ' removed."""
    cells = []
    for block in re.split(r"(?m)^(?=# %%)", path.read_text(encoding="utf-8")):
        header, _, body = block.partition("\n")
        if header.startswith("# %% [markdown]"):
            cells.append("\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines()))
    return cells


def prose(text: str) -> str:
    """``text`` without fenced code blocks and `code spans`: what a learner reads as sentences."""
    text = re.sub(r"(?s)```.*?```", " ", text)
    return re.sub(r"`[^`\n]*`", " ", text)


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_no_machine_dependent_number_is_typed_into_prose(path: Path) -> None:
    found = []
    for cell in map(prose, markdown_cells(path)):
        for pattern in (TIME, SPEEDUP, VAGUE_TIME):
            found += [m.group(0) for m in pattern.finditer(cell) if (path.stem, m.group(0)) not in ALLOWED]
    assert not found, (
        f"{path.name} types machine-dependent numbers into markdown: {found}. Print them from the cell that "
        "measures them, and write what holds on any machine (or add a lesson input to ALLOWED, with why)."
    )


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_lessons_show_no_audit_ids(path: Path) -> None:
    found = AUDIT_ID.findall(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} shows audit claim ids {found}; cite the article by its title instead"


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


@pytest.mark.parametrize("path", QUIZZES, ids=[p.stem for p in QUIZZES])
def test_quizzes_show_no_audit_ids(path: Path) -> None:
    questions = tomllib.loads(path.read_text(encoding="utf-8"))["question"]
    found = {q["id"]: ids for q in questions if (ids := AUDIT_ID.findall(" ".join(_strings(q))))}
    assert not found, f"{path.name}: audit claim ids in {found}; cite 'article: <title>' instead"


def test_the_glossary_defines_every_term() -> None:
    cells = markdown_cells(REPO / "notebooks" / "src" / f"{GLOSSARY_LESSON}.py")
    glossary = next((cell for cell in cells if cell.startswith("## Glossary")), None)
    assert glossary is not None, f"{GLOSSARY_LESSON} needs a '## Glossary' section"
    defined = set(re.findall(r"^\| \*\*(.+?)\*\* \|", glossary, flags=re.MULTILINE))
    expected = set(TERMS) | set(TERMS_LINKED_UP_TO_17) | set(TERMS_OF_PART_III) | set(TERMS_OF_PART_IV)
    assert defined == expected, f"the glossary defines {sorted(defined)}, the rule expects {sorted(expected)}"


def _first_use_unlinked(text: str, term: re.Pattern) -> str | None:
    """The line where ``term`` first appears outside a heading, if that first use is not a glossary link."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    body = prose("\n".join(lines))
    first = term.search(body)
    if first is None:
        return None
    linked = any(link.start() <= first.start() < link.end() for link in GLOSSARY_LINK.finditer(body))
    return None if linked else body[body.rfind("\n", 0, first.start()) + 1 : body.find("\n", first.end())]


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_glossary_terms_are_linked_at_first_use(path: Path) -> None:
    cells = markdown_cells(path)
    if path.stem == GLOSSARY_LESSON:
        cells = [cell for cell in cells if not cell.startswith("## Glossary")]
    text = "\n".join(cells)
    terms = TERMS | (TERMS_LINKED_UP_TO_17 if path.stem < "18" else {})
    terms |= TERMS_OF_PART_IV if path.stem >= "22" else {}
    unlinked = {name: line for name, term in terms.items() if (line := _first_use_unlinked(text, term))}
    link = f"[term]({GLOSSARY_LESSON}.ipynb#Glossary)"
    assert not unlinked, f"{path.name}: link each term's first use to the glossary, {link}: {unlinked}"
