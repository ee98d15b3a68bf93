"""Replay fixtures: the default FK table (shared with tests/runtime: same directory and lock)
and the corpus of simulator traces."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
ARC_PICK = REPO / "configs" / "poses" / "approach_pick.json"
ARC_PLACE = REPO / "configs" / "poses" / "approach_place.json"


def corpus_traces() -> list[Path]:
    return sorted(CORPUS.glob("*.trace.jsonl"))


@pytest.fixture(scope="session")
def fk_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default FK table, built once for all xdist workers (file lock) and reused.

    The directory is keyed by the source of the code that builds the table, so a table
    left by an older build in the shared temp dir is never mistaken for today's default.
    """
    import hashlib

    import mecharm_common.kinematics
    import mecharm_runtime.lookup.build
    from mecharm_runtime.lookup import ensure_table, load_table

    h = hashlib.sha256()
    for mod in (mecharm_runtime.lookup.build, mecharm_common.kinematics):
        h.update(Path(str(mod.__file__)).read_bytes())
    shared = tmp_path_factory.getbasetemp().parent / f"replay_fk_{h.hexdigest()[:12]}"
    shared.mkdir(exist_ok=True)
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_table(ensure_table(shared))  # builds the table and its cache once
        fcntl.flock(lock, fcntl.LOCK_UN)
    return shared


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
