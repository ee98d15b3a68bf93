"""A stand-in for lerobot 0.4.4's robot and camera interfaces (README.md beside it)."""
