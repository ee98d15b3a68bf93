"""mecharm_runtime."""
