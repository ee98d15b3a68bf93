"""mecharm.runtime."""
