"""results/<gpu>/crosscheck.json: what ``python -m steps.crosscheck --save`` writes
(steps/commands/crosscheck.py) and the README's cross-check block reads (steps/report/table.py)."""

from __future__ import annotations

import json
from pathlib import Path

JSON_NAME = "crosscheck.json"


def load(gpu_dir: Path) -> dict | None:
    """results/<gpu>/crosscheck.json, or None when absent."""
    path = Path(gpu_dir) / JSON_NAME
    return json.loads(path.read_text()) if path.exists() else None
