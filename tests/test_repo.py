"""The repository explains itself: code, configs and docs cite the project's own docs
(docs/*.md), never a document that is not in the repository."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the outside spec cited by section (§5) or by constant name (GRIPPER_SLEEP); the
#: pattern is written in two pieces so this file does not match itself
CITATION = re.compile("SP" + r"EC (?:§|[A-Z][A-Z0-9_]+\b)")

SUFFIXES = {".py", ".yaml", ".yml", ".md", ".toml"}

#: directories that are not the project's own text: tools' caches and tests' recorded data
SKIP_DIRS = {".git", ".venv", ".lerobot-venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
             ".hypothesis", "build", "data", "results", "corpus"}  # fmt: skip

#: files that still cite it, being rewritten by their owner; empty this set as they are fixed
_PENDING: set[str] = set()


@functools.cache
def _project_files() -> list[Path]:
    """The project's own text files; the skipped folders are never entered (the venvs hold
    tens of thousands of files: walking them was most of this file's time)."""
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        files += [Path(top, n) for n in sorted(names) if Path(n).suffix in SUFFIXES]
    return [p for p in files if p.is_file()]


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
    assert {"mecharm/runtime/config.py", "configs/runtime.yaml", "docs/recorder.md",
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


def test_the_settings_reference_is_current_and_names_every_key() -> None:
    """docs/settings.md is the operator's reference of every key (the README links it): it is
    generated from the models, so a key added, removed or re-documented without running the
    generator fails here. Nested groups (the daemon's ``sim``, the recorder's ``video``) are
    listed key by key."""
    from pydantic import BaseModel

    from mecharm_dev import settings_doc

    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == settings_doc.render(), (
        "docs/settings.md is stale: python -m mecharm_dev.settings_doc"
    )
    assert settings_doc.main(["--check"]) == 0

    def keys(cls: type[BaseModel], prefix: str = "") -> list[str]:
        out = []
        for name, f in cls.model_fields.items():
            ann = f.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                out += keys(ann, f"{prefix}{name}.")
            out.append(f"{prefix}{name}")
        return out

    missing = {
        path: [k for k in keys(settings_doc._load(path)) if f"| `{k}` |" not in page]
        for _title, path, _config, _command in settings_doc.MODELS
    }
    assert not any(missing.values()), missing
    assert "(docs/settings.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_stale_settings_reference_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mecharm_dev import settings_doc

    stale = tmp_path / "settings.md"
    stale.write_text(settings_doc.render().replace("`tol_home`", "`tol_homing`"), encoding="utf-8")
    monkeypatch.setattr(settings_doc, "PAGE", stale)
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.main([]) == 0 and settings_doc.main(["--check"]) == 0


#: a rig data root or a daemon token spelled in the operator's texts (absolute or from ~)
_ROOT_PATH = re.compile(r"/Volumes/[\w.-]+|/mnt/[\w.-]+|/media/[\w.-]+")
_TOKEN_PATH = re.compile(r"[\w~$/{}.-]*(?:mecharm_token|\.mecharm/token|mecharm/token|\.token)\b")


#: the rig's data root as the README and docs show it (set once as MECHARM_DATA_ROOT on the rig;
#: the code has no machine path: mecharm.common.layout.default_data_root)
RIG_EXAMPLE_ROOT = "/Volumes/RigSSD"


def _operator_texts() -> list[Path]:
    """README, docs and the shipped settings files (their comments show paths too)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "mecharm.common" / "defaults").glob("*.yaml"))]  # fmt: skip


def test_one_data_root_and_one_token_path() -> None:
    """The README's rig examples, docs and config comments name one data root
    (the rig's, set as MECHARM_DATA_ROOT) and one daemon token file (beside the recorder key): two spellings of either would have
    a runtime and a recorder, or a daemon and a runtime, disagree (docs/setup.md)."""
    from mecharm.common.keyfile import default_daemon_token_file

    roots: dict[str, set[str]] = {}
    tokens: dict[str, set[str]] = {}
    for path in _operator_texts():
        text = path.read_text(encoding="utf-8")
        for m in _ROOT_PATH.findall(text):
            roots.setdefault(m, set()).add(path.name)
        for m in _TOKEN_PATH.findall(text):
            tokens.setdefault(m.rsplit("/", 2)[-2] + "/" + m.rsplit("/", 1)[-1], set()).add(
                path.name
            )
    assert set(roots) == {RIG_EXAMPLE_ROOT}, f"data roots named: {roots}"
    want = f"{default_daemon_token_file().parent.name}/{default_daemon_token_file().name}"
    assert set(tokens) == {want}, f"token paths named: {tokens}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert RIG_EXAMPLE_ROOT in readme and f"~/.config/{want}" in readme


def test_the_docs_index_links_every_page_and_only_pages_that_exist() -> None:
    """docs/index.md reaches every page in one click (issue: docs a maintainer can navigate)."""
    import re

    docs = ROOT / "docs"
    index = (docs / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([A-Za-z0-9_.-]+\.md)\)", index))
    pages = {p.name for p in docs.glob("*.md")} - {"index.md"}
    assert not pages - linked, f"pages the index does not link: {sorted(pages - linked)}"
    assert not linked - pages, f"the index links pages that do not exist: {sorted(linked - pages)}"
    assert "docs/index.md" in (ROOT / "README.md").read_text(encoding="utf-8")


#: the packages whose modules the docs name
#: (patterns: ``mecharm.<x>`` is a module only for the namespace's packages; the dataset
#: features ``mecharm.run_stem`` ... share the prefix and are no module)
_PACKAGES = (r"mecharm[./](?:common|cameras|sim|daemon|recorder|runtime|tools)",
             "mecharm_dev", "bench", "tests")  # fmt: skip
_FILE_SUFFIXES = (".yaml", ".key", ".json", ".csv", ".md", ".log", ".toml", ".token", ".py")


def test_the_docs_name_only_files_modules_and_names_that_exist() -> None:
    """A doc that names `pkg/path.py`, `pkg.module` or `pkg.module.name` names something
    that is there: a moved module or a renamed function fails here, not in a reader's hands."""
    import re

    alt = "|".join(_PACKAGES)
    bad: list[str] = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(rf"`((?:{alt})/[A-Za-z0-9_/.-]+\.(?:py|yaml|json))`", text):
            if not (ROOT / m.group(1)).exists():
                bad.append(f"{doc.name}: {m.group(1)} does not exist")
        for m in re.finditer(rf"`((?:{alt})(?:\.[A-Za-z_0-9]+)+)`", text):
            dotted = m.group(1)
            if dotted.endswith(_FILE_SUFFIXES):
                continue  # a file name (recorder.key), not a module
            parts = dotted.split(".")
            for i in range(len(parts), 0, -1):
                base = ROOT.joinpath(*parts[:i])
                src = (
                    base.with_suffix(".py")
                    if base.with_suffix(".py").exists()
                    else base / "__init__.py"
                )
                if src.exists():
                    if i < len(parts):
                        name = parts[i]
                        pattern = (rf"^\s*(?:async def|def|class)\s+{name}\b|^\s*{name}\s*[:=]"
                                   rf"|^(?:from|import)\b.*\b{name}\b")  # fmt: skip
                        if not re.search(pattern, src.read_text(encoding="utf-8"), re.M):
                            bad.append(
                                f"{doc.name}: {dotted}: no {name} in {src.relative_to(ROOT)}"
                            )
                    break
            else:
                bad.append(f"{doc.name}: {dotted}: no such module")
    assert not bad, "\n".join(bad)
