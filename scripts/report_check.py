"""Render HTML reports in headless Chromium and check what a reader would see (``make report-check``).

For each report: a PNG of the whole page at 1280 px wide beside it (report.png), and, measured by Chromium itself
on a copy of the page with a measuring script added (the report carries no script of its own), that the page does
not scroll sideways at that width and that no two texts of a chart overlap (tick labels, axis titles, the numbered
points of the accuracy-vs-latency chart), and that every whisker (a 95 % interval: speedup bars, accuracy points)
lies inside its chart; it prints each chart's whiskers in words beside the figure drawn at their bar; and that each
row's speedup, interval and verdict in bench.json beside the page are what the HTML table, bench.md and the speedup
chart show. Exits 1 naming each failure.

Usage: python scripts/report_check.py [REPORT.html ...]   (default: reports/*/report.html)
Needs Chromium (Debian: apt-get install chromium).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH = 1280
TOLERANCE_PX = 1.0  # overlap below this in either direction is antialiasing, not a collision

MEASURE = """<script>
addEventListener("load", () => {
  const overlaps = [];
  for (const chart of document.querySelectorAll(".chart")) {
    const boxes = [...chart.querySelectorAll("svg text")].filter(t => t.textContent.trim())
      .map(t => [t.textContent.trim(), t.getBoundingClientRect()]).filter(([, r]) => r.width && r.height);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, ra] = boxes[i], [b, rb] = boxes[j];
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > TOLERANCE && h > TOLERANCE) overlaps.push([chart.id, a, b, Math.round(w), Math.round(h)]);
    }
  }
  const whiskers = [];  // each drawn 95 % interval: its chart, its id, its size, whether it lies inside its chart
  for (const chart of document.querySelectorAll(".chart")) {
    const frame = chart.querySelector("svg").getBoundingClientRect();
    for (const group of chart.querySelectorAll("g[id^='whisker-']")) {
      const r = group.getBoundingClientRect();
      const inside = r.left >= frame.left - 1 && r.right <= frame.right + 1 && r.top >= frame.top - 1
        && r.bottom <= frame.bottom + 1;
      const figure = chart.querySelector(`g[id='${group.id.replace("whisker-", "figure-")}']`);
      whiskers.push([chart.id, group.id, Math.round(r.width), Math.round(r.height), inside,
                     figure ? figure.textContent.trim() : ""]);
    }
  }
  const result = {scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth,
                  height: document.documentElement.scrollHeight, overlaps: overlaps, whiskers: whiskers,
                  charts: document.querySelectorAll(".chart svg").length};
  const out = document.createElement("pre");
  out.id = "report-check";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    sys.exit("report-check needs Chromium: apt-get install chromium (Debian), then run it again.")


def _run(browser: str, profile: Path, *args: str) -> str:
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=True).stdout


def check(page: Path, browser: str, work: Path) -> list[str]:
    """The page's failures (empty when it passes); writes the PNG beside it."""
    measured = work / page.parent.name / page.name
    measured.parent.mkdir(parents=True, exist_ok=True)
    measured.write_text(page.read_text().replace("</body>", MEASURE.replace("TOLERANCE", str(TOLERANCE_PX))
                                                + "</body>", 1))
    dom = _run(browser, work / "profile", f"--window-size={WIDTH},900", "--virtual-time-budget=10000",
               "--dump-dom", measured.as_uri())
    found = re.search(r'<pre id="report-check">(.*?)</pre>', dom, re.S)
    if not found:
        return [f"{page}: Chromium did not run the measuring script"]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                        .replace("&amp;", "&"))
    png = page.with_suffix(".png")
    _run(browser, work / "profile", f"--window-size={WIDTH},{min(result['height'] + 40, 16000)}",
         f"--screenshot={png}", page.resolve().as_uri())
    failures = []
    if result["scrollWidth"] > result["innerWidth"]:
        failures.append(f"{page}: the page is {result['scrollWidth']} px wide at a {result['innerWidth']} px "
                        "window: it scrolls sideways")
    failures += [f"{page}: in {chart}, {a!r} and {b!r} overlap ({w}x{h} px)" for chart, a, b, w, h
                 in result["overlaps"]]
    failures += [f"{page}: in {chart}, the whisker {whisker} lies outside the chart" for chart, whisker, _, _, inside, _
                 in result["whiskers"] if not inside]
    print(f"{page}: {result['charts']} charts, {result['scrollWidth']} px wide at {result['innerWidth']} px, "
          f"{len(result['overlaps'])} overlapping texts; {png}")
    for line in describe_whiskers(result["whiskers"]):
        print(f"  {line}")
    return failures + figures_agree(page, result["whiskers"])


