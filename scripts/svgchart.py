"""A small SVG chart writer for the benchmark reports (scripts/charts.py): grouped horizontal
bars with value labels and an optional reference line. The standard library only, so the
measurement scripts need no plotting package; the output is plain SVG that mdBook and GitHub
show as an image."""

from html import escape

# Colour-blind-safe palette (Okabe-Ito).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
FONT = "font-family='Helvetica, Arial, sans-serif'"


def _fmt(value, unit):
    if value >= 100:
        text = f"{value:,.0f}"
    elif value >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text}{unit}"


def _ticks(top):
    """Round tick values from 0 to at least `top`."""
    if top <= 0:
        return [0, 1]
    step = 10 ** len(str(int(top))) / 10
    for factor in (1, 2, 5, 10):
        if top / (step * factor) <= 6:
            step *= factor
            break
    ticks, t = [], 0.0
    while t < top + step * 0.999:
        ticks.append(round(t, 10))
        t += step
    return ticks


def bar_chart(title, categories, series, values, *, unit="", subtitle="", reference=None,
              reference_label="", width=760):
    """Grouped horizontal bars: one group per category, one bar per series in each.

    values[s][c] is the value of series s for category c (None: no bar). `reference` draws a
    dashed vertical line at that value (a floor or a target). Returns the SVG text."""
    label_w = min(360, 20 + int(7.6 * max(len(c) for c in categories)))
    bar_h, gap, top, legend_h = 14, 10, 56 if subtitle else 40, 28
    group_h = bar_h * len(series) + gap
    plot_w = width - label_w - 70
    height = top + group_h * len(categories) + legend_h + 30
    present = [v for row in values for v in row if v is not None]
    vmax = max(present + ([reference] if reference else [])) if present else 1
    ticks = _ticks(vmax)
    scale = plot_w / ticks[-1]
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' {FONT} font-size='12'>",
           f"<rect width='{width}' height='{height}' fill='white'/>",
           f"<text x='10' y='22' font-size='15' font-weight='bold'>{escape(title)}</text>"]
    if subtitle:
        out.append(f"<text x='10' y='40' fill='#555'>{escape(subtitle)}</text>")
    plot_bottom = top + group_h * len(categories)
    for t in ticks:
        x = label_w + t * scale
        out.append(f"<line x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' y2='{plot_bottom}' stroke='#e4e4e4'/>")
        out.append(f"<text x='{x:.1f}' y='{plot_bottom + 14}' text-anchor='middle' fill='#555'>"
                   f"{escape(_fmt(t, unit) if t else '0')}</text>")
    for ci, category in enumerate(categories):
        y0 = top + ci * group_h
        out.append(f"<text x='{label_w - 8}' y='{y0 + group_h / 2:.1f}' text-anchor='end' "
                   f"dominant-baseline='middle'>{escape(category)}</text>")
        for si, _ in enumerate(series):
            value = values[si][ci]
            if value is None:
                continue
            y = y0 + si * bar_h
            w = max(value * scale, 0.5)
            colour = PALETTE[si % len(PALETTE)]
            out.append(f"<rect x='{label_w}' y='{y}' width='{w:.1f}' height='{bar_h - 2}' fill='{colour}'/>")
            out.append(f"<text x='{label_w + w + 4:.1f}' y='{y + bar_h / 2:.1f}' "
                       f"dominant-baseline='middle' font-size='10' fill='#333'>{escape(_fmt(value, unit))}</text>")
    if reference is not None:
        x = label_w + reference * scale
        out.append(f"<line x1='{x:.1f}' y1='{top - 6}' x2='{x:.1f}' y2='{plot_bottom}' stroke='#C00' "
                   f"stroke-dasharray='5,3'/>")
        if reference_label:
            # Left of the line when the line is in the right half, so the text stays inside.
            anchor, dx = ("end", -4) if x > label_w + plot_w / 2 else ("start", 4)
            out.append(f"<text x='{x + dx:.1f}' y='{top - 8}' text-anchor='{anchor}' fill='#C00' "
                       f"font-size='11'>{escape(reference_label)}</text>")
    x, y = 10, plot_bottom + 36
    for si, name in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        out.append(f"<rect x='{x}' y='{y - 10}' width='12' height='12' fill='{colour}'/>")
        out.append(f"<text x='{x + 16}' y='{y}'>{escape(name)}</text>")
        x += 30 + 7 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"
