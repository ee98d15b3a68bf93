"""Wire models of the arm protocol (newline-delimited JSON over TCP), defined once.

The daemon validates every request with these models before anything reaches
the arm; the runtime's client imports the same models to build requests and
parse responses. See docs/protocol.md for the prose version.

One line = one JSON object terminated by ``\\n``, at most ``MAX_LINE_BYTES``.
Request ``{"id": int, "cmd": str, "args": {...}}``; response
``{"id": int, "ok": true, "result": ...}`` or
``{"id": int|null, "ok": false, "error": {"code": str, "message": str}}``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError, to_json

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN

__all__ = [
    "ARGS_MODELS",
    "COMMANDS",
    "DEFAULT_PORT",
    "JOINT_MAX",
    "JOINT_MIN",
    "MAX_LINE_BYTES",
    "MAX_REQUEST_ID",
    "PROTOCOL_VERSION",
    "ErrorCode",
    "ErrorInfo",
    "ErrorResponse",
    "HelloArgs",
    "HelloResult",
    "NoArgs",
    "OkResponse",
    "ProtocolError",
    "Request",
    "Response",
    "SendAnglesArgs",
    "SetFreshModeArgs",
    "SetGripperStateArgs",
    "SetGripperValueArgs",
    "decode_request",
    "decode_response",
    "encode",
    "encode_ok",
    "error_response",
    "ok_response",
    "validate_args",
    "wire_angles",
]

PROTOCOL_VERSION = 1
DEFAULT_PORT = 5555
#: Longest accepted line, newline included. Longer lines are answered with
#: ``line_too_long`` and discarded up to the next newline; the connection stays open.
MAX_LINE_BYTES = 64 * 1024
#: Request ids are integers within ±(2**53 - 1): every JSON implementation reads them
#: exactly. A larger one is a ``bad_request`` (and is not echoed back).
MAX_REQUEST_ID = 2**53 - 1


def wire_angles(angles: Sequence[float]) -> list[float]:
    """The angles pymycobot really puts on the wire for ``angles``: it encodes
    ``int(angle * 100)``, so each is truncated toward zero to 0.01°. The daemon
    answers ``send_angles`` with these, and that is what the dataset records."""
    return [int(float(a) * 100) / 100.0 for a in angles]


class ErrorCode(StrEnum):
    """Every ``error.code`` the daemon sends. One name, one meaning."""

    BAD_JSON = "bad_json"  # line is not a JSON object
    LINE_TOO_LONG = "line_too_long"  # line longer than MAX_LINE_BYTES
    BAD_REQUEST = "bad_request"  # JSON object without a valid id/cmd/args envelope
    UNKNOWN_COMMAND = "unknown_command"
    BAD_ARGS = "bad_args"  # missing, extra or mistyped argument
    ANGLE_OUT_OF_RANGE = "angle_out_of_range"  # outside the SDK joint limits
    OUTSIDE_ENVELOPE = "outside_envelope"  # inside the SDK limits, outside the daemon's envelope
    BAD_SPEED = "bad_speed"  # speed not an int in 1..100
    BAD_GRIPPER_VALUE = "bad_gripper_value"  # gripper value not an int in 0..100
    UNAUTHORIZED = "unauthorized"  # token required and not (correctly) given
    BUSY = "busy"  # another control client holds the slot (or too many are waiting); closed
    ARM_NO_REPLY = "arm_no_reply"  # SDK returned -1 / [] (firmware did not answer)
    SERIAL_ERROR = "serial_error"  # the serial port failed
    ARM_UNAVAILABLE = "arm_unavailable"  # the serial link is down and being reopened; nothing sent
    SHUTTING_DOWN = "shutting_down"  # daemon is stopping; request not executed
    IDLE_TIMEOUT = "idle_timeout"  # the client sent nothing for idle_timeout_s; connection closed
    INTERNAL = "internal"  # a bug; logged with its traceback


class ProtocolError(ValueError):
    """A message could not be accepted; ``code`` is the ErrorCode to answer with."""

    def __init__(self, code: ErrorCode, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


# ---------------------------------------------------------------- envelope


class Request(BaseModel):
    """One client request. ``args`` is validated per command by ``validate_args``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: int = Field(ge=-MAX_REQUEST_ID, le=MAX_REQUEST_ID)
    cmd: str = Field(min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)


class OkResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    ok: Literal[True] = True
    result: Any = None


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str


class ErrorResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int | None
    ok: Literal[False] = False
    error: ErrorInfo


Response = OkResponse | ErrorResponse


# ---------------------------------------------------------------- args per command


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoArgs(_Args):
    """Commands that take no arguments."""


#: NoArgs has no fields, so every valid instance is alike: validate_args shares this one.
_NO_ARGS = NoArgs()


class HelloArgs(_Args):
    token: str | None = Field(default=None, max_length=4096)
    client: str | None = Field(default=None, max_length=200)


Speed = Field(ge=1, le=100, description="SDK speed, int 1..100")


