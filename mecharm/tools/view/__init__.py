"""Rerun recordings of trials: build one from a trial's files, or follow trials live.

``trialfiles`` reads a trial's files tolerantly, ``rerunlog`` logs them to a
``rerun.RecordingStream``, ``follow`` tails growing traces, ``build`` builds or follows,
``cli`` is `mecharm view`; ``viewer`` (is rerun installed, where is its viewer, is a
viewer URL valid) and ``cli`` import no rerun, so the runtime and an install without
it can ask them (docs/viewing.md).
"""
