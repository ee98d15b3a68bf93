"""The sim's fault interface over real HTTP (docs/simulation-faults.md): validation, and
what each fault does to the arm, the cameras and the world, seen from outside."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mecharm.sim.faults import FAULT_MODELS, parse_fault
from mecharm.sim.scene import SceneError, load_layout
from mecharm.sim.workcell import Workcell


@pytest.fixture
def served(rig: Any) -> Iterator[Any]:
    rig.wc.serve("127.0.0.1", 0)
    yield rig


def _port(wc: Workcell) -> int:
    assert wc.server is not None
    return wc.server.port


def _request(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any, bytes]:
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        method, path, body=raw, headers={"Content-Type": "application/json"} if raw else {}
    )
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    is_json = resp.getheader("Content-Type") == "application/json"
    return resp.status, json.loads(data) if is_json else None, data


def _fault(port: int, spec: dict[str, Any]) -> dict[str, Any]:
    status, data, _ = _request(port, "POST", "/faults", spec)
    assert status == 200, data
    return data["armed"]  # type: ignore[no-any-return]


def _jpeg(port: int, camera: str = "top") -> tuple[int, bytes]:
    status, _, data = _request(port, "GET", f"/{camera}.jpg")
    return status, data


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"fault": "earthquake"}, "unknown fault 'earthquake'; valid faults: ['camera_lost'"),
        ({"n": 2}, "unknown fault None"),
        ({"fault": "stall", "at_fraction": 2}, "stall: at_fraction"),
        ({"fault": "stall", "where": 0.5}, "stall: unknown parameter(s) ['where']; valid"),
        ({"fault": "settle_error", "deg": [1, 2]}, "settle_error: deg"),
        ({"fault": "settle_error", "deg": [99, 0, 0, 0, 0, 0]}, "settle_error: deg.0"),
        ({"fault": "settle_error", "deg": [float("nan"), 0, 0, 0, 0, 0]}, "settle_error: deg.0"),
        ({"fault": "lighting", "gradient": [float("nan"), 1e308]}, "lighting: gradient.0"),
        ({"fault": "lighting", "gradient": [0.0, 1e308]}, "lighting: gradient.1"),
        ({"fault": "camera_lost", "camera": "front"}, "camera_lost: camera"),
        ({"fault": "read_failures", "kind": "none"}, "read_failures: kind"),
        ({"fault": "lighting", "gain": 3}, "lighting: gain"),
        ({"fault": "push_box", "dx_m": 0.5, "dz_m": 0}, "push_box: dx_m"),
        ({"fault": "push_box", "dx_m": float("nan"), "dz_m": 0}, "push_box: dx_m"),
        ({"fault": "push_box", "dx_m": 0.01}, "push_box: dz_m"),
        ({"fault": "push_box", "dx_m": 0, "dz_m": 0, "yaw": 5}, "push_box: unknown parameter(s)"),
        ({"fault": "lighting", "sun": 1}, "lighting: unknown parameter(s) ['sun']; valid"),
        ({"fault": "lighting"}, "name at least one parameter"),
        ([1, 2], 'a fault is a JSON object {"fault": NAME'),
        (b"{not json", "not valid JSON"),
        (b'{"fault": ' * 9 + b"1" + b"}" * 9, "more than 8 deep"),
    ],
)
def test_bad_fault_requests_get_400_naming_the_problem(served: Any, body: Any, needle: str) -> None:
    port = _port(served.wc)
    status, data, _ = _request(port, "POST", "/faults", body)
    assert status == 400, data
    assert needle in data["error"], data["error"]
    assert _request(port, "GET", "/faults")[0] == 200  # and the server keeps serving


def test_oversized_fault_body_is_refused(served: Any) -> None:
    with socket.create_connection(("127.0.0.1", _port(served.wc)), timeout=5) as s:
        s.sendall(b"POST /faults HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert b" 400 " in reply.split(b"\r\n", 1)[0] and b"max 4096" in reply


def test_get_lists_valid_faults_post_arms_delete_clears(served: Any) -> None:
    port = _port(served.wc)
    status, data, _ = _request(port, "GET", "/faults")
    assert status == 200 and data["valid_faults"] == sorted(FAULT_MODELS)
    assert data["arm"]["armed"]["ignore_sends"] == 0
    armed = _fault(port, {"fault": "ignore_sends", "n": 2})
    assert armed["fault"] == "ignore_sends" and armed["n"] == 2
    _fault(port, {"fault": "frozen_feed", "camera": "side"})
    _, data, _ = _request(port, "GET", "/faults")
    assert data["arm"]["armed"]["ignore_sends"] == 2
    assert data["cameras"]["side"]["frozen"] is True
    assert [h["fault"] for h in data["history"]] == ["ignore_sends", "frozen_feed"]
    status, data, _ = _request(port, "DELETE", "/faults")
    assert status == 200 and data["cleared"] is True
    assert data["arm"]["armed"]["ignore_sends"] == 0 and data["cameras"]["side"]["frozen"] is False


def test_arm_faults_act_on_the_simulated_firmware(served: Any) -> None:
    port, arm = _port(served.wc), served.arm
    start = arm.true_angles()
    _fault(port, {"fault": "ignore_sends", "n": 1})
    arm.send_angles([20.0, 0, 0, 0, 0, -30], 50)
    assert arm.true_angles() == start and not arm.true_moving()  # acknowledged, not moved
    _fault(port, {"fault": "settle_error", "deg": [3, 0, 0, 0, 0, 0]})
    arm.send_angles([10.0, 0, 0, 0, 0, -30], 50)
    assert arm.wait_idle(30)
    assert arm.true_angles()[0] == pytest.approx(13.0, abs=0.01)  # the exact arm + 3 deg
    _fault(port, {"fault": "stall", "at_fraction": 0.5})
    arm.send_angles([30.0, 0, 0, 0, 0, -30], 50)
    assert arm.wait_idle(30)
    assert arm.true_angles()[0] == pytest.approx(13.0 + (30.0 - 13.0) / 2, abs=0.01)
    _fault(port, {"fault": "read_failures", "n": 2, "kind": "[]"})
    assert arm.get_angles() == [] and arm.get_angles() == []
    assert len(arm.get_angles()) == 6
    _fault(port, {"fault": "read_latency_spike", "seconds": 10.0, "n": 1})
    t0 = time.monotonic()
    arm.get_angles()  # 10 s of sim time at the exact arm's 50x: at least 0.2 s
    assert time.monotonic() - t0 >= 10.0 / arm.config.time_scale * 0.9
    arm.get_angles()  # n=1: the next read is not spiked (latency_spikes stays 1 below)
    counts = _request(port, "GET", "/faults")[1]["arm"]["counts"]
    assert counts == {
        "ignored_sends": 1,
        "stalls": 1,
        "failed_reads": 2,
        "settle_errors": 1,
        "latency_spikes": 1,
    }


def test_frozen_feed_repeats_the_last_jpeg_byte_for_byte(served: Any) -> None:
    port = _port(served.wc)
    a, b = _jpeg(port)[1], _jpeg(port)[1]
    assert a != b  # sensor noise: two live frames never match
    _fault(port, {"fault": "frozen_feed"})
    frozen = [_jpeg(port)[1] for _ in range(3)]
    assert frozen[0] == frozen[1] == frozen[2]
    # the first frame served after the fault may be one whose render began before it (the
    # producer was mid-frame): it is the picture that freezes, not a frozen repeat
    counted = _request(port, "GET", "/faults")[1]["cameras"]["top"]["frozen_frames"]
    assert counted >= 2
    served.move(served.PLACE)  # the arm moves; the frozen picture does not
    assert _jpeg(port)[1] == frozen[0]
    assert _request(port, "GET", "/faults")[1]["cameras"]["top"]["frozen_frames"] > counted
    _request(port, "DELETE", "/faults")
    assert _jpeg(port)[1] != frozen[0]


@pytest.mark.slow
def test_a_live_feed_never_repeats_a_frame_even_in_a_noiseless_scene(served: Any) -> None:
    # the schema allows no noise and almost no flicker; the sensor's own noise floor still
    # makes every frame differ, so the runtime's frozen-feed check (10 in a row) never fires
    port = _port(served.wc)
    for lighting in ({"noise_sigma": 0, "flicker": 0.002}, {"noise_sigma": 0, "flicker": 0}):
        _fault(port, {"fault": "lighting", **lighting})
        frames = [_jpeg(port)[1] for _ in range(12)]
        assert all(a != b for a, b in itertools.pairwise(frames)), lighting


def test_camera_lost_cuts_the_stream_and_refuses_until_it_is_back(served: Any) -> None:
    port = _port(served.wc)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/top.mjpg")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.fp.readline()  # streaming
    _fault(port, {"fault": "camera_lost", "camera": "top"})  # until cleared: no race
    rest = resp.read()  # the server closes the stream: read() returns instead of blocking
    conn.close()
    assert len(rest) < 10_000_000
    status, data, _ = _request(port, "GET", "/top.jpg")
    assert status == 503 and "camera top lost" in data["error"]
    assert _jpeg(port, "side")[0] == 200  # only the named camera
    _request(port, "DELETE", "/faults")
    assert _jpeg(port)[0] == 200  # back once cleared
    _fault(port, {"fault": "camera_lost", "camera": "top", "seconds": 0.2})
    deadline = time.monotonic() + 60  # a generous bound for a loaded machine, not a timing
    while _jpeg(port)[0] != 200:
        assert time.monotonic() < deadline, "camera top never came back after its seconds"
        time.sleep(0.05)


@pytest.mark.slow
def test_dropped_and_late_frames(served: Any) -> None:
    port = _port(served.wc)
    _fault(port, {"fault": "drop_frames", "camera": "top", "fraction": 0.5})
    for _ in range(6):
        assert _jpeg(port)[0] == 200  # frames still come, fewer of them
    dropped = _request(port, "GET", "/faults")[1]["cameras"]["top"]["dropped_frames"]
    assert dropped >= 1
    _request(port, "DELETE", "/faults")
    _fault(port, {"fault": "late_frames", "camera": "top", "delay_s": 0.3})
    for _ in range(3):
        assert _jpeg(port)[0] == 200
    assert _request(port, "GET", "/faults")[1]["cameras"]["top"]["late_frames"] >= 1


def test_world_faults_knock_missed_grasp_lighting(served: Any) -> None:
    port = _port(served.wc)
    before = _request(port, "GET", "/scene/truth")[1]["block"]
    _fault(port, {"fault": "knock", "dx_m": 0.03, "dz_m": -0.01})
    after = _request(port, "GET", "/scene/truth")[1]
    assert after["block"]["x"] == pytest.approx(before["x"] + 0.03)
    assert after["block"]["z"] == pytest.approx(before["z"] - 0.01)
    assert after["events"][-1]["kind"] == "knock"
    box = after["box"]
    _fault(port, {"fault": "push_box", "dx_m": -0.02, "dz_m": 0.01})
    moved = _request(port, "GET", "/scene/truth")[1]
    assert moved["box"]["x"] == pytest.approx(box["x"] - 0.02, abs=2e-3)
    assert moved["box"]["z"] == pytest.approx(box["z"] + 0.01, abs=2e-3)
    assert moved["events"][-1]["kind"] == "push_box"
    _fault(port, {"fault": "lighting", "gain": 0.8, "flicker": 0.0})
    lt = _request(port, "GET", "/scene/truth")[1]["layout"]["lighting"]
    assert lt["gain"] == 0.8 and lt["flicker"] == 0.0
    _fault(port, {"fault": "missed_grasp"})
    assert _request(port, "GET", "/faults")[1]["world"]["missed_grasp_armed"] is True


def test_crash_kills_the_process_after_replying(served: Any) -> None:
    died: list[float] = []
    served.wc.faults._crash = lambda: died.append(time.monotonic())  # not this test process
    armed = _fault(_port(served.wc), {"fault": "crash", "after_s": 0.1})
    assert armed["after_s"] == 0.1
    for _ in range(100):
        if died:
            break
        time.sleep(0.05)
    assert died


def test_scene_file_arms_its_faults_at_scene_start(rig: Any, tmp_path: Path) -> None:
    scene = tmp_path / "faulty.yaml"
    scene.write_text(
        "block: {x: 0.2, z: 0.24}\nbox: {x: -0.2, z: 0.2}\n"
        "faults:\n  - {fault: ignore_sends, n: 3}\n  - {fault: frozen_feed, camera: side}\n"
    )
    rig.wc.next_scene(layout=load_layout(str(scene)))
    status = rig.wc.faults.status()
    assert status["arm"]["armed"]["ignore_sends"] == 3 and status["cameras"]["side"]["frozen"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("block: {x: 0.2, z: 0.24}\nbox: {x: -0.2, z: 0.2}\nfaults: [{fault: meteor}]\n")
    with pytest.raises(SceneError, match=r"faults\.0|faults\[0\]: unknown fault 'meteor'"):
        load_layout(str(bad))
    for text, needle in [
        ("faults: [{fault: settle_error, deg: [99, 0, 0, 0, 0, 0]}]", "settle_error: deg.0"),
        ("faults: [{fault: stall, 1: 2}]", "faults.0.1.[key]"),
        ("1: 2", "1: Keys should be strings"),
        ("lighting: {gradient: [.nan, 0]}", "lighting.gradient.0"),
    ]:
        bad.write_text(f"block: {{x: 0.2, z: 0.24}}\nbox: {{x: -0.2, z: 0.2}}\n{text}\n")
        with pytest.raises(SceneError) as exc:
            load_layout(str(bad))
        assert needle in str(exc.value), (text, str(exc.value))


def test_every_fault_has_a_doc_entry() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "simulation-faults.md").read_text()
    for name, model in FAULT_MODELS.items():
        assert f"`{name}`" in doc, name
        for p in model.model_fields:
            assert f"`{p}`" in doc, f"{name}.{p}"
    assert parse_fault({"fault": "missed_grasp"})[0] == "missed_grasp"


def test_daemon_refuses_a_scene_file_with_a_bad_fault_naming_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "block: {x: 0.2, z: 0.24}\nbox: {x: -0.2, z: 0.2}\nfaults: [{fault: stall, at: 1}]\n"
    )
    args = ["--backend", "sim", "--scene", str(bad), "--port", "0", "--camera-port", "0"]
    out = subprocess.run(
        [sys.executable, "-m", "mecharm.daemon.cli", *args, "--log-level", "warning"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "Traceback" not in text, text  # bad input, as a bad flag
    assert "faults[0]: stall: unknown parameter(s) ['at']; valid: ['at_fraction']" in text, text
