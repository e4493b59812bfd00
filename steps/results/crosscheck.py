"""results/<gpu>/crosscheck.json: what ``python -m steps.crosscheck --save`` writes
(steps/commands/crosscheck.py) and the README's cross-check block reads (steps/report/table.py)."""

from __future__ import annotations

from pathlib import Path

from . import load_document

JSON_NAME = "crosscheck.json"


def load(gpu_dir: Path) -> dict | None:
    """results/<gpu>/crosscheck.json, or None when absent."""
    return load_document(gpu_dir, JSON_NAME)
