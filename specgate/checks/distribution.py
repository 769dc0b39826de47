"""Acceptance as a distribution, judged with each (method, category) of the acceptance gate: each request's
acceptance length against its stored figure, and the category's acceptance by output window against its stored
windows (specgate.figures.distribution makes the figures from the greedy pass's own requests).

    each request   where the profile's [tolerance] request_acceptance_rtol is set (profiles whose acceptance is
                   deterministic, shown by A/A runs: float32 CPU): a request whose acceptance length falls below
                   stored x (1 - request_acceptance_rtol) fails with its prompt, its figure and the stored one, the
                   output window where it first accepted less and the text there
    by window      the category's tokens per step over its requests' steps in each output window, held to its
                   stored value x (1 - position_rtol): a drafter that loses track late in the output fails naming
                   the window even while the category's mean holds
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specgate.checks import ROUNDING, Row
from specgate.figures import distribution
from specgate.figures.acceptance import AcceptanceResult

LOW_QUANTILE = 0.1  # the distribution's low end, shown with its median
SHOWN = 5  # failing requests quoted in a message


def _span(i: int, window: int) -> str:
    return f"output tokens {i * window}-{(i + 1) * window - 1}"


def _first_lower(now: Sequence[float | None], then: Sequence[float | None]) -> int | None:
    for i, (a, b) in enumerate(zip(now, then)):
        if a is not None and b is not None and a < b - ROUNDING:
            return i
    return None


def judge(
    where: str,
    result: AcceptanceResult,
    stored: Mapping | None,
    request_rtol: float,
    window_rtol: float,
    text: Callable[[str, int, int], str],
) -> tuple[list[Row], list[str]]:
    """(rows, failures) of one (method, category): `where` names it in messages, `text(prompt id, start, end)` the
    output there."""
    if not result.requests:
        return [], []
    window = result.window_tokens
    lengths = {pid: r.length for pid, r in result.requests.items() if r.length is not None}
    rows = [
        Row("request_acceptance_median", distribution.quantile(list(lengths.values()), 0.5)),
        Row(
            f"request_acceptance_p{round(LOW_QUANTILE * 100)}",
            distribution.quantile(list(lengths.values()), LOW_QUANTILE),
        ),
    ]
    stored = stored or {}
    same_windows = stored.get("window_tokens") == window
    failures = []
    kept = stored.get("requests") or {}
    if request_rtol > 0:
        lower = []
        for pid, r in sorted(result.requests.items(), key=lambda item: item[1].length or 0.0):
            then = kept.get(pid)
            if not then or then[0] is None or r.length is None:
                continue
            floor = then[0] * (1 - request_rtol)
            if r.length >= floor - ROUNDING:
                continue
            said = f"prompt {pid}: acceptance length {r.length:.4g} against {then[0]:.4g} stored (floor {floor:.4g})"
            i = _first_lower(r.windows, then[1:]) if same_windows else None
            if i is not None:
                said += (
                    f"; it first accepted less at {_span(i, window)} ({r.windows[i]:.4g} tokens a step against "
                    f"{then[1 + i]:.4g}): {text(pid, i * window, (i + 1) * window)!r}"
                )
            lower.append(said)
        if lower:
            more = f"\n... and {len(lower) - SHOWN} more" if len(lower) > SHOWN else ""
            failures.append(
                f"{where}: {len(lower)} of {len(result.requests)} requests accept less than stored "
                f"([tolerance] request_acceptance_rtol {request_rtol}; sources: {_sources(result)}):\n"
                + "\n".join(lower[:SHOWN])
                + more
            )
    now = distribution.windows(result.requests)
    then = stored.get("windows") if same_windows else None
    for i, value in enumerate(now):
        base = then[i] if then and i < len(then) else None
        bound = None if base is None else base * (1 - window_rtol)
        low = bound is not None and value is not None and value < bound - ROUNDING
        rows.append(Row("window_tokens_per_step", value, base, bound, position=i, failing=low))
        if low:
            failures.append(
                f"{where}: {_span(i, window)}: {value:.4g} tokens a step against {base:.4g} stored (floor "
                f"{bound:.4g}, position_rtol {window_rtol}) over its {len(result.requests)} requests"
            )
    return rows, failures


def _sources(result: AcceptanceResult) -> str:
    lengths = sorted({r.source for r in result.requests.values()})
    positions = sorted({r.positions for r in result.requests.values()})
    return f"lengths from {'+'.join(lengths)}, windows from {'+'.join(positions)}"
