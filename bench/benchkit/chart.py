"""The latency-vs-offered-rate chart of the sweep, drawn as plain SVG (no plotting library):
log-scaled axes, one colour per gateway, p50 solid and p99 dashed, the pass mark as a line."""

import math
from xml.sax.saxutils import escape

COLOURS = {"direct": "#7f7f7f", "nginx": "#2ca02c", "switchyard": "#d62728", "tensorzero": "#1f77b4",
           "portkey": "#9467bd", "litellm": "#ff7f0e"}
W, H = 860, 520
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 40, 60


def _ticks(low, high):
    """1-2-5 ticks covering [low, high] on a log axis."""
    out = []
    exp = math.floor(math.log10(low))
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > high * 1.0001:
                return out
            if v >= low * 0.9999:
                out.append(v)
        exp += 1


def _step_below(v):
    """The largest 1-2-5 value not above `v`: axes end on a tick, close to the data."""
    exp = math.floor(math.log10(v))
    return max(m * 10 ** exp for m in (1, 2, 5) if m * 10 ** exp <= v * 1.0001)


def _step_above(v):
    exp = math.floor(math.log10(v))
    return min(m * 10 ** e for e in (exp, exp + 1) for m in (1, 2, 5) if m * 10 ** e >= v * 0.9999)


def _label(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def render(series, threshold_ms, title):
    """`series`: {gateway: [(rate, p50_ms, p99_ms), ...]}; returns the SVG text."""
    points = [(r, a, b) for pts in series.values() for (r, a, b) in pts if r > 0 and a > 0 and b > 0]
    if not points:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="120">'
                f'<text x="20" y="60" font-family="sans-serif">{escape(title)}: no sweep data</text></svg>\n')
    x_lo = _step_below(min(p[0] for p in points))
    x_hi = _step_above(max(p[0] for p in points))
    y_lo = _step_below(min(min(p[1] for p in points), threshold_ms))
    y_hi = _step_above(max(max(p[2] for p in points), threshold_ms))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(v):
        return LEFT + pw * (math.log10(v) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def y(v):
        return TOP + ph * (1 - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>']
    for v in _ticks(x_lo, x_hi):
        out.append(f'<line x1="{x(v):.1f}" y1="{TOP}" x2="{x(v):.1f}" y2="{TOP + ph}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x(v):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{_label(v)}</text>')
    for v in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + pw}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_label(v)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 18}" text-anchor="middle">offered rate (requests/s, open loop)</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + ph / 2})">latency (ms, from scheduled send)</text>')
    ty = y(threshold_ms)
    out.append(f'<line x1="{LEFT}" y1="{ty:.1f}" x2="{LEFT + pw}" y2="{ty:.1f}" stroke="#b00" '
               'stroke-dasharray="2,3"/>')
    out.append(f'<text x="{LEFT + pw - 4}" y="{ty - 4:.1f}" text-anchor="end" fill="#b00">'
               f'p99 pass mark {threshold_ms:g} ms</text>')
    legend_y = TOP + 10
    for name, pts in series.items():
        pts = sorted(p for p in pts if p[0] > 0 and p[1] > 0 and p[2] > 0)
        if not pts:
            continue
        colour = COLOURS.get(name, "#000")
        for idx, dash in ((1, ""), (2, ' stroke-dasharray="6,4"')):
            path = " ".join(f"{'M' if i == 0 else 'L'}{x(p[0]):.1f},{y(p[idx]):.1f}" for i, p in enumerate(pts))
            out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            for p in pts:
                out.append(f'<circle cx="{x(p[0]):.1f}" cy="{y(p[idx]):.1f}" r="2.5" fill="{colour}"/>')
        lx = LEFT + pw + 16
        out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 22}" y2="{legend_y}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 28}" y="{legend_y + 4}">{escape(name)} p50</text>')
        out.append(f'<line x1="{lx}" y1="{legend_y + 16}" x2="{lx + 22}" y2="{legend_y + 16}" stroke="{colour}" '
                   'stroke-width="2" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{lx + 28}" y="{legend_y + 20}">{escape(name)} p99</text>')
        legend_y += 40
    out.append("</svg>")
    return "\n".join(out) + "\n"
