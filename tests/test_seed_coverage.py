"""docs/seed_coverage.md assigns every claim of the seed audit to one section of the fixed course outline.

These tests keep that table in step with the audit (when shared/ is checked out next to the repository), with
the outline below, and with the notebooks as they get written: a section the table names must exist, as a
`## ` heading, in the notebook's source and in the built notebook.
"""

import functools
import json
import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
COVERAGE = REPO / "docs" / "seed_coverage.md"
NOTEBOOKS = REPO / "notebooks"
AUDIT = Path(__file__).parents[2] / "shared" / "reference" / "seed_claims_audit.md"

# The course outline: notebook -> its `## ` sections, in order. Fixed; the notebooks must use these titles.
OUTLINE: dict[str, list[str]] = {
    "00_start_here": [
        "What DataParallel is for",
        "The four steps",
        "Your devices",
        "How the course works",
        "Your progress",
    ],
    "01_one_device": [
        "The running example",
        "One step on one device",
        "The oracle",
        "Which devices do you have?",
    ],
    "02_scatter": [
        "Splitting a batch: the torch.chunk rule",
        "How many replicas run",
        "Nested inputs: tuples, lists, dicts, namedtuples",
        "Non-tensors are shared by reference",
        "Keyword arguments and padding",
        "Scatter in backward",
    ],
    "03_replicate": [
        "A replica is a shallow copy",
        "A replica's parameters",
        "Which replicas share the original's tensors",
        "Plain attributes changed in forward",
        "BatchNorm under DataParallel",
        "Replicated on every forward",
    ],
    "04_parallel_apply": [
        "Where the replicas run",
        "Grad mode and autocast in threads",
        "When a replica fails",
        "Threads and the GIL",
    ],
    "05_gather": [
        "Combining the outputs",
        "Dicts, tuples and namedtuples",
        "A 0-d loss from every replica",
        "Where the output lands",
    ],
    "06_backward": [
        "Gather's backward splits the gradient",
        "Broadcast's backward",
        "The sum and the full-batch gradient",
        "The mean-of-means pitfall",
        "Double backward",
    ],
    "07_end_to_end": [
        "A training loop",
        "Checkpoints",
        "Where the model lives",
        "output_device",
        "Batches that chunk unluckily",
        "RNNs and packed sequences",
    ],
    "08_myths": [
        "Myths, run and corrected",
        "The seeds' code, run and corrected",
    ],
    "09_performance": [
        "Where the time goes",
        "What replication costs",
        "Threads and the GIL",
        "Gather on device 0",
        "Small batch, big model",
        "Scaling curves",
    ],
    "10_ddp_bridge": [
        "From threads to processes",
        "How the ranks' gradients combine",
        "Replicated once",
        "Buffers broadcast from rank 0",
        "Bucketed all-reduce",
        "Timelines side by side",
        "Cost model",
        "Going further: several machines",
    ],
    "11_review": [
        "Review quiz",
        "Your progress",
    ],
}

COLUMNS = ["claim", "seed", "claim, in short", "verdict", "notebook", "section", "how the course shows it"]
VERDICTS = {"TRUE", "FALSE", "PARTLY", "VERSION-DEPENDENT"}
CLAIM_ID = re.compile(r"\d{3}-\d+")
EXPECTED_ROWS = 85
MAX_WORDS = {"claim, in short": 15, "how the course shows it": 20}


def _cells(line: str) -> list[str]:
    """The cells of one markdown table row, stripped, with code backticks around a whole cell removed."""
    cells = [cell.strip() for cell in line.strip().removeprefix("|").removesuffix("|").split("|")]
    return [cell[1:-1] if len(cell) > 1 and cell[0] == cell[-1] == "`" else cell for cell in cells]


def _id_key(claim: str) -> tuple[int, int]:
    seed, number = claim.split("-")
    return int(seed), int(number)


@functools.cache
def _coverage_rows() -> list[dict[str, str]]:
    """The rows of the one table in docs/seed_coverage.md whose header is COLUMNS."""
    lines = COVERAGE.read_text(encoding="utf-8").splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("|") and _cells(line) == COLUMNS]
    assert len(headers) == 1, f"expected one table with columns {COLUMNS} in {COVERAGE}, found {len(headers)}"
    rows = []
    for line in lines[headers[0] + 2 :]:  # skip the header and its |---| separator
        if not line.startswith("|"):
            break
        cells = _cells(line)
        assert len(cells) == len(COLUMNS), f"row has {len(cells)} cells, not {len(COLUMNS)}: {line}"
        rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def _rows_of(notebook: str) -> list[dict[str, str]]:
    return [row for row in _coverage_rows() if row["notebook"] == notebook]


def _audit_verdicts() -> dict[str, str]:
    """claim id -> verdict, from the audit's tables in sections 1-4 (rows that open with `| NNN-N |`)."""
    verdicts: dict[str, str] = {}
    for line in AUDIT.read_text(encoding="utf-8").splitlines():
        cells = _cells(line) if line.startswith("|") else []
        if not cells or not CLAIM_ID.fullmatch(cells[0]):
            continue
        claim, verdict = cells[0], cells[2]
        assert verdict in VERDICTS, f"audit row {claim}: cannot read its verdict (third cell is {verdict!r})"
        assert claim not in verdicts, f"audit lists {claim} twice"
        verdicts[claim] = verdict
    assert verdicts, f"no claim rows found in {AUDIT}"
    return verdicts


@pytest.fixture(scope="module")
def audit() -> dict[str, str]:
    if not AUDIT.is_file():
        pytest.skip(f"the seed audit is not checked out here ({AUDIT}): a clone without shared/")
    return _audit_verdicts()


