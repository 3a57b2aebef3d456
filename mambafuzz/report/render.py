"""One static HTML page from a loaded ``Report``: tables as HTML, charts drawn by plotly.

The page holds plotly.js inline (once) and no other script or link, so it
opens offline, from a CI artifact or a mail attachment.  Sections (their ids
are what the tests look for): ``summary``, ``targets`` (outcome, k/N and its
95% bound, stop reason, the shrunk case; a bar chart), ``findings`` (each
finding's case, evidence and replay command), ``coverage`` (features drawn,
holes warned), ``campaign`` (a collected campaign: examples per target per box, its buckets, its workers), ``race-map`` (GPU: failure rate over shift x size per warp
count and delay) and ``throughput`` (examples per second over time; past
``OVERLAID`` targets, a small chart each, named, so no legend is cut off).
"""
from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

from mambafuzz.errors import UsageError
from mambafuzz.judge.stats import rate_upper_bound
from mambafuzz.search.features import buckets
from mambafuzz.report.load import Report, TargetRow

GOOD, BAD, UNSURE = "#2e7d32", "#c62828", "#ef6c00"


def _plotly():
    try:
        import plotly.graph_objects as go  # deferred: plotly is optional (mambafuzz[report])
        import plotly.io as pio  # deferred: plotly is optional (mambafuzz[report])
        from plotly.offline import get_plotlyjs  # deferred: plotly is optional (mambafuzz[report])
        from plotly.subplots import make_subplots  # deferred: plotly is optional (mambafuzz[report])
    except ImportError:
        raise UsageError("mambafuzz report draws its charts with plotly: pip install 'mambafuzz[report]' "
                         "(or pip install plotly)") from None
    return go, pio, get_plotlyjs, make_subplots


def _e(text) -> str:
    return html.escape("" if text is None else str(text))


def _outcome(report: Report, t: TargetRow) -> tuple[str, str]:
    """(word, colour) of a target's outcome: for the zoo a caught bug is the good outcome."""
    if report.kind == "zoo":
        caught = t.finding is not None if t.caught is None else t.caught  # caught: a kind the row declares
        if caught:
            return "caught", GOOD
        return ("ESCAPED", BAD) if t.status == "clean" or t.finding is not None else (t.status, UNSURE)
    return t.status, {"finding": BAD, "clean": GOOD}.get(t.status, UNSURE)


def _rate(k: int, n: int, bound: float) -> str:
    if not n:
        return "-"
    return f"{k}/{n} (< {bound:.2g})" if k == 0 else f"{k}/{n} (<= {bound:.2g})"


# ---------------------------------------------------------------- sections
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1d2329;
  background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}
