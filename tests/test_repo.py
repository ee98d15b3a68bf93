"""The repository explains itself: code, configs and docs cite the project's own docs
(docs/*.md), never a document that is not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the outside spec cited by section (§5) or by constant name (GRIPPER_SLEEP); the
#: pattern is written in two pieces so this file does not match itself
CITATION = re.compile("SP" + r"EC (?:§|[A-Z][A-Z0-9_]+\b)")

SUFFIXES = {".py", ".yaml", ".yml", ".md", ".toml"}

#: directories that are not the project's own text: tools' caches and tests' recorded data
SKIP_DIRS = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
             ".hypothesis", "build", "data", "results", "corpus"}  # fmt: skip

#: files that still cite it, being rewritten by their owner; empty this set as they are fixed
_PENDING: set[str] = set()


def _project_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.suffix in SUFFIXES and path.is_file():
            files.append(path)
    return files


def _citing() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _project_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CITATION.search(line):
                found.setdefault(path.relative_to(ROOT).as_posix(), []).append(
                    f"{n}: {line.strip()}"
                )
    return found


def test_the_pattern_catches_both_forms() -> None:
    spec = "SP" + "EC"
    assert CITATION.search(f"defaults follow {spec} §9")
    assert CITATION.search(f"settle time ({spec} GRIPPER_SLEEP)")
    assert not CITATION.search(f"the {spec} file")  # an ordinary word is not a citation
    assert not CITATION.search("see docs/recorder.md")


def test_the_scan_sees_code_configs_and_docs() -> None:
    rels = {p.relative_to(ROOT).as_posix() for p in _project_files()}
    assert {"mecharm_runtime/config.py", "configs/runtime.yaml", "docs/recorder.md",
            "tests/test_repo.py"} <= rels  # fmt: skip
    assert not any("/corpus/" in r for r in rels)


def test_nothing_cites_a_document_outside_the_repository() -> None:
    found = _citing()
    new = {f: lines for f, lines in found.items() if f not in _PENDING}
    assert not new, "cite docs/*.md instead:\n" + "\n".join(
        f"{f}:{line}" for f, lines in sorted(new.items()) for line in lines
    )


def test_pending_list_is_kept_short() -> None:
    fixed = sorted(_PENDING - set(_citing()))
    assert not fixed, f"no longer cite it, remove from _PENDING: {fixed}"


def test_readme_names_every_config_key() -> None:
    """README.md is the operator's reference: a settings field it does not name is a key
    nobody can find. Nested models (the recorder's ``video``) are named as a group."""
    from daemon_pi.config import DaemonSettings
    from mecharm_runtime.config import RuntimeSettings
    from mecharm_runtime.lookup.settings import FkToolSettings
    from mecharm_tools.export.config import ExportSettings
    from mecharm_tools.replay.config import ReplaySettings
    from recorder.config import RecorderSettings

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = {
        cls.__name__: [k for k in cls.model_fields if not re.search(rf"\b{k}\b", readme)]
        for cls in (
            DaemonSettings,
            RecorderSettings,
            RuntimeSettings,
            FkToolSettings,
            ExportSettings,
            ReplaySettings,
        )
    }
    assert not any(missing.values()), f"README.md does not name these config keys: {missing}"
