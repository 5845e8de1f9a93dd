"""A line plot as SVG, for the result scripts' figures (no plotting library on a fresh machine)."""

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def line_plot(path, title, xlabel, ylabel, curves, xmax, ymax, xstep, dots=False):
    """Writes to `path` the curves (name → [(x, y), …], drawn in order, from 0 on both axes to
    `xmax`, `ymax`), with x ticks every `xstep` and a legend; `dots` marks each point."""
    W, H, PAD = 640, 400, 50

    def fx(x):
        return PAD + x / xmax * (W - 2 * PAD)

    def fy(y):
        return H - PAD - y / ymax * (H - 2 * PAD)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="#fff"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle">{title}</text>',
           f'<line x1="{PAD}" y1="{fy(0)}" x2="{W - PAD}" y2="{fy(0)}" stroke="#000"/>',
           f'<line x1="{PAD}" y1="{fy(0)}" x2="{PAD}" y2="{fy(ymax)}" stroke="#000"/>']
    x = 0
    while x <= xmax:
        svg.append(f'<text x="{fx(x):.1f}" y="{fy(0) + 16}" text-anchor="middle">{x}</text>')
        x += xstep
    ystep = 10 if ymax > 40 else 5 if ymax > 15 else 2
    if ymax > 100:
        # About five to ten ticks: 1, 2 or 5 times a power of ten.
        mag = 10 ** (len(str(int(ymax / 5))) - 1)
        ystep = next(m * mag for m in (1, 2, 5, 10) if ymax / (m * mag) <= 10)
    y = 0
    while y <= ymax:
        svg.append(f'<text x="{PAD - 6}" y="{fy(y) + 4:.1f}" text-anchor="end">{y}</text>')
        y += ystep
    svg.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>')
    svg.append(f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    for i, (name, pts) in enumerate(curves.items()):
        c = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{fx(a):.1f},{fy(b):.1f}" for a, b in pts)
        svg.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        if dots:
            for a, b in pts:
                svg.append(f'<circle cx="{fx(a):.1f}" cy="{fy(b):.1f}" r="3" fill="{c}"/>')
        svg.append(f'<text x="{PAD + 10}" y="{40 + 16 * i}" fill="{c}">— {name}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
