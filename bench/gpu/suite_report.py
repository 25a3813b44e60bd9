"""summary.md from the suite's results: values in, text out."""

from __future__ import annotations

from typing import Any

MARK = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped"}


def _cell(text: Any, width: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= width else text[: width - 3] + "..."


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "-"


def knob_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| knob | status | ms/step | samples/s | TFLOP/s | MFU | vs baseline |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.get("status") == "pass":
            mfu = row.get("mfu")
            lines.append(
                f"| {row['knob']} | pass | {_num(row.get('ms_per_step'), '.2f')} "
                f"| {_num(row.get('samples_per_s'), '.1f')} | {_num(row.get('tflops'), '.3g')} "
                f"| {_num(100 * mfu if mfu is not None else None, '.1f')}{'%' if mfu else ''} "
                f"| {_num(row.get('ratio_to_baseline'), '.2f')} |"
            )
        else:
            why = _cell(row.get("why", ""), 90)
            lines.append(f"| {row['knob']} | {row.get('status')}: {why} | | | | | |")
    return lines


def _seconds(value: Any) -> str:
    return f"{value:.0f} s ({value / 60:.1f} min)" if isinstance(value, (int, float)) else "-"


def whole_ladder(prediction: dict[str, Any], speed: dict[str, Any] | None) -> list[str]:
    """The prediction made before the whole ladder ran, and the ladder measured beside it."""
    lines = ["", "## The whole ladder against its prediction", ""]
    figures = prediction.get("figures") or {}
    if prediction.get("error"):
        lines.append(f"- no prediction: {_cell(prediction['error'], 200)}")
    elif prediction:
        git = (prediction.get("git") or {}).get("describe") or "-"
        shown = ", ".join(
            f"{k} {_seconds(figures[k]) if k != 'probes' else format(figures[k], '.0f')}"
            for k in ("wall_s", "wall_s_low", "wall_s_high", "probes")
            if k in figures
        )
        lines.append(
            f"- predicted before it ran by the GPU twin ({prediction.get('preset')}, "
            f"{prediction.get('time')}, tuneup {git}): {shown or 'no figures'}"
        )
        lines.append(f"  `{prediction.get('command')}` (prediction.json)")
    versus = ((speed or {}).get("figures") or {}).get("versus_prediction")
    if versus:
        beat = {True: "under 10 minutes", False: "NOT under 10 minutes", None: "10 minutes: -"}
        stopped = "" if versus.get("finished") else " so far (stopped)"
        probes = _num(versus.get("measured_probes"), ".0f")
        lines.append(
            f"- measured: {_seconds(versus.get('measured_wall_s'))}{stopped}, {probes} probes: "
            f"{beat[versus.get('beat_10_min')]}"
        )
        errors = [
            f"{what} {100 * versus[k]:+.1f}%"
            for what, k in (("wall", "wall_error"), ("probes", "probes_error"))
            if isinstance(versus.get(k), (int, float))
        ]
        if errors:
            inside = {True: "; inside the predicted range", False: "; outside the predicted range"}
            said = "" if versus.get("comparable") else " (not comparable: see the note)"
            lines.append(
                f"- the prediction's error (predicted - measured, of measured){said}: "
                + ", ".join(errors)
                + inside.get(versus.get("within_range"), "")
            )
        if versus.get("note"):
            lines.append(f"- note: {_cell(versus['note'], 300)}")
        lines += probe_by_probe_lines(((speed or {}).get("figures") or {}).get("probe_by_probe"))
    elif speed and speed.get("status") == "skipped":
        lines.append(f"- measured: nothing ({_cell(speed.get('why', ''), 160)})")
    watched = (speed or {}).get("monitor")
    if watched:
        lines.append(
            f"- monitor beside it (`{watched.get('command')}`): {watched.get('status')}: "
            f"{_cell(watched.get('why', ''), 200)} ({watched.get('file')})"
        )
    return lines


def render(results: dict[str, Any]) -> str:
    """The short human summary of a results.json document."""
    env = results.get("env", {})
    mode = results.get("mode")
    gpu = env.get("gpu") or ("none (CPU dry run)" if mode == "cpu" else "none found")
    lines = [
        f"# tuneup GPU validation: {gpu}",
        "",
        f"- GPU: {gpu}" + (f" ({env['gpu_memory_gib']} GiB)" if env.get("gpu_memory_gib") else ""),
        f"- driver: {env.get('driver') or '-'}, CUDA: {env.get('cuda') or '-'}, "
        f"torch: {env.get('torch') or '-'}, cuDNN: {env.get('cudnn') or '-'}",
        f"- host: {env.get('host', '-')} ({env.get('cpus_usable') or env.get('cpus')} usable "
        f"CPUs), python {env.get('python', '-')}",
        f"- date: {env.get('date', '-')}",
        f"- tuneup: {results.get('git', {}).get('describe', '-')}",
        f"- mode: {'CPU dry run (tiny model)' if mode == 'cpu' else 'GPU'}",
        f"- time used: {results.get('seconds_total', 0):.0f}s over {len(results.get('runs', []))} "
        "run(s)",
        "",
        "## Commands",
        "",
    ]
    for run in results.get("runs", []):
        lines.append(f"    {run['command']}")
    lines += ["", "## Steps", "", "| # | step | result | seconds | key numbers | why |"]
    lines.append("|---|---|---|---:|---|---|")
    for i, step in enumerate(results.get("steps", []), 1):
        seconds = step.get("seconds")
        lines.append(
            f"| {i} | {step['name']} | {MARK.get(step['status'], step['status'])} "
            f"| {_num(seconds, '.1f')} | {_cell(step.get('key', ''), 110)} "
            f"| {_cell(step.get('why', ''), 160)} |"
        )
    lines += ["", "Step commands (run from the repository root):", ""]
    for step in results.get("steps", []):
        if step.get("command"):
            lines.append(f"- {step['name']}: `{step['command']}`")
    speed = next((s for s in results.get("steps", []) if s["name"] == "speed"), None)
    if results.get("prediction") or (speed and speed.get("figures")):
        lines += whole_ladder(results.get("prediction") or {}, speed)
    knobs = next((s for s in results.get("steps", []) if s["name"] == "knobs"), None)
    if knobs and knobs.get("figures", {}).get("rows"):
        lines += ["", "## Knobs, one at a time", ""]
        lines += knob_table(knobs["figures"]["rows"])
        mfu_note = next(
            (
                r.get("peak_source")
                for r in knobs["figures"]["rows"]
                if r.get("status") == "pass" and r.get("mfu") is None
            ),
            None,
        )
        if mfu_note:
            lines += ["", f"MFU not reported: {mfu_note}."]
    honesty = next((s for s in results.get("steps", []) if s["name"] == "honesty"), None)
    if honesty and honesty.get("figures", {}).get("summary"):
        lines += ["", "## Honesty (worker FULL / bare loop)", ""]
        configs = honesty["figures"].get("configs") or {}
        for name, fig in honesty["figures"]["summary"].items():
            knobs = ", ".join(f"{k}={v}" for k, v in configs.get(name, {}).items())
            lines.append(
                f"- {name} ({knobs}): worker "
                f"{_num(fig.get('worker_full_sps_median'), '.1f')} vs bare "
                f"{_num(fig.get('bare_sps_median'), '.1f')} samples/s, ratio "
                f"{_num(fig.get('ratio'), '.3f')} over {fig.get('repeats', 0)} repeat(s): "
                f"{fig.get('verdict')} ({fig.get('why')})"
            )
        lines.append(
            "- pass means the median paired ratio lies within 0.97-1.03; when the bare loop "
            "cannot capture a CUDA graph it runs eager and that ratio is informational only."
        )
    lines.append("")
    return "\n".join(lines)


def probe_by_probe_lines(against: dict[str, Any] | None) -> list[str]:
    """The probes both the twin and the ladder ran, their totals and the worst misses."""
    if not against or not against.get("matched"):
        return []
    error = against.get("error")
    lines = [
        f"- probe by probe, {against['matched']} probes both ran: measured "
        f"{_seconds(against.get('measured_s'))}, predicted {_seconds(against.get('predicted_s'))}"
        + (f" ({100 * error:+.0f}%)" if isinstance(error, (int, float)) else "")
        + f"; {against.get('only_measured', 0)} only measured, "
        f"{against.get('only_predicted', 0)} only predicted"
    ]
    worst = sorted(against.get("probes") or [], key=lambda r: -abs(r.get("miss_s") or 0))[:3]
    for row in worst:
        lines.append(
            f"  - {row['stage']} {_cell(str(row['variant']), 60)}: measured "
            f"{_seconds(row['measured_s'])}, predicted {_seconds(row['predicted_s'])} "
            f"(missed in its {row['missed_in']} part)"
        )
    return lines
