"""A run's outcome as data: the measurements table, the run record (run.json) and baselines.json in
results/<run-id>/, and the terminal summary.

The checks recorded every figure with the baseline and bound it was judged against (Judgement.rows);
this module only flattens them into the tidy table report.py renders, so a report can be rebuilt
from disk. The plugin hands over each test's outcome (run_record.Outcome) for the run record.
"""

from __future__ import annotations

import datetime as _dt
import io
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specgate import machine
from specgate.checks import Basis, drafting
from specgate.checks.speedup import COARSE
from specgate.figures.acceptance import DRAFT_SHARE
from specgate.gates import ACCEPTANCE, EQUIVALENCE, GATES, LOAD, MEMORY, SPEEDUP
from specgate.profile import BASELINE
from specgate.store import baselines
from specgate.store.run_record import GATE, Engine, KnownSeen, Outcome, RunRecord


def measurement_table(judgements):
    """One row per measured number, as the checks recorded it (value, baseline, bound, verdict)."""
    import pandas as pd

    return pd.DataFrame([row for j in judgements for row in j.table_rows()])


def summary_lines(session, outcomes=()) -> list[str]:
    """The terminal summary of a run: what was judged, engines, boot and shutdown, and each method's
    headline figures."""
    from specgate.report import judged_line

    host, plan, measured = session.host, session.plan, session.measured
    ran = [r for r in host.records.values() if r.boot_s and r.method != BASELINE]
    failed = [r for r in host.records.values() if r.boot_error]
    lines = (
        [f"{session.interrupted}: the run stopped there; what it measured until then follows"]
        if session.interrupted
        else []
    )
    lines += [judged_line(list(outcomes))] if outcomes else []
    lines += header_lines(session)
    lines += [
        f"profile {session.profile.name} ({session.profile.path}); results in {plan.out_dir}",
        *prompt_lines(session),
        f"engines booted: {host.engines_booted} (methods run: {len(ran)} + {len(host.records[BASELINE].boot_s)} "
        "baseline"
        f"{f'; {len(failed)} failed to boot' if failed else ''}); wall time {time.monotonic() - session.started:.0f} s",
    ]
    lines += diagnosis(session)
    lines += time_lines(session)
    for r in host.records.values():
        if plan.endpoints is not None:
            state = f"endpoint {plan.endpoints[r.method]}" if r.method in plan.endpoints else "no endpoint given"
        elif not r.boots:
            state = "not run"
        elif r.skipped_reason:
            state = f"skipped: {r.skipped_reason}"
        elif r.boot_error:
            state = f"boot failed: {r.boot_error.reason or r.boot_error}"
        elif r.died:
            state = f"{_wrong_before(session, r.method)}died: {r.died.reason}"
        else:
            state = f"boot {', '.join(f'{s:.1f}' for s in r.boot_s)} s" + (f" (runner {r.runner})" if r.runner else "")
            if r.longest_idle_s:
                state += f"; longest wait without progress {r.longest_idle_s:.1f} s"
            if r.shutdown:
                sd = r.shutdown
                state += (
                    f"; footprint {sd.footprint / 2**30:.2f} GiB; shutdown {sd.shutdown_s:.1f} s, "
                    f"not returned {sd.memory_not_returned / 2**30:.2f} GiB"
                )
            greedy = session.judgements.get((r.method, EQUIVALENCE, EQUIVALENCE.key()))
            counts = {row.metric: int(row.value) for row in greedy.rows} if greedy else {}
            if counts.get("compared"):
                near = counts["compared"] - counts["identical"] - counts["diverged"]
                state += (
                    f"; greedy: {counts['identical']}/{counts['compared']} identical, {near} near-ties, "
                    f"{counts['diverged']} diverged"
                )
        lines.append(f"  {r.method:<14} {state}")
        lines += _figure_lines(measured.get(r.method, {}), r.method == BASELINE, _across_runners(session, r.method))
    boots = {r.method: r.boots for r in host.records.values() if r.boots > 1}
    if boots:
        lines.append(f"  warning: booted more than once: {boots} (tests reordered, or an engine was lost)")
    return lines


def _wrong_before(session, method: str) -> str:
    """'load C=16: 42 prompts diverged, then ' where the load gate found wrong tokens in what a method's engine
    streamed (before it stopped, for the level where it stopped), else ''."""
    said = [
        f"load {key}: {row.value:.0f} prompts diverged"
        for (m, gate, key), j in session.judgements.items()
        if m == method and gate == LOAD
        for row in j.rows
        if row.metric == "diverged" and row.value
    ]
    return f"{', '.join(said)}, then " if said else ""


