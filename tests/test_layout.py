"""The package layout as a rule: which package may import which (docs/architecture.md).

Reads every import statement of every module (``ast``, including imports inside
functions) and fails naming the file, the line and the rule broken. The point is
the observer principle and the lean Pi install: the recorder cannot reach the arm,
the daemon cannot pull in the runtime, and nothing a trial runs depends on the
offline tools.
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the product's packages, one namespace (mecharm/), and the development code beside it
OURS = ("mecharm.common", "mecharm.cameras", "mecharm.sim", "mecharm.daemon", "mecharm.recorder",
        "mecharm.runtime", "mecharm.tools", "mecharm_dev")  # fmt: skip
#: development code: checks, harnesses and fakes, outside the wheel (docs/architecture.md)
DEV = "mecharm_dev"

#: package -> the modules of ours it may import (a package prefix allows its submodules).
ALLOWED: dict[str, tuple[str, ...]] = {
    "mecharm.common": ("mecharm.common",),
    "mecharm.cameras": ("mecharm.common", "mecharm.cameras"),
    "mecharm.sim": ("mecharm.common", "mecharm.sim"),
    "mecharm.daemon": ("mecharm.common", "mecharm.sim", "mecharm.daemon"),
    # the observer never imports the daemon or the runtime
    "mecharm.recorder": ("mecharm.common", "mecharm.cameras", "mecharm.recorder"),
    # the runtime speaks the daemon's and the recorder's wire contracts, nothing else of theirs
    "mecharm.runtime": (
        "mecharm.common",
        "mecharm.cameras",
        "mecharm.runtime",
        "mecharm.daemon.protocol",
        "mecharm.recorder.events",
        "mecharm.recorder.sender",
    ),
    "mecharm.tools": tuple(p for p in OURS if p != DEV),
    DEV: OURS,
}

#: Modules the Pi profile (`pip install '.[pi]'`) must be able to import.
PI_MODULES = ("mecharm.daemon", "mecharm.sim.arm", "mecharm.sim.firmware", "mecharm.common")
#: Third-party packages the Pi never installs.
NOT_ON_PI = ("cv2", "av", "pyarrow", "scipy", "tqdm")


@functools.cache  # each test of this file reads the same modules: parsed once
def _imports(path: Path) -> tuple[tuple[int, str], ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # ``from pkg import module`` imports pkg.module
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return tuple(out)


def _dir(package: str) -> Path:
    return ROOT / package.replace(".", "/")


def _modules(package: str) -> list[Path]:
    return sorted(_dir(package).rglob("*.py"))


def _allowed(name: str, rules: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in rules)


def _ours(name: str) -> bool:
    return name == "mecharm" or any(name == p or name.startswith(p + ".") for p in OURS)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    broken = []
    for path in _modules(package):
        for line, name in _imports(path):
            if not _ours(name) or _allowed(name, ALLOWED[package]):
                continue
            # ``from mecharm.daemon import protocol`` also yields "mecharm.daemon" itself: judge the leaf only
            if any(_allowed(r, (name,)) for r in ALLOWED[package]):
                continue
            broken.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not broken, f"{package} may import only {ALLOWED[package]}:\n" + "\n".join(broken)


def test_every_package_has_a_rule() -> None:
    on_disk = {f"mecharm.{p.parent.name}" for p in ROOT.glob("mecharm/*/__init__.py")} | {
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name not in ("tests", "bench", "mecharm")
    }
    assert on_disk == set(ALLOWED), (
        "a new package needs its import rule here and in docs/architecture.md"
    )


def test_the_wheel_holds_the_product_and_no_development_code() -> None:
    """The packages setuptools puts in the wheel (pyproject's find rules, as ``pip wheel .``
    applies them): every product package, and nothing of ``mecharm_dev``."""
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["packages"]["find"]
    shipped = set(find_packages(str(ROOT), include=find["include"]))
    tops = {".".join(p.split(".")[:2]) for p in shipped if p != "mecharm"}
    assert "mecharm" in shipped and tops == set(OURS) - {DEV}, tops
    assert not any(p == DEV or p.startswith(DEV + ".") for p in shipped)
    # and no development check hides in a product package any more
    names = {p.stem for pkg in tops for p in _dir(pkg).rglob("*.py")}
    dev_modules = {p.stem for p in (ROOT / DEV).glob("*.py")} - {"__init__"}
    assert not names & dev_modules, names & dev_modules


def _pi_closure() -> set[Path]:
    """Every module of ours reachable by imports from the Pi's entry modules, minus lazy imports."""
    seen: set[Path] = set()
    todo = [m for m in PI_MODULES]
    while todo:
        name = todo.pop()
        candidates = [
            ROOT / (name.replace(".", "/") + ".py"),
            ROOT / name.replace(".", "/") / "__init__.py",
        ]
        for c in candidates:
            if c.exists() and c not in seen:
                seen.add(c)
                tree = ast.parse(c.read_text(encoding="utf-8"))
                for (
                    node
                ) in tree.body:  # module level only: a function-level import is lazy by design
                    if isinstance(node, ast.Import):
                        todo.extend(a.name for a in node.names if _ours(a.name))
                    elif isinstance(node, ast.ImportFrom) and node.module and _ours(node.module):
                        todo.append(node.module)
                        todo.extend(f"{node.module}.{a.name}" for a in node.names)
        if name in PI_MODULES and _dir(name).is_dir():
            todo.extend(
                str(p.relative_to(ROOT).with_suffix("")).replace("/", ".")
                for p in _dir(name).rglob("*.py")
                if p.name != "__init__.py"
            )
    return seen


