"""Build the lesson notebooks from their sources in notebooks/src/, executed, with widget state saved.

    python notebooks/build.py                 # every lesson
    python notebooks/build.py 02_scatter      # one lesson (name without .py)

Each source is a Python file in "percent" format (the format jupytext and VS Code read):

    # %% [markdown]
    # # Title
    # Text...

    # %%
    x = dpcourse.scatter(batch, devices)

    # %% tags=["nbval-ignore-output"]
    timings()

A markdown cell's lines drop their leading "# ". Tags go to the cell's metadata, where nbval reads
"nbval-ignore-output"; a code cell tagged "solution" is shown collapsed (an exercise's answer, one click
away). Cells that open with a level-1 or level-2 heading start a new slide.
The notebook is then run top to bottom in a fresh kernel and saved with its outputs, which is what
nbval compares against (tests/nbval_sanitize.cfg masks what legitimately changes between runs).
"""

import json
import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent
CELL_MARKER = re.compile(r"^# %%(?P<markdown> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")


def parse_cells(source: str) -> list[nbformat.NotebookNode]:
    """Split a percent-format source into notebook cells."""
    cells = []
    for block in re.split(r"(?m)^(?=# %%)", source):
        if not block.strip():
            continue
        header, _, body = block.partition("\n")
        match = CELL_MARKER.match(header)
        if match is None:
            raise ValueError(f"Expected a '# %%' cell marker, got: {header!r}")
        body = body.strip("\n")
        metadata = {"tags": json.loads(match["tags"])} if match["tags"] else {}
        if match["markdown"]:
            text = "\n".join(re.sub(r"^# ?", "", line) for line in body.splitlines())
            metadata["slideshow"] = {"slide_type": "slide" if re.match(r"#{1,2} ", text) else "-"}
            cells.append(nbformat.v4.new_markdown_cell(text, metadata=metadata))
        else:
            metadata["slideshow"] = {"slide_type": "-"}
            if "solution" in metadata.get("tags", []):
                metadata["jupyter"] = {"source_hidden": True}
            cells.append(nbformat.v4.new_code_cell(body, metadata=metadata))
    return cells


def build(name: str, timeout: int = 300) -> Path:
    """Convert notebooks/src/<name>.py into notebooks/<name>.ipynb and execute it in place."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = parse_cells((HERE / "src" / f"{name}.py").read_text())
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    os.environ.setdefault("DPCOURSE_DEVICES", "cpu")  # stored outputs are CPU outputs (see notebooks/conftest.py)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", store_widget_state=True)
    client.execute(cwd=str(HERE))
    notebook.metadata["language_info"] = {"name": "python"}  # drop the exact version: it is not the lesson's
    target = HERE / f"{name}.ipynb"
    nbformat.write(notebook, target)
    return target


def main(names: list[str]) -> None:
    names = names or sorted(p.stem for p in (HERE / "src").glob("*.py"))
    for name in names:
        print(f"built {build(name).relative_to(HERE.parent)}")


if __name__ == "__main__":
    main(sys.argv[1:])
