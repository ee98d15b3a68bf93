"""daemon_pi."""
