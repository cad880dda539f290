"""The allocation figure as a standalone SVG: allocation % against arrived demand %, one line per packer.

Plain SVG text (no plotting package): axes with ticks and labels, a grid, a legend, a title. A
line may be dashed (e.g. a published reference beside a measured one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

PALETTE: Final = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22")


@dataclass(frozen=True)
class Line:
    """One curve: its legend label, points (arrived % -> allocation %), and whether it is dashed."""

    label: str
    points: Mapping[int, float]
    dashed: bool = False


def allocation_svg(lines: Sequence[Line], *, title: str, width: int = 760, height: int = 460, x_min: int = 0, y_min: float | None = None) -> str:
    """An SVG of ``lines``: x is arrived demand (% of device capacity), y the allocation (%).

    ``x_min`` / ``y_min``: where the axes start (points outside are left out); default 0 and the lowest point.
    """
    left, right, top, bottom = 64, 190, 40, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for line in lines for x in line.points]
    ys = [y for line in lines for y in line.points.values()]
    x_max = max(xs, default=100)
    x_max = max(10, ((x_max + 9) // 10) * 10)
    low = min(ys, default=0.0) if y_min is None else y_min
    y_lo = max(0.0, (int(low) // 10) * 10.0)
    y_hi = 100.0

    x_lo = max(0, (x_min // 10) * 10)

    def px(x: float) -> float:
        return left + plot_w * (x - x_lo) / (x_max - x_lo)

    def py(y: float) -> float:
        return top + plot_h * (1 - (y - y_lo) / (y_hi - y_lo))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="{top - 16}" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]
    for x in range(x_lo, x_max + 1, 10):
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + plot_h}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{x}</text>')
    step = 10 if y_hi - y_lo > 30 else 5
    y = y_lo
    while y <= y_hi + 1e-9:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + plot_w}" y2="{py(y):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += step
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 12}" text-anchor="middle">arrived demand (% of device capacity)</text>')
    out.append(f'<text transform="translate(18 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">allocation (% of device capacity)</text>')
    for i, line in enumerate(lines):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in sorted(line.points.items()) if v >= y_lo and x >= x_lo)
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8"{dash} points="{pts}"/>')
        ly = top + 14 + 20 * i
        lx = left + plot_w + 14
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 26}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 32}" y="{ly}">{escape(line.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
