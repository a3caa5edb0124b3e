"""Inline SVG charts for ``report.html``: plain strings, no JavaScript, every label escaped.

Each function returns one ``<svg>`` element sized by its ``viewBox`` (CSS scales it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

from atlasrun.diagnostics.aggregate import ModelModes
from atlasrun.diagnostics.taxonomy import FAMILIES, MODES, UNCLASSIFIED, modes_of
from atlasrun.scoring.stats import Estimate

FONT = 12
INK, MUTED, GRID, AXIS = "#1f2933", "#616e7c", "#e4e7eb", "#9aa5b1"
# Categorical colours for models (Tableau 10).
MODEL_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
# Failure modes: blues for the tool-call family, warm colours for the cognitive family.
MODE_COLORS: dict[str, str] = {
    "malformed_call": "#08519c",
    "wrong_tool": "#3182bd",
    "no_tool_use": "#6baed6",
    "err_recovery": "#9ecae1",
    "task_misunderstanding": "#a50f15",
    "faulty_synthesis": "#de2d26",
    "response_misparsing": "#fb6a4a",
    "early_termination": "#fd8d3c",
    "hallucinated_fact": "#fdae6b",
    "logical_error": "#b15928",
    "constraint_violation": "#e7ba52",
    UNCLASSIFIED: "#bdbdbd",
}
MODE_LABELS: dict[str, str] = {**{m.id: m.label for m in MODES}, UNCLASSIFIED: "Unclassified"}
FAMILY_NAMES = {"tool_call": "Tool-call", "cognitive": "Cognitive"}


def model_color(index: int) -> str:
    return MODEL_COLORS[index % len(MODEL_COLORS)]


def _text_width(text: str, size: int = FONT) -> float:
    return len(text) * size * 0.56


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _t(
    x: float,
    y: float,
    text: str,
    anchor: str = "start",
    size: int = FONT,
    fill: str = INK,
    weight: str = "normal",
    extra: str = "",
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}" '
        f'font-weight="{weight}"{extra}>{escape(text)}</text>'
    )


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """0 .. >= high in round steps (1, 2, 2.5, 5 x 10^k)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(s * power for s in (1, 2, 2.5, 5, 10) if s * power >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def pass_rate_chart(rows: Sequence[tuple[str, Estimate | None]], colors: Mapping[str, str]) -> str:
    """Horizontal bars of pass rate with 95% CI whiskers, one per model."""
    label_w = min(240.0, max(_text_width(name) for name, _ in rows) + 16) if rows else 80.0
    plot_w, row_h, top = 460.0, 30.0, 16.0
    left, width = label_w, label_w + 460 + 150
    height = top + row_h * len(rows) + 34
    body: list[str] = []
    for tick in range(0, 101, 20):
        x = left + plot_w * tick / 100
        body.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 28}" stroke="{GRID}"/>')
        body.append(_t(x, height - 12, f"{tick}%", "middle", 11, MUTED))
    for i, (name, est) in enumerate(rows):
        y = top + i * row_h
        mid = y + row_h / 2
        body.append(_t(left - 8, mid + 4, _short(name, 36), "end", extra=f' data-model="{escape(name)}"'))
        if est is None:
            body.append(_t(left + 4, mid + 4, "not scored", size=11, fill=MUTED))
            continue
        body.append(
            f'<rect x="{left}" y="{y + 6}" width="{plot_w * est.point:.1f}" height="{row_h - 12}" '
            f'rx="2" fill="{colors.get(name, AXIS)}"><title>{escape(name)}: {100 * est.point:.1f}%</title></rect>'
        )
        lo, hi = left + plot_w * est.low, left + plot_w * est.high
        body.append(
            f'<g stroke="{INK}" stroke-width="1.4"><line x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}"/>'
            f'<line x1="{lo:.1f}" y1="{mid - 6}" x2="{lo:.1f}" y2="{mid + 6}"/>'
            f'<line x1="{hi:.1f}" y1="{mid - 6}" x2="{hi:.1f}" y2="{mid + 6}"/></g>'
        )
        body.append(
            _t(
                max(hi, left + plot_w * est.point) + 8,
                mid + 4,
                f"{100 * est.point:.1f}%  [{100 * est.low:.1f}, {100 * est.high:.1f}]",
                size=11,
            )
        )
    body.append(f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{height - 28}" stroke="{AXIS}"/>')
    return _svg(width, height, "Pass rate with its 95% Wilson interval (n = tasks)", body)


def failure_chart(rows: Sequence[ModelModes]) -> str:
    """100% stacked bars: each model's diagnosed failures split by primary mode, coloured by family."""
    columns = [m.id for m in MODES] + [UNCLASSIFIED]
    label_w = min(240.0, max([_text_width(r.model) for r in rows] + [60.0]) + 16)
    plot_w, row_h, top = 560.0, 30.0, 10.0
    left = label_w
    legend_top = top + row_h * len(rows) + 34
    width = left + plot_w + 110
    height = legend_top + 2 * 22 + 8
    body: list[str] = []
    for tick in range(0, 101, 25):
        x = left + plot_w * tick / 100
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{legend_top - 26}" stroke="{GRID}"/>')
        body.append(_t(x, legend_top - 12, f"{tick}%", "middle", 11, MUTED))
    for i, row in enumerate(rows):
        y = top + i * row_h
        body.append(
            _t(
                left - 8,
                y + row_h / 2 + 4,
                _short(row.model, 36),
                "end",
                weight="bold" if row.model == "Overall" else "normal",
            )
        )
        if not row.diagnosed:
            text = f"{row.failing} failing, none diagnosed" if row.failing else "no failures"
            body.append(_t(left + 4, y + row_h / 2 + 4, text, size=11, fill=MUTED))
            continue
        x = left
        for mode in columns:
            share = row.shares.get(mode, 0.0)
            if share <= 0:
                continue
            w = plot_w * share
            body.append(
                f'<rect x="{x:.1f}" y="{y + 5}" width="{w:.1f}" height="{row_h - 10}" '
                f'fill="{MODE_COLORS[mode]}" stroke="#fff" stroke-width="0.8"><title>'
                f"{escape(row.model)}: {escape(MODE_LABELS[mode])} {100 * share:.1f}% "
                f"({row.counts.get(mode, 0)} of {row.diagnosed})</title></rect>"
            )
            if w >= 30:
                dark = mode in (
                    "malformed_call",
                    "wrong_tool",
                    "task_misunderstanding",
                    "faulty_synthesis",
                    "logical_error",
                )
                body.append(
                    _t(
                        x + w / 2,
                        y + row_h / 2 + 4,
                        f"{100 * share:.0f}%",
                        "middle",
                        10,
                        "#fff" if dark else INK,
                    )
                )
            x += w
        body.append(_t(left + plot_w + 8, y + row_h / 2 + 4, f"n={row.diagnosed}", size=11, fill=MUTED))
    for f, family in enumerate(FAMILIES):
        y = legend_top + f * 22
        x = 8.0
        body.append(_t(x, y + 10, f"{FAMILY_NAMES[family]}:", size=11, weight="bold"))
        x += 76
        entries = [m.id for m in modes_of(family)] + ([UNCLASSIFIED] if family == FAMILIES[-1] else [])
        for mode in entries:
            body.append(f'<rect x="{x:.1f}" y="{y}" width="11" height="11" fill="{MODE_COLORS[mode]}"/>')
            body.append(_t(x + 15, y + 10, MODE_LABELS[mode], size=11))
            x += 15 + _text_width(MODE_LABELS[mode], 11) + 14
        width = max(width, x)
    return _svg(width, height, "Failure modes of diagnosed failures (share of primary mode)", body)


def pareto_frontier(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Points (name, wall seconds, pass rate) no other point beats on both: faster-or-equal and better."""
    best = -1.0
    frontier: list[tuple[str, float, float]] = []
    for point in sorted(points, key=lambda p: (p[1], -p[2])):
        if point[2] > best:
            frontier.append(point)
            best = point[2]
    return frontier


def _axis_range(values: Sequence[float]) -> list[float]:
    """Round ticks covering the values with some padding; starts at 0 unless the data sit far from it."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, hi * 0.2, 1e-3)
    lo, hi = max(0.0, lo - span * 0.25), hi + span * 0.25
    if lo < span:  # close enough to zero: show it
        lo = 0.0
    ticks = nice_ticks(hi - lo)
    step = ticks[1] - ticks[0]
    start = math.floor(lo / step) * step
    out = [start]
    while out[-1] < hi - 1e-12:
        out.append(out[-1] + step)
    return out


def _place(x: float, y: float, width: float, boxes: list[tuple[float, float, float, float]]) -> float:
    """A label's baseline y near ``y`` whose box does not overlap labels already placed."""
    for shift in (0, 14, -14, 28, -28, 42, -42):
        box = (x, y + shift - 11, x + width, y + shift + 3)
        if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
            boxes.append(box)
            return y + shift
    boxes.append((x, y - 11, x + width, y + 3))
    return y


def latency_chart(points: Sequence[tuple[str, float, float]], colors: Mapping[str, str]) -> str:
    """Mean wall-clock seconds per task (x) vs pass rate (y), with the Pareto frontier."""
    left, right, top, bottom = 60.0, 190.0, 34.0, 46.0
    plot_w, plot_h = 600.0, 320.0
    xs = _axis_range([p[1] for p in points])
    x_min, x_max = xs[0], xs[-1]
    frontier = pareto_frontier(points)
    on_frontier = {p[0] for p in frontier}

    def sx(v: float) -> float:
        return left + plot_w * (v - x_min) / (x_max - x_min)

    def sy(v: float) -> float:
        return top + plot_h * (1 - v)

    body: list[str] = []
    for tick in range(0, 101, 20):
        y = sy(tick / 100)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_t(left - 8, y + 4, f"{tick}%", "end", 11, MUTED))
    for value in xs:
        x = sx(value)
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="{GRID}"/>')
        body.append(_t(x, top + plot_h + 16, f"{value:.4g}", "middle", 11, MUTED))
    body.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="{AXIS}"/>'
    )
    body.append(
        _t(
            left + plot_w / 2,
            top + plot_h + 36,
            "mean wall-clock time per scored task (s)",
            "middle",
            12,
            MUTED,
        )
    )
    body.append(
        _t(
            14,
            top + plot_h / 2,
            "pass rate",
            "middle",
            12,
            MUTED,
            extra=f' transform="rotate(-90 14 {top + plot_h / 2:.1f})"',
        )
    )
    if len(frontier) > 1:
        path = " ".join(f"{sx(w):.1f},{sy(p):.1f}" for _, w, p in frontier)
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{INK}" stroke-width="1.5" '
            f'stroke-dasharray="5 4"/>'
        )
    boxes: list[tuple[float, float, float, float]] = []
    for _name, wall, rate in points:
        boxes.append((sx(wall) - 7, sy(rate) - 7, sx(wall) + 7, sy(rate) + 7))
    labels: list[str] = []
    for name, wall, rate in sorted(points, key=lambda p: -p[2]):
        x, y, color = sx(wall), sy(rate), colors.get(name, AXIS)
        fill = color if name in on_frontier else "#fff"
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{fill}" stroke="{color}" '
            f'stroke-width="2"><title>{escape(name)}: {wall:.2f}s, {100 * rate:.1f}%</title></circle>'
        )
        label = _short(name, 28)
        width = _text_width(label, 11)
        lx = x + 10 if x + 10 + width <= left + plot_w + right - 4 else x - 10 - width
        labels.append(_t(lx, _place(lx, y + 4, width, boxes), label, size=11))
    body += labels
    legend = [
        (
            (
                f'<line x1="{left}" y1="14" x2="{left + 24}" y2="14" stroke="{INK}" stroke-width="1.5" '
                f'stroke-dasharray="5 4"/>'
            ),
            "Pareto frontier",
        ),
        (
            f'<circle cx="{left + 12}" cy="14" r="5" fill="{AXIS}" stroke="{AXIS}" stroke-width="2"/>',
            "on frontier",
        ),
        (
            f'<circle cx="{left + 12}" cy="14" r="5" fill="#fff" stroke="{AXIS}" stroke-width="2"/>',
            "dominated",
        ),
    ]
    offset = 0.0
    for mark, text in legend:
        body.append(f'<g transform="translate({offset:.1f} 0)">{mark}{_t(left + 30, 18, text, size=11)}</g>')
        offset += 40 + _text_width(text, 11) + 18
    return _svg(left + plot_w + right, top + plot_h + bottom, "Latency vs pass rate", body)


