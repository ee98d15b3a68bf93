"""The receiver → dispatcher stream: bounded, never blocking the receiver, drops counted."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from mecharm.recorder.events import Measured, Stage, TrialStart
from mecharm.recorder.sender import RecorderSender

STEM = "run_0001_20260101_120000"


@pytest.mark.anyio
async def test_a_full_event_buffer_drops_new_datagrams_and_counts_them(
    settings_factory, run_recorder, wait_for
):
    async with run_recorder(settings_factory(event_buffer=16)) as svc:
        receiver = svc._transport.get_protocol()
        addr = ("127.0.0.1", 40000)
        data = Measured(angles=[1, 2, 3, 4, 5, 6]).model_dump_json().encode()
        with capture_logs() as logs:
            # what the transport does, 100 times before the dispatcher gets a turn
            for _ in range(100):
                receiver.datagram_received(data, addr)
            # the idle dispatcher takes the first one directly, 16 wait in the buffer
            assert svc.counters.dropped_events == 83
            await wait_for(lambda: svc.counters.events == 17, what="the buffered datagrams handled")
        assert svc.status()["dropped_events"] == 83
        assert [e["event"] for e in logs].count("event_dropped") == 1  # rate-limited
        # and it keeps serving real datagrams
        s = RecorderSender(port=svc.port)
        s.notify(Stage(stage="stage1"))
        await wait_for(lambda: svc.counters.events == 18, what="a later datagram")
        assert svc.counters.dropped_events == 83


@pytest.mark.anyio
async def test_bursts_of_real_datagrams_are_all_handled(
    settings_factory, run_recorder, wait_for, data_root
):
    async with run_recorder(settings_factory()) as svc:
        with RecorderSender(port=svc.port) as tx:  # signed datagrams, sent back to back
            tx.notify(TrialStart(run_stem=STEM))
            for burst in range(20):  # bursts of 100: within any kernel receive buffer
                for i in range(100):
                    tx.notify(Measured(angles=[i, 0, 0, 0, 0, 0]))
                await wait_for(
                    lambda b=burst: svc.counters.events == 101 + 100 * b, what="a burst handled"
                )
        assert svc.counters.dropped_events == 0 and svc.counters.refused == {}
        trial = svc.trial
        assert trial is not None and trial.states_rows == 2001
