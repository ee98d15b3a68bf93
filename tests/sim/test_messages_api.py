"""The Messages API stand-in under bad input: every request gets an answer, and it keeps serving.

Real HTTP on 127.0.0.1; the malformed requests go through a raw socket, because
http.client will not send a bad Content-Length.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from mecharm_dev.messages_api import MAX_BODY, MessagesApiServer, main

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01", "content-type": "application/json"}
GOOD = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
AUTH = b"x-api-key: k\r\nanthropic-version: 2023-06-01\r\n"


@pytest.fixture
def api() -> Iterator[MessagesApiServer]:
    with MessagesApiServer() as srv:
        yield srv


def _request(srv: MessagesApiServer, path: str, body: Any) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body), HEADERS)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _raw(srv: MessagesApiServer, data: bytes) -> tuple[int, Any]:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(data)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, json.loads(resp.read())


def _still_serves(srv: MessagesApiServer) -> dict[str, Any]:
    status, answer = _request(srv, "/v1/messages", GOOD)
    assert status == 200 and answer["type"] == "message", answer
    return dict(json.loads(answer["content"][0]["text"]))


def _post(head: bytes, body: bytes = b"{}") -> bytes:
    return b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n" + AUTH + head + b"\r\n" + body


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("data", "status", "says"),
    [
        (_post(b"Content-Length: abc\r\n"), 400, "Content-Length: must be a non-negative integer"),
        (_post(b"Content-Length: -5\r\n"), 400, "Content-Length: must be a non-negative integer"),
        (_post(b"Content-Length: 999999999999\r\n"), 413, "over the"),
        (_post(f"Content-Length: {MAX_BODY + 1}\r\n".encode()), 413, "over the"),
        (_post(b"Content-Length: 2\r\nContent-Length: 3\r\n"), 400, "conflicting"),
        (_post(b"Transfer-Encoding: chunked\r\n", b"zz\r\n"), 400, "Transfer-Encoding"),
        (_post(f"Content-Length: {len(DEEP)}\r\n".encode(), DEEP), 400, "nested too deeply"),
        (_post(b"Content-Length: 5\r\n", b"\xff\xfe{\x00\x01"), 400, "not valid JSON"),
    ],
    ids=["cl-abc", "cl-negative", "cl-huge", "cl-over-cap", "cl-twice", "chunked", "deep", "bytes"],
)
def test_a_malformed_request_gets_an_api_error_and_the_server_goes_on(
    api: MessagesApiServer, data: bytes, status: int, says: str
) -> None:
    got, err = _raw(api, data)
    assert got == status, err
    assert err["type"] == "error" and says in err["error"]["message"], err
    kind = "request_too_large" if status == 413 else "invalid_request_error"
    assert err["error"]["type"] == kind
    _still_serves(api)


@pytest.mark.parametrize(
    ("ctl", "says"),
    [
        ({"default": {"status": "x"}}, "default: status: must be an integer error status"),
        ({"default": {"status": 99}}, "400..599, got 99"),
        ({"default": {"status": True}}, "status: must be an integer"),
        ({"queue": [{"answer": {}}, {"hang": -1}]}, "queue.1: hang: must be a number"),
        ({"queue": [{"hang": "5"}]}, "hang: must be a number"),
        ({"queue": 5}, "queue must be a list"),
        ({"queue": [7]}, "queue.0: a behaviour must be an object"),
        ({"default": {"stauts": 529}}, "unknown key(s) ['stauts']"),
        ({"default": {"status": 529, "hang": 1}}, "one of"),
        ({"default": {"retry_after": 1}}, "retry_after: only goes with a status"),
        ({"default": {"status": 429, "retry_after": -1}}, "retry_after: must be a number"),
        ({"default": {"text": 3}}, "text: must be a string"),
        ({"default": {"close": "yes"}}, "close: must be true"),
        ({"defualt": {"status": 529}}, 'expected {"default"'),
        ([1], 'expected {"default"'),
    ],
)
def test_a_bad_script_is_refused_and_the_old_one_kept(
    api: MessagesApiServer, ctl: Any, says: str
) -> None:
    kept = {"verdict": "no", "confidence": 0.7, "reason": "kept"}
    assert _request(api, "/_control", {"default": {"answer": kept}}) == (200, {"ok": True})
    status, err = _request(api, "/_control", ctl)
    assert status == 400 and says in err["error"]["message"], err
    assert not api.queue  # a bad queue entry refuses the whole queue
    assert _still_serves(api) == kept
    with pytest.raises(ValueError, match="must be"):
        api.script(None, {"hang": -1})


def test_the_log_records_the_status_actually_answered(api: MessagesApiServer) -> None:
    api.script(
        None, {"status": 529}, {"hang": 0}, {"close": True}, {"status": 429, "retry_after": 2}
    )
    assert _request(api, "/v1/messages", GOOD)[0] == 529
    for _ in range(2):  # a hang (here 0 s) and a close both end without a response
        with pytest.raises(http.client.RemoteDisconnected):
            _request(api, "/v1/messages", GOOD)
    assert _request(api, "/v1/messages", GOOD)[0] == 429
    _still_serves(api)
    assert _request(api, "/v1/messages", {"model": "m"})[0] == 400
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    conn.request("GET", "/_requests")
    log = json.loads(conn.getresponse().read())
    conn.close()
    assert [r["status"] for r in log] == [529, None, None, 429, 200, 400]
    assert [bool(r["problem"]) for r in log] == [False] * 5 + [True]


def test_an_unknown_method_is_answered_in_the_api_shape(api: MessagesApiServer) -> None:
    status, err = _raw(api, b"DELETE /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405 and err["type"] == "error"
    status, err = _raw(api, b"BREW /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 501 and err["type"] == "error"
    _still_serves(api)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "99999"], "99999 is outside 0..65535"),
        (["--port", "-1"], "outside 0..65535"),
        (["--port", "http"], "not an integer: 'http'"),
        (["--port", "0", "--behaviour", '{"hang": -1}'], "hang: must be a number"),
        (["--port", "0", "--behaviour", "{x"], "--answer/--behaviour"),
    ],
)
def test_bad_cli_arguments_exit_2_with_a_message(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_busy_port_exits_2_with_a_message(
    api: MessagesApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--port", str(api.port)])
    assert exc.value.code == 2
    assert f"cannot listen on 127.0.0.1:{api.port}" in capsys.readouterr().err


def test_help_keeps_the_behaviour_examples_one_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    for example in ('{"text": "any raw text"}', '{"hang": 30}', '{"close": true}'):
        assert any(line.lstrip().startswith(example) for line in lines), example
