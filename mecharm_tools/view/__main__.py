"""`python -m mecharm_tools.view ...`: the same as `mecharm view ...` (mecharm_tools/view/cli.py)."""

from mecharm_tools.view.cli import main

raise SystemExit(main())
