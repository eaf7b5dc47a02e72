"""Execute every notebook in `notebooks/` top to bottom; check none is committed with outputs.

Each notebook runs in a fresh `python3` kernel (the kernelspec ipykernel provides for the running
interpreter) with its own folder as the working directory; a cell that raises, or that runs longer
than `CELL_TIMEOUT` seconds, fails the test. Committed notebooks carry no outputs and no execution
counts, so their diffs show only what a person wrote. Skipped where nbclient is not installed.
The `notebooks` extra brings JupyterLab, which the README's quick start opens them with.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 120
"""Seconds one cell may run before the test fails."""


def _read(path: Path) -> nbformat.NotebookNode:
    """The notebook at `path`, validated against the nbformat schema."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    return notebook


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    notebook = _read(path)
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs or execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebook_runs_without_error(path: Path) -> None:
    notebook = _read(path)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    errors = [
        (index, output.ename, output.evalue)
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors, f"{path.name}: cells raised {errors}"


def test_the_notebooks_extra_brings_jupyterlab() -> None:
    """The README's `jupyter lab notebooks/` works where the `notebooks` extra is installed:
    JupyterLab's server application starts far enough to print its version."""
    import subprocess
    import sys

    pytest.importorskip("jupyterlab")
    run = subprocess.run(
        [sys.executable, "-m", "jupyterlab", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.strip().split(".")[0]) >= 4