def test_pi_modules_never_import_what_the_pi_does_not_install() -> None:
    broken = []
    for path in sorted(_pi_closure()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            broken += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                       if n.split(".")[0] in NOT_ON_PI]  # fmt: skip
    assert not broken, "the Pi profile does not install these:\n" + "\n".join(broken)


#: distribution name -> import name, for the dependencies whose names differ
_IMPORT_NAME = {"pyserial": "serial", "opencv-python-headless": "cv2", "pyyaml": "yaml",
                "pydantic-settings": "pydantic_settings", "rerun-sdk": "rerun"}  # fmt: skip
#: extra -> the packages (or modules) it installs libraries for
_EXTRA_USERS = {
    "pi": ("mecharm.daemon", "mecharm/sim/arm.py", "mecharm/sim/firmware.py"),
    "sim": ("mecharm.sim",),
    "recorder": ("mecharm.recorder", "mecharm.cameras"),
    "runtime": ("mecharm.runtime", "mecharm.cameras"),
    "tools": ("mecharm.tools",),
}


def _requirements(specs: list[str]) -> list[str]:
    """Distribution names of a requirement list, without the project's own extras."""
    names = [re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].strip().lower() for s in specs]
    return [n for n in names if n != "mecharm-rig"]


def _top_imports(paths: list[Path]) -> set[str]:
    return {name.split(".")[0] for p in paths for _line, name in _imports(p)}


def test_every_dependency_is_imported_where_its_profile_installs_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    unused = []
    for extra, users in _EXTRA_USERS.items():
        paths = [
            q for u in users for q in (_dir(u).rglob("*.py") if _dir(u).is_dir() else [ROOT / u])
        ]
        imported = _top_imports(paths)
        unused += [
            f"[{extra}] {d}"
            for d in _requirements(extras[extra])
            if _IMPORT_NAME.get(d, d) not in imported
        ]
    every = _top_imports([p for pkg in ALLOWED for p in _modules(pkg)])
    unused += [
        f"[base] {d}"
        for d in _requirements(project["dependencies"])
        if _IMPORT_NAME.get(d, d) not in every
    ]
    assert not unused, "declared but not imported by the code its profile is for:\n" + "\n".join(
        unused
    )


#: a product module longer than this is several jobs, unless its docstring says why it is
#: one (issue 25: "no product module over ~500 lines unless it is one concern")
MODULE_LINES_MAX = 500
ONE_CONCERN = "One concern:"


def test_a_long_product_module_says_why_it_is_one_concern() -> None:
    long: list[str] = []
    for package in OURS:
        if package == DEV:
            continue
        for path in _modules(package):
            text = path.read_text(encoding="utf-8")
            if text.count("\n") <= MODULE_LINES_MAX:
                continue
            doc = ast.get_docstring(ast.parse(text)) or ""
            if ONE_CONCERN not in doc:
                long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, (
        f"modules over {MODULE_LINES_MAX} lines: split them by job, or say in the module "
        f"docstring ({ONE_CONCERN!r} ...) why the module is one job: " + ", ".join(long)
    )
