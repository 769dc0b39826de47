"""Two releases compared paired (the rehearsal): each figure of the new release against the same figure of
the old one, measured beside it on this machine, never against a stored baseline. A comparison's result is a
change (unchanged, better or worse beyond the profile's tolerance) with the bound it was held to; `row` is
how the results table shows it (a checks.Row under a judgement: pass, or fail where it got worse).

    change_of(low, high, rtol)          a ratio new / old (its interval) against the tolerance
    acceptance(new, old, rtol)          mean acceptance length, floor old x (1 - rtol)
    kv_capacity(new, old, rtol)         KV-cache tokens, floor old x (1 - rtol)
    process_memory(new, old, tol)       the servers' peak MiB, ceiling old x (1 + memory_rtol) + slack
    row(method, gate, key, ...)         the results table's row of one comparison
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from specgate.checks import Judgement, Row, Verdict
from specgate.checks.memory import Ceiling


class Change(str, enum.Enum):
    UNCHANGED = "unchanged"
    BETTER = "better"
    WORSE = "worse"


@dataclass(frozen=True)
class Paired:
    """One comparison: its change, what it says, the bound the new figure was held to."""

    change: Change
    message: str
    bound: float | None = None


def change_of(ratio_low: float, ratio_high: float, rtol: float, higher_is_better: bool = True) -> Change:
    """A change beyond `rtol` (the whole interval past it) is better or worse; else unchanged."""
    if ratio_high < 1 - rtol:
        return Change.WORSE if higher_is_better else Change.BETTER
    if ratio_low > 1 / (1 - rtol):
        return Change.BETTER if higher_is_better else Change.WORSE
    return Change.UNCHANGED


def acceptance(new: float | None, old: float | None, rtol: float) -> Paired:
    if new is None or old is None:
        if new == old:
            return Paired(Change.UNCHANGED, "no drafts on either side")
        return Paired(Change.WORSE, "no drafts on one side")
    ratio = new / old
    return Paired(change_of(ratio, ratio, rtol), f"{ratio - 1:+.1%} (acceptance_rtol {rtol})", old * (1 - rtol))


def kv_capacity(new: float, old: float, rtol: float) -> Paired:
    ratio = new / old
    return Paired(change_of(ratio, ratio, rtol), f"{ratio - 1:+.1%} (memory_rtol {rtol})", old * (1 - rtol))


def process_memory(new_mib: float, old_mib: float, tol) -> Paired:
    """The memory gate's own ceiling (checks.memory.Ceiling), the old release's peak as its baseline; as far
    below the old peak it is better."""
    ceiling = Ceiling("peak process memory", new_mib, old_mib, tol.memory_rtol, tol.process_slack_mib, "MiB")
    if ceiling.fails():
        change = Change.WORSE
    elif new_mib < old_mib * (1 - tol.memory_rtol) - tol.process_slack_mib:
        change = Change.BETTER
    else:
        change = Change.UNCHANGED
    message = f"{new_mib:.0f} vs {old_mib:.0f} MiB (memory_rtol {tol.memory_rtol} + {tol.process_slack_mib} MiB)"
    return Paired(change, message, ceiling.ceiling)


def row(
    method: str,
    gate: str,
    key: str,
    metric: str,
    new,
    old,
    change: Change,
    message: str,
    bound: float | None = None,
    ci: tuple = (None, None),
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The results table's row: the change and its message, pass unless it got worse."""
    text = f"{Change(change).value}" + (f": {message}" if message else "")
    verdict = Verdict.FAIL if change == Change.WORSE else Verdict.PASS
    figure = Row(metric, new, old, bound, ci[0], ci[1], concurrency=concurrency, headline=True)
    return Judgement(gate, method, key, verdict, [text], [figure]).table_rows()[0]
