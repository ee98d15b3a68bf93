"""The event contract: every event of docs/recorder.md parses; hostile datagrams raise EventError only."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mecharm.recorder.events import (
    FRAME_LOG_COLUMNS,
    MAX_EVENT_BYTES,
    STATES_COLUMNS,
    Arrival,
    Commanded,
    EventError,
    FrameReply,
    FrameRequest,
    Gripper,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
    is_known_reason,
    parse_event,
    parse_frame_reply,
)

GOOD = [
    TrialStart(run_stem="run_0001_20260101_120000"),
    TrialEnd(run_stem="run_0001_20260101_120000"),
    Stage(stage="servo_place"),
    Commanded(
        angles=[1, 2.5, -3, 4, 5, -30],
        speed=20,
        ts_send=1.0,
        ts_arrival=2.0,
        attempt=2,
        arrived=True,
        note="approach",
    ),
    Commanded(angles=[0, 0, 0, 0, 0, 0], ts_arrival=None, arrived=False),
    Arrival(ts_send=1.0, ts_arrival=2.0, attempt=1, arrived=True, note="approach"),
    Arrival(ts_send=1.0, arrived=False),
    Gripper(state=20, note="grasp:close: grasp"),
    Gripper(state=100),
    Measured(angles=[0.1, 87.7, -38.3, 18.6, -45.1, -30.0]),
    FrameRequest(tag="servo_place_side", reply_port=40000),
]


@pytest.mark.parametrize("event", GOOD, ids=lambda e: e.type)
def test_round_trip(event):
    back = parse_event(event.model_dump_json().encode())
    assert back == event
    assert type(back) is type(event)


def test_columns_are_the_contract():
    assert (
        tuple(
            [
                "ts",
                "event_type",
                "stage",
                "j0",
                "j1",
                "j2",
                "j3",
                "j4",
                "j5",
                "speed",
                "gripper_state",
                "ts_send",
                "ts_arrival",
                "attempt",
                "arrived",
                "note",
            ]
        )
        == STATES_COLUMNS
    )
    assert FRAME_LOG_COLUMNS[:2] == ("frame_idx", "capture_ts")
    spec_fields = [
        "run_stem",
        "started_ts",
        "ended_ts",
        "elapsed_sec",
        "frames_captured",
        "frames_written",
        "effective_fps",
        "container_fps",
        "width",
        "height",
        "codec",
        "status",
        "recording_path",
    ]
    assert list(RecordingMeta.model_fields)[: len(spec_fields)] == spec_fields


def test_ts_defaults_to_now_and_extra_fields_are_ignored():
    ev = parse_event(b'{"type":"stage","stage":"stage1","future_field":1}')
    assert isinstance(ev, Stage) and ev.ts > 1.6e9


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1,2]", "must be a JSON object"),
        (b'"x"', "must be a JSON object"),
        (b'{"stage":"x"}', "no string field 'type'"),
        (b'{"type":7}', "no string field 'type'"),
        (b'{"type":"launch_missiles"}', "unknown event type"),
        (b'{"type":"trial_start"}', "run_stem"),
        (b'{"type":"trial_start","run_stem":"../../etc"}', "run_stem"),
        (b'{"type":"trial_start","run_stem":"/etc/passwd"}', "run_stem"),
        (b'{"type":"trial_start","run_stem":""}', "run_stem"),
        (b'{"type":"trial_start","run_stem":"a\\u0000b"}', "run_stem"),
        (json.dumps({"type": "trial_start", "run_stem": "a" * 5000}).encode(), "run_stem"),
        (b'{"type":"trial_start","run_stem":12}', "run_stem"),
        (b'{"type":"frame_request","tag":"x","reply_port":"5000"}', "reply_port"),
        (b'{"type":"frame_request","tag":"x","reply_port":70000}', "reply_port"),
        (b'{"type":"frame_request","tag":"x","reply_port":0}', "reply_port"),
        (b'{"type":"frame_request","tag":"x","reply_port":53}', "reply_port"),
        (b'{"type":"frame_request","tag":"x","reply_port":true}', "reply_port"),
        (b'{"type":"frame_request","tag":"x","reply_port":5000.5}', "reply_port"),
        (b'{"type":"frame_request","tag":"..","reply_port":5000}', "tag"),
        (b'{"type":"frame_request","tag":"a/b","reply_port":5000}', "tag"),
        (b'{"type":"commanded","angles":[1,2,3]}', "angles"),
        (b'{"type":"commanded","angles":[1,2,3,4,5,NaN]}', "angles"),
        (b'{"type":"commanded","angles":[1,2,3,4,5,"6"]}', "angles"),
        (b'{"type":"commanded","angles":[0,0,0,0,0,0],"speed":0}', "speed"),
        (b'{"type":"commanded","angles":[0,0,0,0,0,0],"arrived":"yes"}', "arrived"),
        (b'{"type":"stage","stage":"x","ts":"yesterday"}', "ts"),
        (b'{"type":"stage","stage":"x","ts":-5}', "ts"),
        (b'{"type":"stage","stage":"a\\nb"}', "stage"),
        (b'{"type":"gripper","state":"close"}', "state"),  # the value sent, never a word
        (b'{"type":"gripper","state":101}', "state"),
        (b'{"type":"gripper","state":20.5}', "state"),
        (b'{"type":"arrival","arrived":true}', "ts_send"),
        (b" " * (MAX_EVENT_BYTES + 1), "exceeds"),
    ],
)
def test_hostile_datagrams_are_rejected_with_a_clear_reason(data, message):
    with pytest.raises(EventError, match=message):
        parse_event(data)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
            lambda inner: (
                st.lists(inner, max_size=6)
                | st.dictionaries(st.text(max_size=12), inner, max_size=6)
            ),
            max_leaves=20,
        ).map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["trial_start", "frame_request", "commanded", "stage"]),
                "run_stem": st.text(),
                "tag": st.text(),
                "reply_port": st.integers(),
                "angles": st.lists(st.floats(), max_size=8),
            }
        ).map(lambda d: json.dumps(d).encode()),
    )
)
def test_parse_event_only_ever_raises_event_error(data):
    try:
        ev = parse_event(data)
    except EventError:
        return
    # anything accepted carries only safe names
    for name in ("run_stem", "tag"):
        value = getattr(ev, name, None)
        if value is not None:
            assert (
                "/" not in value
                and ".." not in value
                and "\x00" not in value
                and 0 < len(value) <= 128
            )


def test_frame_reply_parsing():
    ok = FrameReply(path="/x.jpg", capture_ts=1.0, frame_age_ms=3.0, reason="ok", tag="t")
    assert parse_frame_reply(ok.model_dump_json().encode()) == ok and ok.ok
    assert parse_frame_reply(b'{"reason":"exception:OSError"}').reason == "exception:OSError"
    for bad in (
        b"{",
        b'{"path":"x"}',
        b'{"reason":"bogus"}',
        b'{"reason":"ok","capture_ts":"now"}',
    ):
        with pytest.raises(EventError, match="malformed"):
            parse_frame_reply(bad)
    assert is_known_reason("stale_frame") and is_known_reason("exception:ValueError")
    assert (
        not is_known_reason("exception:")
        and not is_known_reason("whatever")
        and not is_known_reason(3)
    )


def test_construction_is_lax_for_senders_parsing_is_strict():
    import numpy as np

    ev = Commanded(
        angles=list(np.array([1, 2, 3, 4, 5, 6.5])),
        speed=np.int64(20),
        attempt=np.int64(2),
        arrived=np.bool_(True),
        ts_send=np.float64(3.0),
    )
    assert ev.speed == 20 and ev.arrived is True and ev.angles[5] == 6.5
    assert parse_event(ev.model_dump_json().encode()) == ev
    with pytest.raises(EventError, match="speed"):
        parse_event(b'{"type":"commanded","angles":[0,0,0,0,0,0],"speed":"20"}')