class SendAnglesArgs(_Args):
    angles: list[float] = Field(min_length=6, max_length=6)
    speed: int = Speed

    @field_validator("angles")
    @classmethod
    def _within_limits(cls, v: list[float]) -> list[float]:
        for i, a in enumerate(v):
            if not math.isfinite(a):
                raise PydanticCustomError(
                    "angle_out_of_range", "angles[{i}] is not finite", {"i": i}
                )
            if not JOINT_MIN[i] <= a <= JOINT_MAX[i]:
                raise PydanticCustomError(
                    "angle_out_of_range",
                    "angles[{i}] = {a} outside the SDK limits [{lo}, {hi}] of j{i}",
                    {"i": i, "a": a, "lo": JOINT_MIN[i], "hi": JOINT_MAX[i]},
                )
        return v


class SetGripperStateArgs(_Args):
    state: Literal[0, 1] = Field(description="0 = open, 1 = close")
    speed: int = Speed


class SetGripperValueArgs(_Args):
    value: int = Field(ge=0, le=100, description="0 closed .. 100 open")
    speed: int = Speed


class SetFreshModeArgs(_Args):
    mode: Literal[0, 1] = Field(description="1 = newest command wins, 0 = queue")


#: Every command the daemon knows, with its argument model.
ARGS_MODELS: dict[str, type[_Args]] = {
    "hello": HelloArgs,
    "get_angles": NoArgs,
    "send_angles": SendAnglesArgs,
    "set_gripper_state": SetGripperStateArgs,
    "set_gripper_value": SetGripperValueArgs,
    "get_gripper_value": NoArgs,
    "set_fresh_mode": SetFreshModeArgs,
    "get_fresh_mode": NoArgs,
    "is_moving": NoArgs,
    "power_on": NoArgs,
    "release_all_servos": NoArgs,
    "stop": NoArgs,
    "stats": NoArgs,
    "ping": NoArgs,
}
COMMANDS: tuple[str, ...] = tuple(ARGS_MODELS)


# ---------------------------------------------------------------- results


class HelloResult(BaseModel):
    protocol_version: int
    backend: str
    joint_min: list[float]
    joint_max: list[float]
    commands: list[str]
    capabilities: dict[str, Any]
    authenticated: bool
    #: the safety envelope every send_angles must keep to (``Envelope.to_wire()``);
    #: absent from daemons older than it (docs/protocol.md, "hello")
    envelope: dict[str, Any] | None = None
    #: how many times faster than real time the arm moves: 1.0 for the real arm, the sim arm's
    #: scale; the runtime divides its waits by it (docs/setup.md, "Time scale"); absent from
    #: daemons older than it (then ``capabilities.time_scale``, else 1.0)
    time_scale: float = 1.0


# ---------------------------------------------------------------- helpers


def encode(msg: BaseModel | dict[str, Any]) -> bytes:
    """One wire line (UTF-8 JSON + ``\\n``) for a model or a plain dict."""
    if isinstance(msg, BaseModel):
        # the model's own serializer, straight: what model_dump_json() runs, minus its wrapper
        return msg.__pydantic_serializer__.to_json(msg) + b"\n"
    data = json.dumps(msg, separators=(",", ":"), allow_nan=False)
    return data.encode("utf-8") + b"\n"


def encode_ok(request_id: int, result: Any) -> bytes:
    """``encode(ok_response(request_id, result))`` byte for byte, without building the model.

    The daemon answers every successful request with this (its hot path). ``request_id``
    must already be a validated int. Non-finite floats become ``null`` as in the model.
    """
    return to_json({"id": request_id, "ok": True, "result": result}, inf_nan_mode="null") + b"\n"


def ok_response(request_id: int, result: Any) -> OkResponse:
    return OkResponse(id=request_id, result=result)


def error_response(request_id: int | None, code: ErrorCode | str, message: str) -> ErrorResponse:
    return ErrorResponse(
        id=request_id, error=ErrorInfo(code=ErrorCode(code).value, message=message)
    )


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a JSON object that names a key twice is refused, not read as
    "the last one wins" (``{"cmd": "get_angles", "cmd": "stop"}`` is ambiguous). Costs a
    Python call per object, so ``_loads_object`` uses it only when the line has more
    colons than the parsed envelope has keys."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _keys_seen(obj: dict[str, Any]) -> int:
    """Distinct keys of a request's (or reply's) envelope and of its ``args``. Every key of a
    JSON line is followed by its own colon and other colons are only inside strings, so a
    line with a key named twice has more colons than this; one without has as many, unless
    it nests deeper objects or has colons in its strings."""
    args = obj.get("args")
    return len(obj) + (len(args) if type(args) is dict else 0)


