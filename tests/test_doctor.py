"""`mecharm doctor` on the simulated rig as real processes (daemon with a token, workcell
cameras, recorder): every check passes; with the recorder down or on another root, the data
root missing, a wrong token or a changed FK table, that check fails with its fix; the arm
never moves."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.tools.cli import main as mecharm
from mecharm.tools.doctor import Check, render
from mecharm.tools.simrig import Child, SimRig, start_recorder, start_sim_daemon

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TOKEN = "a-token-only-the-rig-knows-0123456789"
CHECKS = [
    "data root", "ledger", "FK table", "arc approach_pick", "arc approach_place",
    "daemon", "envelope", "top camera", "recorder",
]  # fmt: skip


@dataclass
class Rig:
    sim: SimRig
    recorder: Child
    recorder_port: int
    root: Path
    other_root: Path
    token: Path
    config: Path
    base: Path


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, fk_data_dir: Path) -> Iterator[Rig]:
    base = tmp_path_factory.mktemp("doctor")
    root, other = base / "root", base / "other_root"
    root.mkdir()
    other.mkdir()
    sim = start_sim_daemon(base / "logs", time_scale=20, token=TOKEN)
    assert sim.token_file is not None
    token = sim.token_file
    recorder, port = start_recorder(base / "logs", root, "synthetic?fps=15&w=320&h=240")
    config = base / "runtime.yaml"
    config.write_text(
        f"fk_data_dir: {fk_data_dir}\n"
        "pick_place:\n"
        f"  approach_pick_arc: {REPO / 'configs/poses/approach_pick.json'}\n"
        f"  approach_place_arc: {REPO / 'configs/poses/approach_place.json'}\n"
        "daemon:\n"
        f"  port: {sim.daemon_port}\n"
        f"  token_file: {token}\n"
        f"perception:\n  top_camera: {sim.top_url}\n"
        "recorder:\n"
        f"  port: {port}\n"
        "  probe_timeout_s: 2.0\n"
    )
    try:
        yield Rig(sim, recorder, port, root, other, token, config, base)
    finally:
        recorder.stop()
        sim.daemon.stop()


def _doctor(rig: Rig, capsys: Any, *flags: str) -> tuple[int, dict[str, tuple[str, str, str]]]:
    """Run ``mecharm doctor`` in this process; {check: (status, detail, fix)} from its lines."""
    code = mecharm(["doctor", "--config", str(rig.config), "--data-root", str(rig.root), *flags])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("mecharm doctor: the runtime's settings from"), out
    found: dict[str, tuple[str, str, str]] = {}
    for i, line in enumerate(lines[1:-1], 1):
        status = line[:4].strip()
        if status not in ("ok", "FAIL", "skip"):
            continue
        name = next(n for n in sorted(CHECKS, key=len, reverse=True) if line[6:].startswith(n))
        detail = line[6:].removeprefix(name).strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        found[name] = (status, detail, nxt.removeprefix("do: ") if nxt.startswith("do: ") else "")
    assert list(found) == CHECKS, out
    return code, found


def test_every_check_passes_on_the_simulated_rig(rig: Rig, capsys: Any) -> None:
    before = _commands(rig)
    code, found = _doctor(rig, capsys)
    assert code == 0, found
    assert all(status == "ok" for status, _d, _f in found.values()), found
    assert "authenticated" in found["daemon"][1] and "sim backend" in found["daemon"][1]
    assert "matches its record" in found["FK table"][1]
    assert "same data root" in found["recorder"][1]
    assert "live frames" in found["top camera"][1]
    after = _commands(rig)
    # the doctor said hello and nothing else: no motion, no gripper, not even a reading
    assert {c: n - before.get(c, 0) for c, n in after.items() if n != before.get(c, 0)} == {
        "hello": 2,  # the doctor's, and ours
        "stats": 1,
    }


@pytest.mark.slow
def test_a_fresh_set_up_without_the_fk_table_is_ok_saying_the_first_run_builds_it(
    rig: Rig, capsys: Any, tmp_path: Path
) -> None:
    cfg = tmp_path / "runtime.yaml"
    empty = tmp_path / "fresh_fk"
    empty.mkdir()
    cfg.write_text(rig.config.read_text().replace(str(_fk_dir(rig)), str(empty)))
    code, found = _doctor(rig, capsys, "--config", str(cfg))
    assert code == 0, found
    status, detail, _fix = found["FK table"]
    assert status == "ok" and "not built yet; the first run builds it at start" in detail
    assert "mecharm fk build --data-dir" in detail


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "check", "detail", "fix"),
    [
        ("recorder down", "recorder", "recorder not answering on udp", "mecharm-recorder --data-root"),
        ("recorder on another root", "recorder", "records into", "restart the recorder with --data-root"),
        ("data root missing", "data root", "does not exist", "mount the SSD"),
        ("wrong token", "daemon", "refused the hello", "does not hold the daemon's token"),
        ("no token", "daemon", "refused the hello", "pass --token-file"),
        ("changed FK table", "FK table", "does not match the recorded", "mecharm fk adopt --table"),
    ],
)  # fmt: skip
def test_each_failure_names_its_fix(
    rig: Rig, capsys: Any, tmp_path: Path, case: str, check: str, detail: str, fix: str
) -> None:
    flags: list[str] = []
    if case == "recorder down":  # a recorder on this root that was stopped
        down, port = start_recorder(tmp_path / "logs", rig.root, "synthetic?fps=15&w=320&h=240")
        assert down.stop() == 0
        flags = ["--recorder-port", str(port)]
    elif case == "recorder on another root":  # the running recorder writes to rig.root
        flags = ["--data-root", str(rig.other_root)]
    elif case == "data root missing":
        flags = ["--data-root", str(tmp_path / "ssd_not_mounted")]
    elif case == "wrong token":
        bad = tmp_path / "token"
        bad.write_text("not-the-token-at-all-0123456789\n")
        flags = ["--token-file", str(bad)]
    elif case == "no token":
        cfg = tmp_path / "runtime.yaml"
        cfg.write_text(rig.config.read_text().replace(f"  token_file: {rig.token}\n", ""))
        flags = ["--config", str(cfg)]
    elif case == "changed FK table":
        fk = tmp_path / "fk_copy"
        shutil.copytree(DataRoot(_fk_dir(rig)).fk_table.parent, fk / "fk")
        with DataRoot(fk).fk_table.open("a") as fh:
            fh.write("0.1,0.1,0.1,0,0,0,0,0,-30\n")
        cfg = tmp_path / "runtime.yaml"
        cfg.write_text(rig.config.read_text().replace(str(_fk_dir(rig)), str(fk)))
        flags = ["--config", str(cfg)]
    code, found = _doctor(rig, capsys, *flags)
    assert code == 1
    status, got_detail, got_fix = found[check]
    assert status == "FAIL" and detail in got_detail and fix in got_fix, found[check]
    failed = {n for n, (st, _d, _f) in found.items() if st == "FAIL"}
    expected = {check} | ({"recorder"} if case == "data root missing" else set())
    assert failed == expected, found
    if check == "daemon":
        assert found["envelope"][0] == "skip"


def test_bad_flags_exit_2(rig: Rig, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        mecharm(["doctor", "--daemon-port", "many"])
    assert exc.value.code == 2
    code = mecharm(["doctor", "--config", str(rig.config), "--daemon-port", "0"])
    assert code == 2 and "daemon.port" in capsys.readouterr().err


def test_the_checklist_renders_with_rich_on_a_terminal() -> None:
    import io

    buf = io.StringIO()
    render(
        [Check("daemon", "ok", "up"), Check("recorder", "FAIL", "not answering", "start it")],
        buf,
        rich=True,
    )
    text = buf.getvalue()
    assert "FAIL" in text and "do: start it" in text and "1 of 2 checks FAILED" in text


def _fk_dir(rig: Rig) -> Path:
    line = next(ln for ln in rig.config.read_text().splitlines() if ln.startswith("fk_data_dir"))
    return Path(line.split(": ", 1)[1])


def _commands(rig: Rig) -> dict[str, int]:
    """The daemon's count of requests by command since it started (its ``stats``)."""
    import anyio

    from mecharm.runtime.client import DaemonClient

    async def read() -> dict[str, int]:
        async with DaemonClient("127.0.0.1", rig.sim.daemon_port, token=TOKEN) as c:
            return dict((await c.request("stats"))["commands"])

    return anyio.run(read)
