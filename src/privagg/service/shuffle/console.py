"""The analyzer's operator console: two server-rendered pages (Jinja2, no script), read-only.

``/console`` lists the tasks (each by its whole id, as the commands take it): protocol, users, the reports counted
against the minimum batch, the batches applied, the messages that did not open, opened malformed or were repeated, and
whether a result is released and private; below, the privacy budget of each population
(:mod:`privagg.service.ledger`): its budget per period, what the current period spent (and how it was composed) and
what is left. ``/console/tasks/ID`` shows one task: the same counts, and once released its result as the result route
serves it, drawn as a bar chart (inline SVG) of the top estimates with their 95% intervals (estimate +- 1.96 standard
errors), and its privacy guarantee in plain words. The analyzer never sees a true count, so the page shows none. The
pages are behind the same bearer token as the result route, when one is set. Whatever the console cannot show (an
unknown task, a path it does not have, a missing token, a database away) is a page too (:func:`refusal_page`), with
the refusal's status, not the API's JSON.
"""

from __future__ import annotations

import math

from jinja2 import Environment

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval

_env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} - privagg analyzer</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1b1b1b; max-width: 72rem; }
table { border-collapse: collapse; } th, td { padding: .3rem .8rem; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; } .state { font-weight: 600; }
.id { font-family: ui-monospace, monospace; }
.privacy { background: #f3f6fa; border-left: 4px solid #3465a4; padding: .6rem 1rem; max-width: 60rem; }
svg text { font-size: 12px; fill: #1b1b1b; }
</style></head><body>
<h1>{{ title }}</h1>
{{ body }}
</body></html>
"""

_TASKS = _env.from_string("""
{% if not tasks %}<p id="empty">No task yet: create one with <code>privagg task create</code>.</p>{% else %}
<table id="tasks"><thead><tr><th>task</th><th>protocol</th><th>users (n)</th><th>reports / minimum batch</th>
<th>batches</th><th>dropped messages</th><th>state</th></tr></thead><tbody>
{% for t in tasks %}<tr><td><a class="id" href="/console/tasks/{{ t.task_id }}">{{ t.task_id }}</a></td>
<td>{{ t.protocol }}</td>
<td>{{ "{:,}".format(t.n_users) }}</td><td>{{ "{:,}".format(t.reports) }} / {{ "{:,}".format(t.min_batch_size) }}</td>
<td>{{ t.batches }}</td><td>{{ t.unopened + t.malformed + t.duplicates }}</td><td class="state">{{ t.state }}</td></tr>
{% endfor %}</tbody></table>{% endif %}
<h2>Privacy budget</h2>
{% if not ledgers %}<p id="no-budget">No population has a budget or a task yet: set one with <code>privagg budget
set</code>.</p>{% else %}
<table id="budgets"><thead><tr><th>population</th><th>period</th><th>budget (epsilon, delta)</th>
<th>spent (epsilon, delta)</th><th>tasks</th><th>composition</th><th>remaining (epsilon, delta)</th></tr></thead><tbody>
{% for b in ledgers %}<tr><td>{{ b.population }}</td><td>{{ b.period_label }}</td>
<td>{% if b.budget %}{{ "%.4g"|format(b.budget.epsilon) }}, {{ "%.3g"|format(b.budget.delta) }} a {{ b.period }}
{% else %}none{% endif %}</td>
<td>{{ "%.4g"|format(b.spent.epsilon) }}, {{ "%.3g"|format(b.spent.delta) }}</td><td>{{ b.spent.tasks }}</td>
<td>{{ b.spent.composition }}</td>
<td class="state">{% if b.remaining %}{{ "%.4g"|format(b.remaining.epsilon) }}, {{ "%.3g"|format(b.remaining.delta) }}
{% else %}unlimited{% endif %}</td></tr>
{% endfor %}</tbody></table>{% endif %}
""")

_TASK = _env.from_string("""
<p><a href="/console">All tasks</a></p>
<table id="counts"><tbody>
<tr><td>protocol</td><td>{{ t.protocol }}</td></tr><tr><td>users (n)</td><td>{{ "{:,}".format(t.n_users) }}</td></tr>
<tr><td>reports counted / minimum batch</td><td>{{ "{:,}".format(t.reports) }} / {{ "{:,}".format(t.min_batch_size) }}</td></tr>
<tr><td>batches applied</td><td>{{ t.batches }}</td></tr>
<tr><td>messages that did not open / opened malformed / repeated</td>
<td>{{ t.unopened }} / {{ t.malformed }} / {{ t.duplicates }}</td></tr>
<tr><td>state</td><td class="state" id="state">{{ t.state }}</td></tr></tbody></table>
{% if report %}
<h2>Result: the top {{ bars|length }} estimates, with 95% intervals</h2>
{% if report.reliable is false %}<p class="warning" id="unreliable">Not a reliable list: at this number of users
and phi an item held by 1.5 phi n users may be missed, or one held by phi n / 2 reported, with probability above
0.05 (see the warnings); more users or a larger phi.</p>{% endif %}
{{ chart }}
<h2>Privacy</h2>
<div class="privacy" id="privacy"><p>{{ statement }}</p>
{% if warnings %}<p class="warning">Warnings:</p><ul id="warnings">{% for w in warnings %}<li>{{ w }}</li>{% endfor %}
</ul>{% endif %}
{% if assumptions %}<p>It assumes:</p><ul>{% for a in assumptions %}<li>{{ a }}</li>{% endfor %}</ul>{% endif %}
{% if caveats %}<p>Caveats:</p><ul>{% for c in caveats %}<li>{{ c }}</li>{% endfor %}</ul>{% endif %}</div>
{% elif note %}<p id="waiting">{{ note }}</p>
{% else %}<p id="waiting">No result yet: no batch has been applied ({{ t.release_rule }}).</p>{% endif %}
""")


def page(title: str, body: str) -> str:
    from markupsafe import Markup

    return _env.from_string(_BASE).render(title=title, body=Markup(body))  # body: rendered, escaped, by a template


_REFUSAL = _env.from_string("""
<p id="refusal">{{ detail }}</p>
<p><a href="/console">All tasks</a></p>
""")


def refusal_page(status: int, detail: str) -> str:
    """The page of a console request refused with ``status`` (a 404's "Not Found" as its title), saying why."""
    from http import HTTPStatus

    return page(f"{status} {HTTPStatus(status).phrase}", _REFUSAL.render(detail=detail))


def tasks_page(tasks: list[dict], ledgers: list[dict]) -> str:
    """The task list (:meth:`privagg.service.shuffle.analyzer.AnalyzerService.overview`'s rows) and the populations'
    ledgers (:meth:`~privagg.service.ledger.Ledger.to_dict`'s)."""
    return page("Tasks", _TASKS.render(tasks=tasks, ledgers=ledgers))


def task_page(task: dict, report: dict | None, top: int = 20, note: str | None = None) -> str:
    """One task's counts and, once released, ``report`` (the result route's) as a chart and a privacy statement;
    ``note``: why a released task shows no result (a staged task whose first stage discovered nothing)."""
    if report is None:
        return page(f"Task {task['task_id']}", _TASK.render(t=task, report=None, note=note))
    bars = report.get("estimates", report.get("heavy_hitters"))[:top]  # fe-hh: the heavy hitters discovered
    privacy = report["privacy"]
    return page(f"Task {task['task_id']}", _TASK.render(
        t=task, report=report, bars=bars, chart=_chart(bars), statement=statement(report),
        assumptions=privacy.get("assumptions", []), caveats=privacy.get("caveats", []),
        warnings=report.get("warnings", [])))


def statement(report: dict) -> str:
    """The guarantee in plain words: what a reader of this result can learn about any one user; a result that is
    not private (its privacy block, or the document's own flag, says so) says that first, and why."""
    from ...privacy.description import privacy_warnings
    from ...reports import DATA_BESIDE

    privacy = report["privacy"]
    delta = privacy["delta"]
    chance = "" if not delta else (f", except with a probability of at most {delta:.2g} (delta)")
    claim = (f"({privacy['epsilon']:g}, {delta:.2g})-differentially private in the {privacy['model']} "
             f"model, over the {report['n_users']:,} users who could report: whatever one user held, the chance of "
             f"any result changes by at most a factor of e^{privacy['epsilon']:g} = "
             f"{math.exp(privacy['epsilon']):.3g}{chance}. Neighbouring datasets: {privacy['neighbouring']}. "
             f"Computed by: {privacy['method_detail']}.")
    if privacy.get("private", True) and report.get("private", True):
        weak = privacy_warnings(privacy["epsilon"], delta, report["n_users"])  # delta >= 1/n, epsilon > 10
        return f"This result is only weakly private (see the warnings): {claim}" if weak else f"This result is {claim}"
    why = privacy.get("not_private_reason") if privacy.get("private") is False else DATA_BESIDE
    return f"This result is NOT PRIVATE: {why}. Only where what its guarantee rests on held would it be {claim}"


def _chart(bars: list[dict]) -> str:
    """A horizontal bar chart in SVG: one bar per estimate, its 95% interval as a whisker."""
    from markupsafe import Markup, escape

    width, left, row, plot = 860, 170, 26, 540  # room right of the plot for the longest label
    lows = [b["estimate"] - Z95 * b["stderr"] for b in bars]
    highs = [b["estimate"] + Z95 * b["stderr"] for b in bars]
    lo, hi = min(0.0, *lows), max(0.0, *highs)
    scale = plot / ((hi - lo) or 1.0)

    def x(value: float) -> float:
        return left + (value - lo) * scale

    parts = [f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{row * len(bars) + 30}" '
             'role="img" aria-label="estimates with 95% intervals">',
             f'<line x1="{x(0):.1f}" y1="0" x2="{x(0):.1f}" y2="{row * len(bars)}" stroke="#888"/>']
    for i, (bar, low, high) in enumerate(zip(bars, lows, highs)):
        y, start, end = i * row, min(x(0), x(bar["estimate"])), max(x(0), x(bar["estimate"]))
        label = escape(str(bar.get("name") or bar["item"]))
        parts += [f'<text x="{left - 8}" y="{y + 17}" text-anchor="end">{label}</text>',
                  f'<rect class="bar" x="{start:.1f}" y="{y + 5}" width="{end - start:.1f}" height="{row - 10}" '
                  f'fill="#729fcf"><title>{label}: {bar["estimate"]:,.1f} +- {Z95 * bar["stderr"]:,.1f}</title></rect>',
                  f'<line class="interval" x1="{x(low):.1f}" y1="{y + row / 2}" x2="{x(high):.1f}" y2="{y + row / 2}" '
                  'stroke="#1b1b1b"/>',
                  f'<text x="{x(high) + 6:.1f}" y="{y + 17}">{bar["estimate"]:,.1f} ± {Z95 * bar["stderr"]:,.1f}</text>']
    parts.append(f'<text x="{x(lo):.1f}" y="{row * len(bars) + 20}">{lo:,.0f}</text>'
                 f'<text x="{x(hi):.1f}" y="{row * len(bars) + 20}" text-anchor="end">{hi:,.0f}</text></svg>')
    return Markup("".join(parts))
