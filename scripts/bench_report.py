#!/usr/bin/env python3
"""Turns the JSON reports of scripts/bench-peer.sh into a Markdown table and an SVG plot.

    scripts/bench_report.py RESULTS_DIR

RESULTS_DIR holds one `<catalog>-<snapshots>.json` per run (icegate-bench --json). Writes
RESULTS_DIR/table.md (every workload, catalog and snapshot count, with icegate's ratio to the
peer) and RESULTS_DIR/growth.svg (throughput and p99 latency against snapshot count, one line
per catalog, for commits and loads). Standard library only.
"""

import json
import math
import pathlib
import re
import sys

WORKLOADS = ["commit", "load-table", "load-table-gzip", "load-table-refs"]
COLOURS = {"icegate-sqlite": "#1f77b4", "icegate-postgres": "#2ca02c", "rustberg": "#d62728"}


def load(directory):
    runs = {}
    for path in sorted(directory.glob("*.json")):
        match = re.fullmatch(r"(.+)-(\d+)", path.stem)
        if not match:
            continue
        catalog, snapshots = match.group(1), int(match.group(2))
        for report in json.loads(path.read_text()):
            runs[(catalog, snapshots, report["workload"])] = report
    return runs


def table(runs):
    catalogs = sorted({c for c, _, _ in runs}, key=lambda c: (c == "rustberg", c))
    counts = sorted({s for _, s, _ in runs})
    lines = ["| workload | snapshots | " + " | ".join(f"{c} req/s (p99 ms)" for c in catalogs) + " | icegate-sqlite / rustberg | postgres / sqlite |",
             "|---|---|" + "---|" * len(catalogs) + "---|---|"]
    for workload in WORKLOADS:
        for count in counts:
            cells, rates = [], {}
            for catalog in catalogs:
                report = runs.get((catalog, count, workload))
                if report is None:
                    cells.append("-")
                    continue
                rates[catalog] = report["requests_per_second"]
                errors = sum(report["errors"].values()) if report["errors"] else 0
                note = f", {errors} errors" if errors else ""
                cells.append(f"{report['requests_per_second']:,.0f} ({report['p99_ms']:.1f}{note})")
            if not any(c != "-" for c in cells):
                continue
            peer, ours = rates.get("rustberg"), rates.get("icegate-sqlite")
            ratio = f"{ours / peer:.1f}x" if peer and ours else "-"
            postgres = rates.get("icegate-postgres")
            share = f"{postgres / ours:.0%}" if postgres and ours else "-"
            lines.append(f"| {workload} | {count:,} | " + " | ".join(cells) + f" | {ratio} | {share} |")
    return "\n".join(lines) + "\n"


def svg(runs):
    """Four panels: req/s and p99 (log scales) against snapshots (log scale), commits and loads."""
    catalogs = sorted({c for c, _, _ in runs})
    counts = sorted({s for _, s, _ in runs})
    panels = [("commit", "requests_per_second", "commit req/s"), ("commit", "p99_ms", "commit p99 ms"),
              ("load-table-gzip", "requests_per_second", "loadTable (gzip) req/s"),
              ("load-table-gzip", "p99_ms", "loadTable (gzip) p99 ms")]
    width, height, pad = 420, 300, 55
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{2 * height + 40}" '
           'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for index, (workload, field, title) in enumerate(panels):
        ox, oy = (index % 2) * width, (index // 2) * height + 40
        values = [runs[(c, s, workload)][field] for c in catalogs for s in counts
                  if (c, s, workload) in runs and runs[(c, s, workload)][field] > 0]
        if not values or len(counts) < 2:
            continue
        low, high = math.log10(min(values)) - 0.1, math.log10(max(values)) + 0.1
        xlow, xhigh = math.log10(counts[0]), math.log10(counts[-1])

        def x(count):
            return ox + pad + (math.log10(count) - xlow) / (xhigh - xlow) * (width - 2 * pad)

        def y(value):
            return oy + height - pad - (math.log10(value) - low) / (high - low) * (height - 2 * pad)

        out.append(f'<text x="{ox + width / 2}" y="{oy + 20}" text-anchor="middle" font-weight="bold">{title}</text>')
        out.append(f'<line x1="{ox + pad}" y1="{oy + height - pad}" x2="{ox + width - pad}" y2="{oy + height - pad}" stroke="black"/>')
        out.append(f'<line x1="{ox + pad}" y1="{oy + pad}" x2="{ox + pad}" y2="{oy + height - pad}" stroke="black"/>')
        for count in counts:
            out.append(f'<text x="{x(count)}" y="{oy + height - pad + 15}" text-anchor="middle">{count:,}</text>')
        for exponent in range(math.floor(low), math.ceil(high) + 1):
            for mantissa in (1, 2, 5):
                value = mantissa * 10 ** exponent
                if low <= math.log10(value) <= high:
                    out.append(f'<text x="{ox + pad - 5}" y="{y(value) + 4}" text-anchor="end">{value:g}</text>')
                    out.append(f'<line x1="{ox + pad}" y1="{y(value)}" x2="{ox + width - pad}" y2="{y(value)}" stroke="#ddd"/>')
        out.append(f'<text x="{ox + width / 2}" y="{oy + height - 18}" text-anchor="middle">snapshots per table</text>')
        for catalog in catalogs:
            points = [(x(s), y(runs[(catalog, s, workload)][field])) for s in counts
                      if (catalog, s, workload) in runs and runs[(catalog, s, workload)][field] > 0]
            colour = COLOURS.get(catalog, "#555")
            if len(points) > 1:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for px, py in points:
                out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>')
    for i, catalog in enumerate(catalogs):
        out.append(f'<rect x="{20 + i * 180}" y="10" width="12" height="12" fill="{COLOURS.get(catalog, "#555")}"/>')
        out.append(f'<text x="{38 + i * 180}" y="20">{catalog}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    directory = pathlib.Path(sys.argv[1])
    runs = load(directory)
    if not runs:
        sys.exit(f"no reports in {directory}")
    (directory / "table.md").write_text(table(runs))
    (directory / "growth.svg").write_text(svg(runs))
    print(table(runs))


if __name__ == "__main__":
    main()
