"""The recorder: an observer process that owns the side camera (docs/recorder.md).

It listens for the runtime's UDP events and writes one folder per trial:
``episode.mp4`` (H.264, fragmented MP4, capture-time PTS), ``frame_log.csv``,
``states.csv``, ``recording_meta.json`` and ``extracted/`` frame snapshots.
Other packages import the wire contract from ``mecharm.recorder.events``, the client
from ``mecharm.recorder.sender`` and camera sources from ``mecharm.cameras``.
"""

from __future__ import annotations

__all__: list[str] = []
