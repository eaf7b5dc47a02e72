"""What every benchmark leaves behind: a JSON record of its points and their Markdown table.

``write_record(output, "matmul", points, table(points), repeats=30)`` writes
``<output>/matmul.json`` (the GPU's name, the torch version, the given fields, then every point
as a dict) and ``<output>/matmul.md`` (the table). Benchmarks call it after each measured
shape, so that a run cut short keeps what it measured.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch


def write_record(
    output: Path, stem: str, points: Sequence[Any], table: str, **fields: object
) -> None:
    """Write ``<stem>.json`` and ``<stem>.md`` of `points` (dataclasses) into `output`
    (created when missing); `fields` go into the JSON record before the points."""
    output.mkdir(parents=True, exist_ok=True)
    record = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        **fields,
        "points": [asdict(point) for point in points],
    }
    (output / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
    (output / f"{stem}.md").write_text(table)
