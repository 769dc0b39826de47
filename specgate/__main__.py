"""`python -m specgate COMMAND ...`: the `specgate` command, as `python -m pip` is pip (for a venv whose
scripts are not on PATH)."""

import sys

from specgate.cli import main

if __name__ == "__main__":
    sys.exit(main())