def _spent(bucket: str, seconds: float) -> str:
    # the models' revisions (the zoo's content hashes) take milliseconds: said in them, not as "0 s"
    return f"models {1000 * seconds:.0f} ms" if bucket == "models" else f"{bucket} {seconds:.0f} s"


def time_lines(session) -> list[str]:
    """Where the run's time went: engine boots, each gate's tests (scenarios and canaries apart), the rest."""
    if not session.spent:
        return []
    total = time.monotonic() - session.started
    order = ["boots", *(g for g in GATES if not g.scenario)]
    parts = sorted(session.spent.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
    rest = total - sum(session.spent.values())
    return [
        f"time: {', '.join(_spent(name, spent) for name, spent in parts)}, other {max(0.0, rest):.0f} s "
        f"(prompts, endpoint test, results; total {total:.0f} s)"
    ]


def header_lines(session) -> list[str]:
    """What the reader must know before the numbers: baselines from other machines, coarse speed
    judgements, baselines from another vLLM."""
    lines = session.header()
    if tolerances := session.profile.tolerance_file:
        whose = "this machine" if session.baselines.identity.id in Path(tolerances).name else "its hardware name"
        lines.append(f"tolerances calibrated for {whose} (specgate calibrate) held over the profile's: {tolerances}")
    if why := session.host.speed_unjudged(BASELINE):
        lines.append(f"speed not judged: {why}; outputs and acceptance are V2's own and judged")
    coarse = [j for j in session.judgements.values() if j.basis == Basis.COARSE and j.key != SPEEDUP.key(None)]
    if coarse and not session.baselines.borrowed.get(SPEEDUP):
        keys = ", ".join(dict.fromkeys(j.key for j in coarse))
        # why: a pass says it in a line of its own (after a caught canary's catch), a failure at its end
        why = next((m.split(COARSE, 1)[1].split("; held to")[0] for j in coarse for m in j.messages if COARSE in m), "")
        lines.append(
            f"speedups judged coarsely at {keys} (coarse_speedup_rtol "
            f"{session.profile.tolerance.coarse_speedup_rtol}): " + why
        )
    across = [
        f"{m} ({runners})"
        for m in dict.fromkeys(m for (m, g, _) in session.judgements if g == SPEEDUP)
        if m != BASELINE and (runners := _across_runners(session, m))
    ]
    if across:
        lines.append(
            f"speedups across model runners: {', '.join(across)}: vLLM ran these methods' engines on another "
            "model runner than the baseline engine's, so their speedups mix the two runners' step costs "
            "(docs/gpu-runners.md, 'Model runners')"
        )
    if upgrade := session.baselines.upgrade():
        lines.append(upgrade)
    if older := drafting.unjudged(session.judgements.values(), session.baselines.update_command):
        lines.append(older)
    lines += known_issue_lines(session)
    inputs = session.plan.inputs
    load = inputs.speedup_inputs()
    for role, notes in (
        ("equivalence and acceptance", inputs.notes()),
        ("speedup load", load.notes() if load is not inputs else []),
    ):
        lines += [f"{role} prompts: {note}" for note in notes]
    return lines


def known_issues(session) -> list:
    """Every known issue (checks.known.Seen) the run's checks met, in the order they were judged."""
    return [seen for j in session.judgements.values() for seen in getattr(j, "known", [])]


def known_issue_lines(session) -> list[str]:
    """One line per known issue of the profile that applies to the installed release: still present (for
    which methods), no longer reproducing (a failure until the entry goes), or not checked in this run."""
    from specgate.checks.known import PRESENT, version_of

    issues = session.profile.known_issues
    if not issues:
        return []
    seen = known_issues(session)
    release = session.host.release_of(BASELINE)
    lines = []
    for name, issue in issues.items():
        if version_of(release) not in issue.releases:
            continue
        mine = [s for s in seen if s.issue == name]
        present = [s.method for s in mine if s.status == PRESENT]
        gone = [s.method for s in mine if s.status != PRESENT]
        said = []
        if present:
            said.append(f"still present for {', '.join(present)}")
        if gone:
            said.append(f"no longer reproduces for {', '.join(gone)}: remove the entry")
        lines.append(
            f"known issue {name} of {release} ({issue.check}: {', '.join(issue.cases)}): "
            + ("; ".join(said) if said else "not checked in this run")
            + (f" — {issue.note}" if issue.note else "")
        )
    return lines


def prompt_lines(session) -> list[str]:
    """Which prompts each gate used: source, prompts per category, and how many did not fit."""
    from specgate.errors import SpecgateError

    inputs = session.plan.inputs
    load = inputs.speedup_inputs()
    try:
        if load is inputs:
            return [f"prompts (every gate): {inputs.summary()}"]
        return [
            f"prompts for equivalence and acceptance: {inputs.summary()}",
            f"prompts for the speedup load ({load.max_tokens} output tokens each): {load.summary()}",
        ]
    except SpecgateError as exc:
        return [f"prompts: not loaded: {exc}"]


def prompt_record(session) -> dict[str, Any]:
    """run.json's account of the prompts: per set, each entry, the ids used, and what did not fit."""
    from specgate.errors import SpecgateError

    inputs = session.plan.inputs
    load = inputs.speedup_inputs()
    out: dict[str, Any] = {}
    for role, which in (("equivalence_acceptance", inputs), ("speedup", load)):
        if role == "speedup" and which is inputs:
            out[role] = "the equivalence and acceptance prompts"
            continue
        try:
            out[role] = which.record()
        except SpecgateError as exc:
            out[role] = {"error": str(exc)}
    return out


def diagnosis(session) -> list[str]:
    """One line when every speculative method that ran failed the same way at boot or died at its
    first steps while the baseline engine ran: then speculative decoding is broken in this vLLM."""
    from specgate import vllm_compat

    records = session.host.records
    tried = [r for name, r in records.items() if name != BASELINE and r.boots and not r.skipped_reason]
    broken = [r for r in tried if r.boot_error or r.died]
    baseline_ok = records[BASELINE].boot_s and not records[BASELINE].died
    if len(tried) < 2 or len(broken) < len(tried) or not baseline_ok:
        return []
    reasons = [(r.boot_error.reason if r.boot_error else r.died.reason) for r in broken]
    common = max(set(reasons), key=reasons.count)
    return [
        f"speculative decoding is broken in {vllm_compat.release()}: every speculative method that ran "
        f"({len(broken)} of {len(tried)}) failed at boot or at its first steps while the baseline engine ran; "
        f"vLLM said ({reasons.count(common)} of them): {common}"
    ]


def engines(session) -> dict[str, Engine]:
    """Per method: the vLLM that served it, its model runner, its boots and how it ended (for run.json)."""
    served_by = None if session.plan.endpoints is not None else vllm_release()
    return {
        name: Engine(
            vllm=served_by if r.boots else None,
            runner=r.runner or None,
            boots=r.boots,
            boot_s=[round(x, 2) for x in r.boot_s],
            boot_error=r.boot_error.reason if r.boot_error else None,
            died=r.died.reason if r.died else None,
            skipped=r.skipped_reason,
            longest_idle_s=round(r.longest_idle_s, 2),
        )
        for name, r in session.host.records.items()
    }


def _across_runners(session, method: str) -> str:
    """'v1 vs baseline v2' when the method's engine ran another model runner than the baseline
    engine (its speedups are not like for like), else ''."""
    ours, theirs = session.host.records[method].runner, session.host.records[BASELINE].runner
    return f"{ours} vs baseline {theirs}" if ours and theirs and ours != theirs else ""


def _lengths(records: dict) -> str:
    """'C=1 2.46 (49 %), C=16 2.67 (51 %)': each key's acceptance length and the share of its decode steps that
    drafted (checks.drafting), where measured."""
    return ", ".join(
        f"{key} {v.get('mean_acceptance_length', float('nan')):.2f}"
        + (f" ({v[DRAFT_SHARE]:.0%})" if isinstance(v.get(DRAFT_SHARE), (int, float)) else "")
        for key, v in records.items()
    )


def _figure_lines(kinds: dict, is_baseline: bool, across: str = "") -> list[str]:
    pad, lines = f"  {'':<14}", []
    if accepted := kinds.get(ACCEPTANCE, {}):
        lines.append(f"{pad} mean acceptance length (steps that drafted): {_lengths(accepted)}")
    if load := kinds.get(LOAD, {}):
        lines.append(f"{pad} mean acceptance length under load (steps that drafted): {_lengths(load)}")
    if overhead := kinds.get(MEMORY, {}).get(MEMORY.key()):
        lines.append(
            f"{pad} memory: drafter {overhead.get('static_mib_measured', float('nan')):.2f} MiB"
            f"{'' if 'static_mib_analytic' in overhead else ' (checkpoint not on this disk: not computed)'}, "
            f"KV tokens lost {overhead.get('kv_tokens_lost', 'n/a')}, processes {overhead['process_mib']:+.0f} MiB"
        )
    if speed := kinds.get(SPEEDUP, {}):
        parts = []
        for key, v in speed.items():
            if "geomean_speedup" in v:  # the summary over the levels
                cross = v.get("crossover_concurrency")
                part = f"geometric mean {v['geomean_speedup']:.2f}, crossover " + (
                    f"C={cross}" if cross is not None else f"none up to C={v.get('top_level')}"
                )
            elif "speedup" in v:
                part = f"{key} {v['speedup']:.2f} [{v['ci_low']:.2f}, {v['ci_high']:.2f}]"
                if v.get("measured_over_expected") is not None:
                    part += f" ({v['measured_over_expected']:.2f} of model)"
            elif "throughput_tok_s" in v:
                part = f"{key} {v['throughput_tok_s']:.0f} tok/s"
            else:
                continue
            parts.append(part)
        across = f" (model runner {across}: across runners, not like for like)" if across else ""
        lines.append(f"{pad} {'throughput' if is_baseline else 'speedup'}{across}: {', '.join(parts)}")
    return lines


def run_record(session, outcomes: list[Outcome], started: float, summary_lines: list[str]) -> RunRecord:
    """The run's record (run.json): what ran, every test's outcome in the order they happened, the
    diagnosis, the summary."""
    device, count = machine.detect_device(session.profile.hardware)
    prov = machine.provenance(session.plan.root, device, count, session.baselines.identity)
    now = _dt.datetime.now(_dt.UTC)
    ordered = sorted(outcomes, key=lambda o: o.at if o.at is not None else float("inf"))  # stable: pytest's order
    return RunRecord(
        kind=GATE,
        run_id=session.plan.out_dir.name,
        interrupted=session.interrupted,
        profile=session.profile.name,
        profile_path=str(session.profile.path),
        hardware=session.baselines.hardware,
        identity=prov["identity"],
        started=_dt.datetime.fromtimestamp(started, _dt.UTC).isoformat(timespec="seconds"),
        finished=now.isoformat(timespec="seconds"),
        wall_s=round(now.timestamp() - started, 1),
        vllm=prov["vllm"],
        torch=prov["torch"],
        git_revision=prov["git_revision"],
        vllm_release=vllm_release(),
        baselines_file=str(session.baselines.path),
        upgrade=session.baselines.upgrade(),
        notes=header_lines(session),
        prompts=prompt_record(session),
        engines=engines(session),
        time_spent_s={k: round(v, 1) for k, v in session.spent.items()},
        known_issues=[KnownSeen(**asdict(seen)) for seen in known_issues(session)],
        models=session.models_record(session.plan.method_order),
        outcomes=ordered,
        diagnosis=next(iter(diagnosis(session)), ""),
        summary_lines=summary_lines,
    )


def vllm_release() -> str:
    from specgate import vllm_compat

    return vllm_compat.release()


def write_run(session, outcomes: list[Outcome], started: float, summary_lines: list[str]) -> dict[str, Path]:
    """measurements.csv/.json, run.json, baselines.json (this run alone, in the stored format, for
    `specgate baselines diff`), summary.md and report.html in the session's output directory."""
    table = measurement_table(session.judgements.values())
    return _write(session, table, run_record(session, outcomes, started, summary_lines), session.measured)


def write_combined(session, workers: list[dict], outcomes: list[Outcome], summary_lines: list[str]) -> dict[str, Path]:
    """The same files for a pytest-xdist run, from every worker's table and measurements."""
    import pandas as pd

    tables = [pd.read_json(io.StringIO(w["table"]), orient="records") for w in workers if w["table"] != "[]"]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    measured: dict = {}
    for w in workers:
        for method, kinds in w["measured"].items():
            for kind, entries in kinds.items():
                measured.setdefault(method, {}).setdefault(kind, {}).update(entries)
    started = min(w["started"] for w in workers)
    return _write(session, table, run_record(session, outcomes, started, summary_lines), measured)


def _write(session, table, run: RunRecord, measured: dict) -> dict[str, Path]:
    from specgate import report

    out = session.plan.out_dir
    out.mkdir(parents=True, exist_ok=True)
    paths = report.write_tables(out, table)
    paths["run"] = run.write(out / "run.json")
    if measured:
        device, count = machine.detect_device(session.profile.hardware)
        identity = session.baselines.identity
        empty = baselines.BaselineFile(
            out / "baselines.json", session.profile.name, session.baselines.hardware, {}, identity
        )
        prov = machine.provenance(session.plan.root, device, count, identity)
        baselines.write_atomic(baselines.merge(empty, measured, prov, session.models_record(measured)))
        paths["baselines"] = out / "baselines.json"
    paths.update(report.write_report(out, table, run))
    return paths
