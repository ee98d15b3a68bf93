"""``mecharm fk``: build, import and inspect the FK table; hole map, clusters, fill."""
