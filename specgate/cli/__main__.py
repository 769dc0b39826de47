"""`python -m specgate.cli COMMAND ...` (what ci/ scripts run from a venv without the console script)."""

import sys

from specgate.cli import main

sys.exit(main())
