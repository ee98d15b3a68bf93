"""A policy module whose own code fails on import (tests/tasks/test_rollout.py): the rollout
says so in one line instead of a traceback."""

raise RuntimeError("broken on import")
