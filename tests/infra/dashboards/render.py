"""A dashboard drawn from Prometheus data, as a picture (matplotlib): the panels' queries over the
window, each target a line per series, laid out on Grafana's 24-column grid. Stat panels show their
last value. Good enough to show in the docs what a panel looks like with data; not Grafana."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tests.infra.dashboards import prometheus as prom

GRID_COLUMNS = 24
ROW_UNIT_IN = 0.42  # inches per grid row unit
WIDTH_IN = 16.0
MAX_SERIES = 8  # lines a panel draws at most (the legend stays readable)
BACKGROUND, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"


def _legend(series: dict, legend_format: str) -> str:
    labels = series["metric"]
    if legend_format and "{{" in legend_format:
        out = legend_format
        for key, value in labels.items():
            out = out.replace("{{" + key + "}}", value).replace("{{ " + key + " }}", value)
        return out
    return legend_format or ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__") or "value"


def render(dashboard: dict, prometheus: prom.Prometheus, start: float, end: float, path: Path,
           titles: list[str] | None = None) -> Path:
    """Draw the panels of `dashboard` (those titled in `titles`, in the dashboard's layout) into `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = prom.resolve_variables(dashboard, prometheus, start, end)
    chosen = [p for p in prom.panels(dashboard) if titles is None or p["title"] in titles]
    # Repack the chosen panels in their order, two or four a row, keeping each one's width share.
    rows: list[list[dict]] = []
    width = 0
    for panel in chosen:
        w = panel.get("gridPos", {}).get("w", 12)
        if not rows or width + w > GRID_COLUMNS:
            rows.append([])
            width = 0
        rows[-1].append(panel)
        width += w
    heights = [max(p.get("gridPos", {}).get("h", 8) for p in row) for row in rows]
    figure = plt.figure(figsize=(WIDTH_IN, sum(heights) * ROW_UNIT_IN + 0.6), facecolor=BACKGROUND)
    figure.suptitle(f"{dashboard['title']}  (local Prometheus, {dt.datetime.utcfromtimestamp(start):%H:%M:%S}"
                    f"-{dt.datetime.utcfromtimestamp(end):%H:%M:%S} UTC)", color=TEXT, fontsize=12, x=0.01,
                    ha="left")
    total = sum(heights)
    top = 0
    for row, height in zip(rows, heights, strict=True):
        x = 0
        for panel in row:
            w = panel.get("gridPos", {}).get("w", 12)
            axes = figure.add_axes([x / GRID_COLUMNS + 0.005, 1 - (top + height) / total * 0.95 - 0.02,
                                    w / GRID_COLUMNS - 0.012, height / total * 0.95 - 0.03], facecolor=PANEL)
            _draw(axes, panel, values, prometheus, start, end)
            x += w
        top += height
    figure.savefig(path, dpi=80, facecolor=BACKGROUND)
    plt.close(figure)
    return path


def _draw(axes, panel: dict, values: dict, prometheus: prom.Prometheus, start: float, end: float) -> None:
    axes.set_title(panel["title"], color=TEXT, fontsize=9, loc="left")
    axes.tick_params(colors=TEXT, labelsize=7)
    for spine in axes.spines.values():
        spine.set_color(GRID)
    lines = []
    for target in panel["targets"]:
        expr = prom.OR_ZERO.sub("", prom.interpolate(target.get("expr", ""), values))
        if not expr:
            continue
        for series in prometheus.query_range(expr, start, end)[:MAX_SERIES]:
            points = [(float(t), float(v)) for t, v in series["values"]]
            lines.append((_legend(series, target.get("legendFormat", "")), points))
    if not lines:
        axes.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center", transform=axes.transAxes)
        axes.set_xticks([])
        axes.set_yticks([])
        return
    if panel.get("type") == "stat":
        label, points = lines[0]
        axes.text(0.5, 0.45, f"{points[-1][1]:.3g}", color="#73bf69", fontsize=22, ha="center", va="center",
                  transform=axes.transAxes)
        axes.set_xticks([])
        axes.set_yticks([])
        return
    for label, points in lines:
        axes.plot([p[0] - start for p in points], [p[1] for p in points], label=label[:40], linewidth=1.2)
    axes.set_xlabel("s since the job started", color=TEXT, fontsize=7)
    axes.grid(color=GRID, linewidth=0.5)
    axes.legend(fontsize=6, loc="upper left", facecolor=PANEL, labelcolor=TEXT, edgecolor=GRID)
