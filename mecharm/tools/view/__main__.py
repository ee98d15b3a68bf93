"""`python -m mecharm.tools.view ...`: the same as `mecharm view ...` (mecharm/tools/view/cli.py)."""

from mecharm.tools.view.cli import main

raise SystemExit(main())
