"""Wire models: envelope parsing, per-command argument validation, encode/decode round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mecharm.common import kinematics
from mecharm.daemon.protocol import (
    ARGS_MODELS,
    JOINT_MAX,
    JOINT_MIN,
    MAX_LINE_BYTES,
    ErrorCode,
    ErrorResponse,
    NoArgs,
    OkResponse,
    ProtocolError,
    Request,
    SendAnglesArgs,
    decode_request,
    decode_response,
    encode,
    encode_ok,
    error_response,
    ok_response,
    validate_args,
)

HOME = [0, 0, 0, 0, 0, -30]


def test_joint_limits_are_the_sdk_limits() -> None:
    assert JOINT_MIN == kinematics.JOINT_MIN == (-160, -75, -175, -155, -115, -180)
    assert JOINT_MAX == kinematics.JOINT_MAX == (160, 120, 65, 155, 115, 180)


def test_request_round_trip() -> None:
    line = encode(Request(id=7, cmd="send_angles", args={"angles": HOME, "speed": 20}))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    req = decode_request(line)
    assert req.id == 7 and req.cmd == "send_angles" and req.args["speed"] == 20
    assert decode_request(b'{"id": 1, "cmd": "get_angles"}').args == {}


def test_response_round_trip() -> None:
    ok = decode_response(encode(ok_response(3, [1.5] * 6)))
    assert isinstance(ok, OkResponse) and ok.id == 3 and ok.result == [1.5] * 6
    err = decode_response(encode(error_response(None, ErrorCode.BUSY, "someone else")))
    assert isinstance(err, ErrorResponse) and err.id is None
    assert err.error.code == "busy" and err.error.message == "someone else"


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"", ErrorCode.BAD_JSON),
        (b"not json", ErrorCode.BAD_JSON),
        (b"[1, 2]", ErrorCode.BAD_JSON),
        (b'"hello"', ErrorCode.BAD_JSON),
        (b"\xff\xfe", ErrorCode.BAD_JSON),
        (b'{"id": 1, "cmd": "x"', ErrorCode.BAD_JSON),
        (b'{"cmd": "get_angles"}', ErrorCode.BAD_REQUEST),
        (b'{"id": "1", "cmd": "get_angles"}', ErrorCode.BAD_REQUEST),
        (b'{"id": true, "cmd": "get_angles"}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1.0, "cmd": "get_angles"}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1, "cmd": ""}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1, "cmd": 5}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1, "cmd": "get_angles", "args": []}', ErrorCode.BAD_REQUEST),
        (b'{"id": 1, "cmd": "get_angles", "extra": 1}', ErrorCode.BAD_REQUEST),
        (b"x" * (MAX_LINE_BYTES + 1), ErrorCode.LINE_TOO_LONG),
    ],
)
def test_decode_request_errors(line: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as ei:
        decode_request(line)
    assert ei.value.code is code
    assert ei.value.message


def test_bad_request_keeps_the_id_when_it_is_valid() -> None:
    with pytest.raises(ProtocolError) as ei:
        decode_request(b'{"id": 42, "cmd": "get_angles", "args": 3}')
    assert ei.value.request_id == 42
    assert "args" in ei.value.message


@pytest.mark.parametrize(
    ("line", "rid", "says"),
    [
        (b'{"id": 1, "cmd": "get_angles", "cmd": "stop"}', 1, "'cmd' twice"),
        (b'{"id": 1, "id": 2, "cmd": "stop"}', None, "'id' twice"),
        (b'{"id":1,"cmd":"get_angles","cmd" :"stop"}', 1, "'cmd' twice"),
        (b'{"id":1,"cmd"\t:\n"get_angles",\r"cmd"  :"stop"}', 1, "'cmd' twice"),
        (b'{"id": 4, "cmd": "hello", "args": {"client": "a:b", "x": {"k": 1, "k": 2}}}', 4, "'k'"),
        (b'{"id": 3, "cmd": "send_angles", "args": {"speed": 1, "speed": 2}}', 3, "'speed' twice"),
        (b'{"id": ' + b"9" * 5000 + b', "cmd": "stop"}', None, "more than 4300 digits"),
        (b'{"id": 9007199254740992, "cmd": "stop"}', None, "less than or equal"),
        (b'{"id": -9007199254740992, "cmd": "stop"}', None, "greater than or equal"),
        (b'{"id": "' + b"1" * 5000 + b'", "cmd": "stop"}', None, "valid integer"),
    ],
)
def test_duplicate_keys_and_absurd_ids_are_bad_requests(
    line: bytes, rid: int | None, says: str
) -> None:
    with pytest.raises(ProtocolError) as ei:
        decode_request(line)
    assert ei.value.code is ErrorCode.BAD_REQUEST
    assert ei.value.request_id == rid
    assert says in ei.value.message and len(ei.value.message) < 300


def test_colons_in_strings_and_nested_objects_are_not_duplicates() -> None:
    req = decode_request(b'{"id": 1, "cmd": "hello", "args": {"client": "host:1:2"}}')
    assert req.args == {"client": "host:1:2"}
    req = decode_request(b'{"id": 2, "cmd": "x", "args": {"a": {"b": {"c": 1}}}}')
    assert req.args == {"a": {"b": {"c": 1}}}


def test_the_largest_json_safe_ids_are_accepted() -> None:
    for rid in (9007199254740991, -9007199254740991, 0):
        assert decode_request(f'{{"id": {rid}, "cmd": "ping"}}'.encode()).id == rid


@pytest.mark.parametrize(
    ("cmd", "args", "code", "names"),
    [
        ("fly", {}, ErrorCode.UNKNOWN_COMMAND, "fly"),
        ("get_angles", {"x": 1}, ErrorCode.BAD_ARGS, "x"),
        ("send_angles", {"speed": 20}, ErrorCode.BAD_ARGS, "angles"),
        ("send_angles", {"angles": HOME}, ErrorCode.BAD_ARGS, "speed"),
        ("send_angles", {"angles": HOME[:5], "speed": 20}, ErrorCode.BAD_ARGS, "angles"),
        ("send_angles", {"angles": [*HOME, 0], "speed": 20}, ErrorCode.BAD_ARGS, "angles"),
        ("send_angles", {"angles": "0,0,0,0,0,0", "speed": 20}, ErrorCode.BAD_ARGS, "angles"),
        (
            "send_angles",
            {"angles": [0, 0, "a", 0, 0, 0], "speed": 20},
            ErrorCode.BAD_ARGS,
            "angles.2",
        ),
        (
            "send_angles",
            {"angles": [0, True, 0, 0, 0, 0], "speed": 20},
            ErrorCode.BAD_ARGS,
            "angles.1",
        ),
        ("send_angles", {"angles": HOME, "speed": 20, "wait": True}, ErrorCode.BAD_ARGS, "wait"),
        (
            "send_angles",
            {"angles": [0, 121, 0, 0, 0, 0], "speed": 20},
            ErrorCode.ANGLE_OUT_OF_RANGE,
            "angles[1]",
        ),
        (
            "send_angles",
            {"angles": [-161, 0, 0, 0, 0, 0], "speed": 20},
            ErrorCode.ANGLE_OUT_OF_RANGE,
            "angles[0]",
        ),
        (
            "send_angles",
            {"angles": [0, 0, 66, 0, 0, 0], "speed": 20},
            ErrorCode.ANGLE_OUT_OF_RANGE,
            "angles[2]",
        ),
        (
            "send_angles",
            {"angles": [0, 0, 0, 0, 0, 180.01], "speed": 20},
            ErrorCode.ANGLE_OUT_OF_RANGE,
            "angles[5]",
        ),
        ("send_angles", {"angles": HOME, "speed": 0}, ErrorCode.BAD_SPEED, "speed"),
        ("send_angles", {"angles": HOME, "speed": 101}, ErrorCode.BAD_SPEED, "speed"),
        ("send_angles", {"angles": HOME, "speed": 20.0}, ErrorCode.BAD_SPEED, "speed"),
        ("send_angles", {"angles": HOME, "speed": "20"}, ErrorCode.BAD_SPEED, "speed"),
        ("send_angles", {"angles": HOME, "speed": True}, ErrorCode.BAD_SPEED, "speed"),
        ("set_gripper_value", {"value": 101, "speed": 50}, ErrorCode.BAD_GRIPPER_VALUE, "value"),
        ("set_gripper_value", {"value": -1, "speed": 50}, ErrorCode.BAD_GRIPPER_VALUE, "value"),
        ("set_gripper_value", {"value": 20.5, "speed": 50}, ErrorCode.BAD_GRIPPER_VALUE, "value"),
        ("set_gripper_value", {"value": 20, "speed": 0}, ErrorCode.BAD_SPEED, "speed"),
        ("set_gripper_state", {"state": 2, "speed": 50}, ErrorCode.BAD_ARGS, "state"),
        ("set_gripper_state", {"state": 0}, ErrorCode.BAD_ARGS, "speed"),
        ("set_fresh_mode", {"mode": 3}, ErrorCode.BAD_ARGS, "mode"),
        ("set_fresh_mode", {}, ErrorCode.BAD_ARGS, "mode"),
        ("hello", {"token": 5}, ErrorCode.BAD_ARGS, "token"),
    ],
)
def test_validate_args_codes(cmd: str, args: dict, code: ErrorCode, names: str) -> None:
    with pytest.raises(ProtocolError) as ei:
        validate_args(cmd, args, 9)
    assert ei.value.code is code
    assert names in ei.value.message
    assert ei.value.request_id == 9


def test_validate_args_accepts_limits_and_ints() -> None:
    m = validate_args("send_angles", {"angles": list(JOINT_MAX), "speed": 100})
    assert isinstance(m, SendAnglesArgs) and m.angles == [float(a) for a in JOINT_MAX]
    assert validate_args("send_angles", {"angles": list(JOINT_MIN), "speed": 1}).speed == 1  # type: ignore[attr-defined]
    assert validate_args("set_gripper_value", {"value": 0, "speed": 100}).value == 0  # type: ignore[attr-defined]


def test_nan_angle_is_rejected() -> None:
    req = decode_request(
        b'{"id": 1, "cmd": "send_angles", "args": {"angles": [NaN, 0, 0, 0, 0, 0], "speed": 5}}'
    )
    with pytest.raises(ProtocolError) as ei:
        validate_args(req.cmd, req.args)
    assert ei.value.code is ErrorCode.ANGLE_OUT_OF_RANGE


def test_every_command_has_an_args_model() -> None:
    for cmd in (
        "hello",
        "get_angles",
        "send_angles",
        "set_gripper_state",
        "set_gripper_value",
        "get_gripper_value",
        "set_fresh_mode",
        "get_fresh_mode",
        "is_moving",
        "power_on",
        "release_all_servos",
        "stop",
        "stats",
    ):
        assert cmd in ARGS_MODELS


@given(
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-400, max_value=400),
        min_size=6,
        max_size=6,
    )
)
def test_angle_limits_property(angles: list[float]) -> None:
    inside = all(lo <= a <= hi for a, lo, hi in zip(angles, JOINT_MIN, JOINT_MAX, strict=True))
    try:
        validate_args("send_angles", {"angles": angles, "speed": 20})
        accepted = True
    except ProtocolError as exc:
        assert exc.code is ErrorCode.ANGLE_OUT_OF_RANGE
        accepted = False
    assert accepted == inside


def test_encode_rejects_nan_in_plain_dicts() -> None:
    with pytest.raises(ValueError):
        encode({"id": 1, "ok": True, "result": float("nan")})
    assert json.loads(encode({"id": 1, "ok": True, "result": None})) == {
        "id": 1,
        "ok": True,
        "result": None,
    }


@pytest.mark.parametrize(
    "result",
    [
        None,
        [1.5, -0.0, 12.34, 1e-7, 123456.789, -30.0],
        float("nan"),
        float("-inf"),
        10**30,
        True,
        'é\u2028"',
        {"a": (1, 2), "b": [None, {"c": float("inf")}]},
        ErrorCode.BUSY,
        (),
    ],
)
def test_encode_ok_is_the_ok_response_line_byte_for_byte(result: object) -> None:
    """The daemon's hot path skips the model; what goes on the wire must not change."""
    assert encode_ok(41, result) == encode(ok_response(41, result))
    assert encode_ok(41, result) == ok_response(41, result).model_dump_json().encode() + b"\n"


def test_encode_of_a_model_is_its_model_dump_json() -> None:
    for msg in (
        Request(id=7, cmd="send_angles", args={"angles": HOME, "speed": 20}),
        error_response(None, ErrorCode.BUSY, "someone élse"),
        ok_response(2, {"x": [1, 2.5]}),
    ):
        assert encode(msg) == msg.model_dump_json().encode() + b"\n"


def test_no_args_commands_still_reject_any_argument() -> None:
    assert isinstance(validate_args("get_angles", {}), NoArgs)
    with pytest.raises(ProtocolError) as ei:
        validate_args("get_angles", {"x": 1}, 3)
    assert (
        ei.value.code is ErrorCode.BAD_ARGS
        and "'x'" in ei.value.message
        and ei.value.request_id == 3
    )