h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #d5d9de;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px}
section,header{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:12px 16px;margin-top:14px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eceef1;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f0f2f5;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.targets td:first-child{white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
.case{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f3f4f6;padding:8px;border-radius:6px;overflow-x:auto;font-size:12px;margin:4px 0}
pre.replay{background:#0f172a;color:#e2e8f0}
article.finding{border-left:4px solid #c62828;padding:6px 12px;margin:12px 0;background:#fffafa}
.never{color:#c62828;font-weight:600}
.warn{color:#b45309}
.muted{color:#6b7280}
.kpi{display:inline-block;margin:6px 18px 0 0}.kpi b{font-size:20px;display:block}
"""


def _summary(report: Report) -> str:
    n = len(report.targets)
    found = sum(t.finding is not None for t in report.targets)
    holes = sum(bool(t.tally.never_drawn()) and t.finding is None for t in report.targets)
    examples = sum(t.examples for t in report.targets)
    what = {"zoo": "bug zoo", "session": "session", "crashes": "crash files",
            "campaign": f"campaign {(report.campaign or {}).get('campaign', '')}"}.get(report.kind, report.kind)
    kpis = [("targets", n), ("examples", examples),
            ("caught", f"{sum(_outcome(report, t)[0] == 'caught' for t in report.targets)} of {n}")
            if report.kind == "zoo" else ("findings", found)]
    if report.campaign is not None:
        boxes = {b for t in report.campaign.get("targets", []) for b in t.get("boxes") or {}}
        buckets = report.campaign.get("buckets", [])
        kpis += [("boxes", len(boxes)), ("confirmed buckets", f"{sum(bool(b.get('counts')) for b in buckets)} "
                                                              f"of {len(buckets)}")]
    if report.exit_code is not None:
        kpis.append(("exit code", report.exit_code))
    if holes:
        kpis.append(("targets with coverage holes", holes))
    meta = ", ".join(f"{k} {_e(v)}" for k, v in (("device", report.device), ("mode", report.mode)) if v)
    return (f'<header id="summary"><h1>mambafuzz report: {_e(what)}</h1>'
            f'<div class="muted">from {_e(report.source)}{"; " + meta if meta else ""}'
            f'{"; interrupted" if report.interrupted else ""}</div>'
            + "".join(f'<span class="kpi"><b>{_e(v)}</b>{_e(k)}</span>' for k, v in kpis) + "</header>")


def _rejected(tally) -> str:
    """The cases the target rejected (mambafuzz.reject) under its example count; the reasons on hover."""
    if not tally.rejected:
        return ""
    reasons = "; ".join(f"{reason}: {n}" for reason, n in tally.reasons())
    return f'<br><span class="muted" title="{_e(reasons)}">+{tally.rejected} rejected by the target</span>'


def _narrowed(options: dict) -> str:
    """The contract options a target's draws were narrowed by (what its verdict does not cover)."""
    if not options:
        return ""
    text = ", ".join(f"{k}={v}" for k, v in options.items())
    return f'<br><span class="muted" title="contract options: what the draws left out">{_e(text)}</span>'


def _targets_table(report: Report) -> str:
    head = ["target", "contract", "outcome", "stop", "examples", "failed reps k/N (95% bound)", "time",
            "shrunk case / why"]
    if report.kind == "zoo":
        head.insert(2, "bug")
    rows = []
    for t in report.targets:
        word, colour = _outcome(report, t)
        case = (f'<span class="case">{_e(t.finding.case_summary)}</span>' if t.finding
                else f'<span class="muted">{_e(t.why or "")}</span>')
        if t.finding and t.finding.not_minimal:
            case += f' <span class="warn">(may not be minimal: {_e(t.finding.not_minimal)})</span>'
        rate = (f"{t.finding.kind} (deterministic)" if t.finding and t.finding.deterministic
                else _rate(t.failed_reps, t.reps, t.rate_upper95))
        cells = [f'<a href="#finding-{_e(t.target)}">{_e(t.target)}</a>' if t.finding else _e(t.target),
                 _e(t.contract) + _narrowed(t.options), f'<span class="badge" style="background:{colour}">{_e(word)}</span>',
                 _e(t.stop), f'<td class="num">{t.examples}{_rejected(t.tally)}</td>',
                 f'<td class="num">{_e(rate)}</td>',
                 f'<td class="num">{t.seconds:.1f} s</td>', case]
        if report.kind == "zoo":
            cells.insert(2, _e(t.bug or ""))
        rows.append("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table class="targets"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """An HTML table of already-escaped cells (`numeric`: the columns aligned right)."""
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return (f'<table class="targets"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def _seconds(value) -> str:
    return "-" if value is None else f"{float(value):.1f} s"


def _campaign(report: Report) -> str:
    """A collected campaign: examples per target per box, time to first finding, buckets, workers."""
    body = report.campaign or {}
    targets, buckets = body.get("targets", []), body.get("buckets", [])
    boxes = sorted({b for t in targets for b in t.get("boxes") or {}})
    per_box = [[_e(t.get("target")), _e(t.get("status")), _e((t.get("done") or {}).get("stop", "open"))]
               + [str((t.get("boxes") or {}).get(b, {}).get("examples", 0)) for b in boxes]
               + [str(t.get("examples", 0)), _e(_seconds(t.get("first_finding_s")))] for t in targets]
    parts = [f'<section id="campaign"><h2>Campaign {_e(body.get("campaign"))}</h2>'
             f'<p class="muted">hub {_e(body.get("hub"))}; {_e(body.get("state"))}, '
             f'{_e(body.get("workers_alive"))} worker(s) alive when collected ({_e(body.get("collected"))}). '
             "A bucket is one bug: the findings of every box grouped by contract, target, kind and what failed; "
             "it counts once a replay on a box of its kind confirmed it.</p>",
             "<h3>Examples per target per box</h3>",
             _table(["target", "status", "done"] + boxes + ["all boxes", "first finding after"], per_box,
                    set(range(3, 5 + len(boxes)))),
             "<h3>Buckets</h3>"]
    rows = [[_e(b.get("key")), _e(b.get("target")), _e(b.get("kind")), _e(b.get("signature")),
             str(b.get("count", 0)), _e(", ".join(b.get("boxes") or [])),
             _e(b.get("state")) + (" (counts)" if b.get("counts") else ""), _e(_seconds(b.get("first_found_s"))),
             _e(b.get("file") or "")] for b in buckets]
    parts.append(_table(["bucket", "target", "kind", "what failed", "seen", "boxes", "state", "first after",
                         "crash file"], rows, {4}) if rows else '<p class="muted">no findings</p>')
    workers = [[_e(w.get("worker")), _e(w.get("gpu") or w.get("device")), _e(w.get("driver") or ""),
                _e(w.get("torch")), _e(w.get("triton")), _e(w.get("mambafuzz"))] for w in body.get("workers", [])]
    if workers:
        parts += ["<h3>Workers</h3>", _table(["worker", "GPU", "driver", "torch", "Triton", "mambafuzz"], workers)]
    return "".join(parts) + "</section>"


def _rate_text(f) -> str:
    return f"{f.failures}/{f.reps} repetitions failed (rate <= {f.rate_upper95:.2g} at 95%)"


def _finding(t: TargetRow) -> str:
    f = t.finding
    parts = [f'<article class="finding" id="finding-{_e(t.target)}">',
             f"<h3>{_e(t.target)}: {_e(f.kind)}</h3><p>{_e(f.summary)}</p>",
             f'<p><b>shrunk case</b> <span class="muted">({_e(f.case_hash)})</span>: '
             f'<span class="case">{_e(f.case_summary)}</span></p>',
             f'<p class="muted">{_e(f.rate_line if f.deterministic else _rate_text(f))}; '
             f"first seen at example {f.examples_to_first}, after {f.seconds_to_first:.2f} s; "
             f"{f.shrink_examples} shrink examples</p>"]
    if f.not_minimal:
        parts.append(f'<p class="warn"><b>may not be minimal</b>: {_e(f.not_minimal)}</p>')
    for line in f.gpu_lines:
        parts.append(f"<p>{_e(line)}</p>")
    if f.hazards:
        parts.append("<h4>witness</h4><ul class=\"witness\">")
        for h in f.hazards[:5]:
            lines = "".join(f"<pre>{_e(role)}: {_e(line)}</pre>" for role, line in
                            (("first", h["first"]), ("second", h["second"])) if line)
            parts.append(f"<li><b>{_e(h['kind'])}</b>: {_e(h['explanation'])}{lines}</li>")
        if len(f.hazards) > 5:
            parts.append(f"<li class=\"muted\">{len(f.hazards) - 5} more</li>")
        parts.append("</ul>")
    if f.first_bytes or f.mismatch:
        parts.append(f"<h4>first differing bytes</h4><p>{_e(f.mismatch or '')}</p>")
        if f.first_bytes:
            parts.append('<table class="bytes"><thead><tr><th>arena offset</th><th>where</th><th>expected</th>'
                         "<th>got</th></tr></thead><tbody>")
            for b in f.first_bytes[:16]:
                exp, got = b.get("expected"), b.get("actual")
                hexed = (lambda v: f"0x{v:02x}" if isinstance(v, int) else _e(v))
                parts.append(f'<tr><td class="num">{_e(b.get("offset"))}</td><td>{_e(b.get("where"))}</td>'
                             f"<td>{hexed(exp)}</td><td>{hexed(got)}</td></tr>")
            parts.append("</tbody></table>")
    for label, text in (("fault", f.fault), ("exception", f.exception), ("compile", f.compile)):
        if text:
            parts.append(f"<h4>{label}</h4><pre>{_e(text)}</pre>")
    if f.replay:
        parts.append(f'<h4>replay</h4><pre class="replay">{_e(f.replay)}</pre>')
    if f.path:
        parts.append(f'<p class="muted">crash file: {_e(f.path)}</p>')
    parts.append(f"<details><summary>case JSON</summary><pre>{_e(f.case_json)}</pre></details></article>")
    return "".join(parts)


def _coverage(report: Report) -> str:
    out = []
    for t in report.targets:
        tally = t.tally
        if not tally.examples:
            continue
        body = tally.to_json()["coverage"]
        missing = body["never_drawn"]
        rows = []
        for name, counts in body["features"].items():
            cells = [f"{_e(label)} <b>{n}</b>" for label, n in counts.items()]
            cells += [f'<span class="never">{_e(label)} never</span>' for label in missing.get(name, [])]
            rows.append(f"<tr><td>{_e(name)}</td><td>{', '.join(cells)}</td></tr>")
        for name, labels in missing.items():
            if name not in body["features"]:
                rows.append(f"<tr><td>{_e(name)}</td><td>" + ", ".join(
                    f'<span class="never">{_e(label)} never</span>' for label in labels) + "</td></tr>")
        warn = ""
        if missing and t.finding is None:
            warn = (' <span class="warn">never drawn: '
                    + _e("; ".join(f"{k} {'|'.join(v)}" for k, v in missing.items())) + "</span>")
        is_open = " open" if missing and t.finding is None else ""
        out.append(f'<details class="coverage"{is_open}><summary><b>{_e(t.target)}</b> '
                   f'<span class="muted">({tally.examples} examples)</span>{warn}</summary>'
                   f'<table class="coverage"><thead><tr><th>feature</th><th>examples per bucket</th></tr></thead>'
                   f"<tbody>{''.join(rows)}</tbody></table></details>")
    if not out:
        return '<p class="muted">no coverage recorded (a report written before coverage was counted)</p>'
    return ('<p class="muted">How many valid examples drew each bucket of each feature (an example with '
            'several rows, requests or buffers counts in every bucket it drew). <span class="never">never</span>: '
            "a bucket this contract's strategy draws that the run did not.</p>" + "".join(out))


# ---------------------------------------------------------------- charts
def _outcome_figure(go, report: Report):
    """Examples per target: up to the first failure in the outcome's colour, the shrinking after it in grey."""
    rows = list(reversed(report.targets))
    words = [_outcome(report, t) for t in rows]
    first = [min(t.examples, max(1, t.finding.examples_to_first)) if t.finding else t.examples for t in rows]
    hover = [f"{t.target}<br>{w}, stop {t.stop}<br>{t.examples} examples, {t.failed_reps}/{t.reps} reps failed"
             + (f"<br>first failure at example {n}, {t.finding.seconds_to_first:.2f} s; "
                f"{t.examples - n} examples after it (shrinking)" if t.finding else "")
             for t, (w, _), n in zip(rows, words, first)]
    names = [t.target for t in rows]
    fig = go.Figure([
        go.Bar(y=names, x=first, orientation="h", marker_color=[c for _, c in words], name="until the first failure",
               hovertext=hover, hoverinfo="text"),
        go.Bar(y=names, x=[t.examples - n for t, n in zip(rows, first)], orientation="h", marker_color="#b0bec5",
               name="shrinking", hovertext=hover, hoverinfo="text")])
    fig.update_layout(title="Examples per target (colour: outcome; grey: shrinking after the first failure)",
                      xaxis_title="valid examples", barmode="stack", legend=dict(orientation="h", y=-0.12),
                      height=max(280, 28 * len(rows) + 150), margin=dict(l=10, r=10, t=50, b=40),
                      template="plotly_white")
    return fig


def _coverage_figure(go, report: Report):
    """Targets x features: the share of the buckets a contract's strategy draws that the run drew."""
    rows = [t for t in report.targets if t.tally.examples and t.tally.expected]
    if not rows:
        return None
    names = []
    for t in rows:
        names += [n for n in t.tally.expected if n not in names]
    z, text, hover = [], [], []
    for t in reversed(rows):
        missing = t.tally.never_drawn()
        zr, tr, hr = [], [], []
        for name in names:
            want = t.tally.expected.get(name)
            if not want:
                zr.append(None), tr.append(""), hr.append(f"{t.target}: {name} not expected")
                continue
            drawn = len(want) - len(missing.get(name, []))
            zr.append(drawn / len(want))
            tr.append(f"{drawn}/{len(want)}")
            hr.append(f"{t.target}: {name}: {drawn} of {len(want)} buckets drawn"
                      + (f"<br>never: {', '.join(missing[name])}" if name in missing else ""))
        z.append(zr), text.append(tr), hover.append(hr)
    fig = go.Figure(go.Heatmap(x=names, y=[t.target for t in reversed(rows)], z=z, text=text,
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text", zmin=0, zmax=1,
                               colorscale=[[0, "#c62828"], [0.5, "#fbc02d"], [1, "#2e7d32"]], xgap=2, ygap=2,
                               colorbar_title="drawn"))
    fig.update_layout(title="Coverage: buckets drawn of those the contract's strategy draws",
                      height=max(260, 26 * len(rows) + 160), template="plotly_white",
                      margin=dict(l=10, r=10, t=50, b=40), xaxis=dict(side="top", type="category"),
                      yaxis=dict(type="category"))
    return fig


OVERLAID = 4   # up to this many targets share one throughput chart; more get a small chart each
PER_ROW = 3


def _throughput_figure(go, make_subplots, report: Report):
    """Examples per second over time: one chart with a legend for a few targets, else small multiples
    (a chart per target, its name and mean rate as its title), so 17 targets stay readable."""
    series = []
    for t in report.targets:
        points = t.tally.points()
        xs, ys, last = [], [], (0.0, 0)
        for when, n in points:
            dt = when - last[0]
            if dt > 0:
                xs.append(when)
                ys.append((n - last[1]) / dt)
            last = (when, n)
        if xs:
            series.append((t.target, xs, ys, last[1] / last[0] if last[0] > 0 else 0.0))
    if not series:
        return None
    title = "Examples per second over time"
    if len(series) <= OVERLAID:
        fig = go.Figure([go.Scatter(x=xs, y=ys, mode="lines+markers", name=name) for name, xs, ys, _ in series])
        fig.update_layout(title=title, xaxis_title="seconds since the target started", yaxis_title="examples / s",
                          height=420, template="plotly_white", margin=dict(l=10, r=10, t=50, b=40),
                          legend=dict(orientation="h", y=-0.2))
        return fig
    rows = -(-len(series) // PER_ROW)
    fig = make_subplots(rows=rows, cols=PER_ROW, subplot_titles=[f"{name} ({mean:.3g}/s)"
                                                                 for name, _, _, mean in series],
                        horizontal_spacing=0.06, vertical_spacing=min(0.3, 0.6 / rows))
    for i, (name, xs, ys, _) in enumerate(series):
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, showlegend=False,
                                 line=dict(color="#1565c0", width=1.5), marker=dict(size=4)),
                      row=i // PER_ROW + 1, col=i % PER_ROW + 1)
    fig.update_annotations(font_size=12)
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    for col in range(1, PER_ROW + 1):
        fig.update_xaxes(title_text="seconds since the target started", row=rows, col=col)
    fig.update_yaxes(title_text="examples / s", col=1)
    fig.update_layout(title=f"{title} (a chart per target: its name and mean rate above it)",
                      height=170 * rows + 110, template="plotly_white", margin=dict(l=10, r=10, t=70, b=50))
    return fig


def _race_figure(go, make_subplots, t: TargetRow):
    cells = t.tally.cells
    if not cells:
        return None
    every = buckets()
    order = lambda axis, values: sorted(values, key=lambda v: (  # noqa: E731
        every[axis].index(v) if v in every[axis] else len(every[axis]), _num(v)))
    shifts = order("shift", {k[0] for k in cells})
    sizes = order("size", {k[1] for k in cells})
    warps = order("num_warps", {k[2] for k in cells})
    delays = order("delay_ns", {k[3] for k in cells})
    top = max((f / r for r, f in cells.values() if r), default=0.0) or 1.0
    titles = [f"{w} warps, delay {d} ns" for w in warps for d in delays]
    fig = make_subplots(rows=len(warps), cols=len(delays), subplot_titles=titles, shared_xaxes=True,
                        shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.12 / max(1, len(warps)))
    for i, w in enumerate(warps):
        for j, d in enumerate(delays):
            z, text, hover = [], [], []
            for s in shifts:
                zr, tr, hr = [], [], []
                for size in sizes:
                    reps, failed = cells.get((s, size, w, d), (0, 0))
                    zr.append(failed / reps if reps else None)
                    tr.append(f"{failed}/{reps}" if reps else "")
                    hr.append(f"shift {s} B, size {size} B, {w} warps, {d} ns<br>{failed}/{reps} reps failed"
                              + (f" (rate <= {rate_upper_bound(failed, reps):.2g} at 95%)" if reps else ""))
                z.append(zr), text.append(tr), hover.append(hr)
            fig.add_trace(go.Heatmap(x=sizes, y=shifts, z=z, text=text, texttemplate="%{text}", hovertext=hover,
                                     hoverinfo="text", coloraxis="coloraxis", xgap=1, ygap=1),
                          row=i + 1, col=j + 1)
    fig.update_layout(title=f"Race map: {t.target} (failing repetitions / repetitions)",
                      coloraxis=dict(colorscale="Reds", cmin=0, cmax=top, colorbar_title="failure rate"),
                      height=max(320, 260 * len(warps) + 80), template="plotly_white",
                      margin=dict(l=10, r=10, t=70, b=40))
    fig.update_xaxes(title_text="size (bytes)", type="category", row=len(warps))
    fig.update_yaxes(type="category")
    fig.update_yaxes(title_text="shift (bytes)", col=1)
    return fig


def _num(label: str) -> float:
    try:
        return float(label)
    except ValueError:
        return float("inf")


# ---------------------------------------------------------------- the page
def _replay_files(report: Report) -> str:
    rows = []
    for row in report.files:
        v = row.get("verdict") or {}
        kn = f"{v.get('failures')}/{v.get('reps')}" if v else ""
        detail = row.get("reason") or v.get("summary") or ""
        if v and row.get("deterministic"):  # a recorded hazard, or a clean race check: no rate
            kn = v.get("kind") or "clean"
            detail = row.get("reason") or (v.get("summary") if v.get("kind") else row.get("line")) or detail
        rows.append(f"<tr><td>{_e(row.get('path'))}</td><td>{_e(row.get('target'))}</td>"
                    f"<td>{_e(row.get('status'))}</td><td class=\"num\">{_e(kn)}</td>"
                    f"<td>{_e(detail)}</td></tr>")
    return ('<table class="targets"><thead><tr><th>crash file</th><th>target</th><th>status</th><th>k/N</th>'
            "<th>detail</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def render(report: Report) -> str:
    """The page, one self-contained HTML document."""
    go, pio, get_plotlyjs, make_subplots = _plotly()
    config = {"displaylogo": False, "responsive": True}
    counter = [0]

    def plot(fig) -> str:
        counter[0] += 1
        return pio.to_html(fig, include_plotlyjs=False, full_html=False, config=config,
                           div_id=f"plot-{counter[0]}", default_height=f"{fig.layout.height or 420}px")

    parts = [_summary(report)]
    if report.kind == "replay":
        parts.append(f'<section id="targets"><h2>Replayed crash files</h2>{_replay_files(report)}</section>')
    else:
        parts.append('<section id="targets"><h2>Targets</h2>'
                     '<p class="muted">k/N: failing repetitions of all the target\'s examples; the bound is the '
                     "one-sided 95% Clopper-Pearson upper bound on the per-repetition failure rate.  In race mode a "
                     "hazard fails an example without a wrong byte, so a race can be caught at k = 0.</p>"
                     + _targets_table(report) + (plot(_outcome_figure(go, report)) if report.targets else "")
                     + "</section>")
        if report.campaign is not None:
            parts.append(_campaign(report))
        found = [t for t in report.targets if t.finding is not None]
        parts.append('<section id="findings"><h2>Findings</h2>'
                     + ("".join(_finding(t) for t in found) if found else '<p class="muted">none</p>')
                     + "</section>")
        cover = _coverage_figure(go, report)
        parts.append(f'<section id="coverage"><h2>Coverage</h2>{plot(cover) if cover is not None else ""}'
                     f"{_coverage(report)}</section>")
        maps = [f for f in (_race_figure(go, make_subplots, t) for t in report.targets) if f is not None]
        if maps:
            parts.append('<section id="race-map"><h2>Race map</h2><p class="muted">Repetitions and failing '
                         "repetitions binned by the case's tightest overlap (shift, bytes moved) and its warp "
                         "count and delay; a cell's colour is its failure rate.</p>"
                         + "".join(plot(f) for f in maps) + "</section>")
        elif report.on_gpu or report.device == "cuda":
            parts.append('<section id="race-map"><h2>Race map</h2><p class="muted">no repetitions were binned'
                         "</p></section>")
        throughput = _throughput_figure(go, make_subplots, report)
        if throughput is not None:
            parts.append(f'<section id="throughput"><h2>Throughput</h2>{plot(throughput)}</section>')
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    digest = json.dumps(_digest(report)).replace("</", "<\\/")  # no "</script>" inside the script
    title = f"mambafuzz report: {report.kind} ({report.device or 'device not recorded'})"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body><main>'
            + "".join(parts)
            + f'<footer class="muted"><p>made by mambafuzz report from {_e(report.source)} at {stamp}</p>'
            f'<script type="application/json" id="report-data">{digest}</script>'
            "</footer></main></body></html>\n")


def _digest(report: Report) -> dict:
    """A small machine-readable index of the page (targets and outcomes), for tools and tests."""
    return {"kind": report.kind, "device": report.device,
            "targets": [{"target": t.target, "outcome": _outcome(report, t)[0],
                         "finding": t.finding.kind if t.finding else None} for t in report.targets]}


def write(report: Report, out) -> None:

    out = Path(out)
    text = render(report)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None