def coverage_histogram(
    name: str, coverages: Sequence[float], threshold: float, color: str, bins: int = 10
) -> str:
    """Share of a model's scored tasks per coverage bin ([0, 0.1), ..., [0.9, 1.0]), threshold marked."""
    left, top, plot_w, plot_h = 40.0, 26.0, 260.0, 120.0
    counts = [0] * bins
    for c in coverages:
        counts[min(int(c * bins + 1e-9), bins - 1)] += 1
    n = len(coverages)
    peak = max([k / n for k in counts] + [0.0]) if n else 0.0
    ys = nice_ticks(max(peak, 0.1), 4)
    y_max = ys[-1]
    body = [_t(left, 15, _short(name, 40), weight="bold"), _t(left + plot_w, 15, f"n={n}", "end", 11, MUTED)]
    for tick in ys:
        y = top + plot_h * (1 - tick / y_max)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{GRID}"/>')
        body.append(_t(left - 6, y + 4, f"{100 * tick:.0f}%", "end", 10, MUTED))
    bar_w = plot_w / bins
    for i, k in enumerate(counts):
        if not k:
            continue
        h = plot_h * (k / n) / y_max
        body.append(
            f'<rect x="{left + i * bar_w + 1:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 2:.1f}" '
            f'height="{h:.1f}" fill="{color}"><title>coverage {i / bins:.1f}-{(i + 1) / bins:.1f}: '
            f"{k} task(s)</title></rect>"
        )
    tx = left + plot_w * threshold
    body.append(
        f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{top + plot_h}" stroke="{INK}" '
        f'stroke-dasharray="4 3"/>'
    )
    body.append(_t(tx - 3, top + 8, f"pass ≥ {threshold:g}", "end", 10, INK))
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="{AXIS}"/>'
    )
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(_t(left + plot_w * tick, top + plot_h + 14, f"{tick:g}", "middle", 10, MUTED))
    body.append(_t(left + plot_w / 2, top + plot_h + 30, "claim coverage", "middle", 11, MUTED))
    return _svg(left + plot_w + 12, top + plot_h + 38, f"Coverage histogram: {name}", body)
