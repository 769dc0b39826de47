"""How numbers are written as text, in one place.

    num(x)   4 significant digits, '-' (or `missing`) for None: the old -> new tables of baselines
             diffs, the bisection's figures, the rehearsal's summary
    fmt(x)   3 significant digits, thousands grouped, counts without a decimal point, '–' for a
             missing value (None or NaN): every table of summary.md, report.html and the history page

Tables of figures use these two; a message formats its own figures where it says them.
"""

from __future__ import annotations

import math
from typing import Any


def num(x: Any, missing: str = "-") -> str:
    """A float to 4 significant digits, anything else (an int, a label) as it is, None as `missing`."""
    if x is None:
        return missing
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def present(x: Any) -> bool:
    """A value that is there: not None and not NaN (what a table read back from CSV or JSON holds)."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def fmt(x: Any) -> str:
    """Three significant digits, thousands grouped, whole numbers (counts) without a decimal point."""
    if not present(x):
        return "–"
    x = float(x)
    if x == int(x):
        return f"{int(x):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:#.3g}".rstrip(".")  # 2.40, not 2.4: columns of numbers line up by eye


def with_interval(value: Any, low: Any, high: Any) -> str:
    """'1.09 [0.81, 1.53]': a figure and its interval where it has one."""
    return fmt(value) + (f" [{fmt(low)}, {fmt(high)}]" if present(low) and present(high) else "")