def _loads_object(line: bytes | str, what: str) -> dict[str, Any]:
    if isinstance(line, bytes | bytearray):
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(
                ErrorCode.LINE_TOO_LONG, f"{what} is {len(line)} bytes (max {MAX_LINE_BYTES})"
            )
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                ErrorCode.BAD_JSON, f"{what} is not UTF-8: {exc.reason} at byte {exc.start}"
            ) from None
    try:
        obj = json.loads(line)
        if isinstance(obj, dict) and line.count(":") != _keys_seen(obj):
            # more colons than distinct keys: a key named twice, or only a nested object or
            # a colon inside a string; parse again, refusing duplicates (the rare path)
            obj = json.loads(line, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ProtocolError(
            ErrorCode.BAD_REQUEST,
            f"{what} names the key {exc.key[:64]!r} twice in one object; send each key once",
            _id_of(line),
        ) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise ProtocolError(ErrorCode.BAD_JSON, f"{what} is not valid JSON: {msg}") from None
    except ValueError:  # an integer of more than sys.get_int_max_str_digits() (4300) digits
        raise ProtocolError(
            ErrorCode.BAD_REQUEST,
            f"{what} holds an integer of more than {sys.get_int_max_str_digits()} digits; "
            f"ids are integers within ±{MAX_REQUEST_ID} and no argument needs more",
        ) from None
    if not isinstance(obj, dict):
        raise ProtocolError(
            ErrorCode.BAD_JSON, f"{what} must be a JSON object, got {type(obj).__name__}"
        )
    return obj


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its list of (key, value) pairs (``_id_of``)."""


def _valid_id(raw_id: Any) -> int | None:
    """``raw_id`` when it is an id the daemon may echo back, else None."""
    if type(raw_id) is int and -MAX_REQUEST_ID <= raw_id <= MAX_REQUEST_ID:
        return raw_id
    return None


def _id_of(line: str) -> int | None:
    """The request's id for an error reply, read again without the duplicate-key check
    (error path only); None when it cannot be read or is itself the duplicated key."""
    try:
        pairs = json.loads(line, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):  # cannot happen after a duplicate key; to be sure
        return None
    if not isinstance(pairs, _Pairs):  # the duplicate was in an object inside an array
        return None
    ids = [v for k, v in pairs if k == "id"]
    return _valid_id(ids[0]) if len(ids) == 1 else None


def _first_error(exc: ValidationError) -> tuple[str, str, str]:
    """(field path, error type, message) of the first pydantic error."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "<root>"
    return loc, err["type"], err["msg"]


def decode_request(line: bytes | str) -> Request:
    """Parse one request line. Raises ProtocolError (bad_json, line_too_long, bad_request)."""
    obj = _loads_object(line, "request")
    try:
        return Request.__pydantic_validator__.validate_python(
            obj
        )  # model_validate() minus its wrapper
    except ValidationError as exc:
        loc, typ, msg = _first_error(exc)
        what = "unknown field" if typ == "extra_forbidden" else msg
        if loc == "id":
            what = f"{what} (ids are integers within ±{MAX_REQUEST_ID})"
        raise ProtocolError(
            ErrorCode.BAD_REQUEST, f"request field {loc!r}: {what}", _valid_id(obj.get("id"))
        ) from None


def validate_args(cmd: str, args: dict[str, Any], request_id: int | None = None) -> BaseModel:
    """Validate ``args`` for ``cmd``; raise ProtocolError with the most specific code.

    Codes: unknown_command, angle_out_of_range, bad_speed, bad_gripper_value, bad_args.
    """
    model = ARGS_MODELS.get(cmd)
    if model is None:
        raise ProtocolError(ErrorCode.UNKNOWN_COMMAND, f"unknown command {cmd[:64]!r}", request_id)
    if (
        model is NoArgs and not args
    ):  # the common case (get_angles, is_moving, ...): nothing to check
        return _NO_ARGS
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        loc, typ, msg = _first_error(exc)
        field = loc.split(".")[0]
        if typ == "missing":
            code, text = ErrorCode.BAD_ARGS, f"{cmd}: missing argument {loc!r}"
        elif typ == "extra_forbidden":
            code, text = ErrorCode.BAD_ARGS, f"{cmd}: unknown argument {loc!r}"
        elif typ == "angle_out_of_range":
            code, text = ErrorCode.ANGLE_OUT_OF_RANGE, f"{cmd}: {msg}"
        elif field == "speed":
            code, text = ErrorCode.BAD_SPEED, f"{cmd}: speed must be an int in 1..100 ({msg})"
        elif field == "value" and cmd == "set_gripper_value":
            code, text = (
                ErrorCode.BAD_GRIPPER_VALUE,
                f"{cmd}: value must be an int in 0..100 ({msg})",
            )
        else:
            code, text = ErrorCode.BAD_ARGS, f"{cmd}: argument {loc!r}: {msg}"
        raise ProtocolError(code, text, request_id) from None


def decode_response(line: bytes | str) -> OkResponse | ErrorResponse:
    """Parse one response line (client side). Raises ProtocolError(bad_json/bad_request)."""
    obj = _loads_object(line, "response")
    try:
        if obj.get("ok") is True:
            return OkResponse.model_validate(obj)
        return ErrorResponse.model_validate(obj)
    except ValidationError as exc:
        loc, _typ, msg = _first_error(exc)
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"response field {loc!r}: {msg}") from None
