"""Replay fixtures: the default FK table (shared with tests/runtime: same directory and lock)
and the corpus of simulator traces."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
ARC_PICK = REPO / "configs" / "poses" / "approach_pick.json"
ARC_PLACE = REPO / "configs" / "poses" / "approach_place.json"


def corpus_traces() -> list[Path]:
    return sorted(CORPUS.glob("*.trace.jsonl"))


@pytest.fixture
def replay_args(fk_data_dir: Path) -> list[str]:
    """Flags every CLI test passes: the test table and the repo's arcs (cwd-independent)."""
    return [
        "--data-dir",
        str(fk_data_dir),
        "--arc-pick",
        str(ARC_PICK),
        "--arc-place",
        str(ARC_PLACE),
    ]
