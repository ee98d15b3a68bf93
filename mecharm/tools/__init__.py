"""Tools around the rig that no trial imports: the demo launcher, dataset export,
trace replay, the FK table tools and the ledger view (the ``mecharm`` command)."""
