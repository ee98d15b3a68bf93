"""mechArm 270 pick-and-place rig: one namespace for the product's packages.

``common`` (shared ground), ``cameras``, ``sim`` (the simulated rig), ``daemon`` (the Pi's
arm daemon), ``recorder`` (the side-camera observer), ``runtime`` (the trials and their
tasks) and ``tools`` (the ``mecharm`` command); the import rules between them are in
docs/architecture.md. Importing this package imports none of them.
"""