def figures_agree(page: Path, whiskers: list[list[object]]) -> list[str]:
    """Each row's speedup, interval and verdict as bench.json holds them, against the HTML table, bench.md beside it
    and the figure the speedup chart drew at the row's bar: one figure everywhere, or a failure naming the row."""
    import html as markup

    from trtpipe.bench.stability import verdict_word
    from trtpipe.report.charts import svg_id
    from trtpipe.report.columns import speedup_text
    from trtpipe.report.html import load_results

    results = page.parent / "bench.json"
    if not results.is_file():
        return []
    rows = [r for r in load_results(results)["results"] if r.get("speedup_vs_torch_fp32")]
    text, md_path = page.read_text(), page.parent / "bench.md"
    markdown = md_path.read_text().splitlines() if md_path.is_file() else []
    drawn = {str(w[1]).replace("whisker-", "figure-", 1): str(w[5]) for w in whiskers}
    failures, compared = [], 0
    for row in rows:
        figure, word = speedup_text(row), verdict_word(row.get("unstable"))
        cell = f"<td class=n>{markup.escape(figure)}</td><td>{word}</td>"
        if cell not in text:
            failures.append(f"{page}: {row['variant']} batch {row['batch']}: the HTML table does not show "
                            f"'{figure} {word}' (bench.json's figure)")
        if markdown and not any(line.startswith(f"| {row['variant']} |") and f"| {figure} | {word} |" in line
                                for line in markdown):
            failures.append(f"{page.parent / 'bench.md'}: {row['variant']} batch {row['batch']}: no row shows "
                            f"'{figure} | {word}'")
        at_bar = drawn.get(svg_id("figure", row["variant"], row["batch"]))
        if at_bar and at_bar != figure + (" unstable" if row.get("unstable") else ""):
            failures.append(f"{page}: {row['variant']} batch {row['batch']}: the speedup chart draws '{at_bar}', "
                            f"bench.json says '{figure}' ({word})")
        compared += 1
    print(f"  {compared} rows' speedup, interval and verdict compared between bench.json, the HTML table, bench.md "
          f"and the speedup chart: {len(failures)} disagree")
    return failures


def describe_whiskers(whiskers: list[list[object]]) -> list[str]:
    """The charts' whiskers in words, as Chromium drew them (a description a reader can check without a
    screenshot): per chart how many, and each speedup bar's whisker beside the figure printed at its end."""
    lines = []
    for chart in dict.fromkeys(str(w[0]) for w in whiskers):
        own = [w for w in whiskers if w[0] == chart]
        lines.append(f"{chart}: {len(own)} whiskers (95 % intervals), {sum(bool(w[4]) for w in own)} inside the chart")
        lines += [f"  {w[1]}: {w[2]}x{w[3]} px" + (f", beside '{w[5]}'" if w[5] else "") for w in own]
    return lines


def main(argv: list[str]) -> int:
    pages = [Path(a) for a in argv] or sorted(Path("reports").glob("*/report.html"))
    if not pages:
        print("No reports to check: run `make demo` first (it writes reports/<model>/report.html).")
        return 1
    browser = _chromium()
    with tempfile.TemporaryDirectory() as work:
        failures = [line for page in pages for line in check(page, browser, Path(work))]
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
