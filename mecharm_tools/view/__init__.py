"""Rerun recordings of trials: build one from a trial's files, or follow trials live.

``trialfiles`` reads a trial's files tolerantly, ``rerunlog`` logs them to a
``rerun.RecordingStream``, ``follow`` tails growing traces, ``cli`` is
`mecharm view` (docs/viewing.md).
"""
