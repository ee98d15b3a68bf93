"""Shared ground for the three processes: config loading, logging, safe file I/O,
signal handling and the arm's kinematic model.

Kept free of process-specific code so the Pi daemon, the recorder and the
runtime can all depend on it without depending on each other.
"""