def test_table_has_one_row_per_claim_in_id_order() -> None:
    rows = _coverage_rows()
    ids = [row["claim"] for row in rows]
    assert len(rows) == EXPECTED_ROWS
    assert all(CLAIM_ID.fullmatch(claim) for claim in ids), [c for c in ids if not CLAIM_ID.fullmatch(c)]
    duplicates = sorted(claim for claim, n in Counter(ids).items() if n > 1)
    assert not duplicates, f"claims listed more than once: {duplicates}"
    assert ids == sorted(ids, key=_id_key), "rows must be in claim id order"


def test_seed_column_matches_the_claim_id() -> None:
    rows = _coverage_rows()
    wrong = [(row["claim"], row["seed"]) for row in rows if row["seed"] != "S" + row["claim"].split("-")[0]]
    assert not wrong


def test_verdicts_use_the_audit_legend() -> None:
    rows = _coverage_rows()
    wrong = [(row["claim"], row["verdict"]) for row in rows if row["verdict"] not in VERDICTS]
    assert not wrong


def test_every_row_names_a_section_of_the_outline() -> None:
    rows = _coverage_rows()
    wrong = [
        (row["claim"], row["notebook"], row["section"])
        for row in rows
        if row["section"] not in OUTLINE.get(row["notebook"], [])
    ]
    assert not wrong, f"notebook/section pairs not in the course outline: {wrong}"


@pytest.mark.parametrize("column", sorted(MAX_WORDS))
def test_short_texts_stay_short(column: str) -> None:
    rows = _coverage_rows()
    too_long = [
        (row["claim"], len(row[column].split())) for row in rows if len(row[column].split()) > MAX_WORDS[column]
    ]
    empty = [row["claim"] for row in rows if not row[column]]
    assert not empty, f"{column!r} is empty for {empty}"
    assert not too_long, f"{column!r} is over {MAX_WORDS[column]} words for {too_long}"


def test_per_notebook_checklist_matches_the_table() -> None:
    text = COVERAGE.read_text(encoding="utf-8")
    assert "\n## Per notebook\n" in text, "docs/seed_coverage.md needs a '## Per notebook' section"
    section = text.split("\n## Per notebook\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `(\w+)` \((\d+)\): (.*)$", section, flags=re.MULTILINE)
    assert [notebook for notebook, _, _ in listed] == list(OUTLINE), "list every notebook once, in course order"
    for notebook, count, rest in listed:
        expected = [row["claim"] for row in _rows_of(notebook)]
        ids = [] if rest.startswith("none") else [claim.strip() for claim in rest.split(",")]
        assert ids == expected, f"{notebook}: checklist {ids} but the table gives {expected}"
        assert int(count) == len(expected), f"{notebook}: count {count} but {len(expected)} claims"


def test_every_audited_claim_is_covered_once(audit: dict[str, str]) -> None:
    rows = _coverage_rows()
    counts = Counter(row["claim"] for row in rows)
    missing = sorted((claim for claim in audit if counts[claim] == 0), key=_id_key)
    repeated = sorted(claim for claim in audit if counts[claim] > 1)
    unknown = sorted(claim for claim in counts if claim not in audit)
    assert not missing, f"audited claims with no row: {missing}"
    assert not repeated, f"audited claims with several rows: {repeated}"
    assert not unknown, f"rows for claims the audit does not have: {unknown}"


def test_verdicts_match_the_audit(audit: dict[str, str]) -> None:
    rows = _coverage_rows()
    wrong = [(row["claim"], row["verdict"], audit[row["claim"]]) for row in rows if row["claim"] in audit]
    wrong = [(claim, ours, theirs) for claim, ours, theirs in wrong if ours != theirs]
    assert not wrong, f"(claim, table verdict, audit verdict): {wrong}"


def _notebook_headings(path: Path) -> set[str]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    headings = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        headings.update(line.rstrip() for line in source.splitlines() if line.startswith("## "))
    return headings


def _source_headings(path: Path) -> set[str]:
    """`## ` headings of a percent-format source, where markdown lines carry a leading '# '."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.removeprefix("# ").rstrip() for line in lines if line.startswith("# ## ")}


@pytest.mark.parametrize("notebook", list(OUTLINE))
def test_built_notebook_has_the_sections_it_must_cover(notebook: str) -> None:
    path = NOTEBOOKS / f"{notebook}.ipynb"
    if not path.exists():
        pytest.skip(f"{path.relative_to(REPO)} not written yet")
    headings = _notebook_headings(path)
    missing = sorted({row["section"] for row in _rows_of(notebook)} - {h[3:] for h in headings})
    assert not missing, f"{path.relative_to(REPO)} has no markdown '## ' heading for: {missing}"


@pytest.mark.parametrize("notebook", list(OUTLINE))
def test_notebook_source_has_the_sections_it_must_cover(notebook: str) -> None:
    path = NOTEBOOKS / "src" / f"{notebook}.py"
    if not path.exists():
        pytest.skip(f"{path.relative_to(REPO)} not written yet")
    headings = _source_headings(path)
    missing = sorted({row["section"] for row in _rows_of(notebook)} - {h[3:] for h in headings})
    assert not missing, f"{path.relative_to(REPO)} has no '# ## ' heading for: {missing}"


def test_every_notebook_of_the_outline_is_built() -> None:
    if not any(NOTEBOOKS.glob("*.ipynb")):
        pytest.skip("notebooks not built yet")
    missing = [name for name in OUTLINE if not (NOTEBOOKS / f"{name}.ipynb").exists()]
    assert not missing, f"notebooks of the outline with no built .ipynb: {missing}"
