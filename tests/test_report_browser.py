"""The HTML a researcher opens, checked in a real browser (headless Chromium; skipped without one):
it loads with no network request and no error, every figure decodes, and the leaderboard fits
a 1,440 px window without horizontal scrolling. ``scripts/screenshot_reports.sh`` takes the
screenshots people look at."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.cli import main

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium)")
ROOT = Path(__file__).resolve().parents[1]

#: injected into a copy of the page: collects errors, fetched resources and the layout after load
PROBE = """<script>
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push(String(e.message || (e.target && (e.target.src || e.target.href)) || 'error'));
  }, true);
  var orig = console.error;
  console.error = function () { errors.push(Array.prototype.join.call(arguments, ' ')); orig.apply(console, arguments); };
  window.addEventListener('load', function () {
    var boards = Array.prototype.slice.call(document.querySelectorAll('table[class^="leaderboard"]'));
    var res = {
      errors: errors,
      resources: performance.getEntriesByType('resource').map(function (e) { return e.name; }),
      viewport: window.innerWidth,
      page_width: document.documentElement.scrollWidth,
      boards: boards.map(function (t) {
        var w = t.parentElement;
        return {right: t.getBoundingClientRect().right, scrolls: w.scrollWidth > w.clientWidth};
      }),
      images: Array.prototype.map.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; }),
      body_width: document.body.clientWidth,
      tables: Array.prototype.map.call(document.querySelectorAll('table'), function (t) {
        var r = t.getBoundingClientRect(), w = t.parentElement;
        return {name: t.className, right: r.right, height: r.height, rows: t.rows.length,
                scrolls: w.scrollWidth > w.clientWidth};
      }),
      figures: Array.prototype.map.call(document.images, function (i) {
        return {alt: i.alt, width: i.getBoundingClientRect().width, natural: i.naturalWidth};
      })
    };
    document.body.setAttribute('data-probe', JSON.stringify(res));
  });
})();
</script>"""


def probe(page: Path, tmp_path: Path, width: int = 1440) -> dict:
    copy = tmp_path / f"probe-{page.name}"
    copy.write_text(page.read_text().replace("<head>", "<head>\n" + PROBE, 1))
    out = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--window-size={width},900", "--virtual-time-budget=5000",
         # any request that leaves the machine would fail loudly instead of silently loading
         "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--dump-dom", copy.as_uri()],
        capture_output=True, text=True, timeout=120)
    m = re.search(r'data-probe="([^"]*)"', out.stdout)
    assert m, f"the page did not finish loading in Chromium:\n{out.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from test_reporting import write_synthetic

    from test_reporting import write_sweep_synthetic

    root = tmp_path_factory.mktemp("browser")
    results = root / "results"
    write_synthetic(results)
    write_sweep_synthetic(results)     # the PBN paper's cost-model columns: long, unbreakable titles
    _long_configuration(results)
    assert main(["report", "--results", str(results), "--out", str(root / "reports")]) == 0
    assert main(["leaderboard", "--results", str(results), "--out", str(root / "lb"), "--include-smoke"]) == 0
    return [root / "reports" / "mnist_rotated" / "index.html", root / "reports" / "cifar10c" / "index.html",
            root / "lb" / "leaderboard.html", root / "reports" / "pbn_sweep" / "index.html"]


def _long_configuration(results: Path) -> None:
    """A copy of the sweep suite's MAP run under a Laplace-like label and configuration as long as the
    real ones (``laplace_diag[glm_sampler=jvp,...]``, 16 options): the labels that once crushed the
    configuration column of the provenance tables to 60 px."""
    from bench.store import ResultsStore, config_hash, load_records

    cfg = {f"option_number_{i}": f"value_{i}_" + "x" * 12 for i in range(16)}
    label = "laplace_diag[" + ",".join(f"option_number_{i}=value_{i}" for i in range(5)) + "]"
    df = load_records(results, "pbn_sweep")
    store = ResultsStore(results)
    for _, r in df[df["method"] == "deterministic"].iterrows():
        rec = {k: r[k] for k in ("status", "suite", "profile", "task", "model", "seed", "git_commit", "device",
                                 "started_at", "finished_at", "kind", "shift", "severity", "n")}
        rec.update(method="laplace_diag", method_label=label, method_config=cfg, config_hash=config_hash(cfg),
                   seed=int(r["seed"]), n=int(r["n"]), severity=None if r["severity"] != r["severity"] else r["severity"],
                   metrics={k.split(".", 1)[1]: r[k] for k in r.index if k.startswith("metrics.") and r[k] == r[k]},
                   cost={k.split(".", 1)[1]: r[k] for k in r.index if k.startswith("cost.") and r[k] == r[k]},
                   diagnostics=None)
        store.write(store.run_dir("pbn_sweep", str(r["model"]), "laplace_diag", rec["config_hash"], int(r["seed"])), rec)


def test_pages_load_offline_without_errors(pages, tmp_path):
    for page in pages:
        res = probe(page, tmp_path)
        assert res["errors"] == [], (page, res["errors"])
        fetched = [r for r in res["resources"] if not r.startswith(("data:", "file:"))]
        assert fetched == [], (page, fetched)          # nothing from a server
        assert res["images"] and all(res["images"]), page  # every embedded figure decodes


def test_leaderboards_fit_a_1440_px_window(pages, tmp_path):
    for page in pages:
        res = probe(page, tmp_path, width=1440)
        assert res["boards"], f"no leaderboard table in {page}"
        for board in res["boards"]:
            assert not board["scrolls"] and board["right"] <= res["viewport"], (page, board)
        assert res["page_width"] <= res["viewport"], page    # no horizontal page scroll either


#: a table row taller than this (px) means a column was crushed by an unbreakable neighbour
MAX_ROW_HEIGHT = 150


def test_every_table_fits_the_page_and_stays_compact(pages, tmp_path):
    """No table of any page (ranked boards, cost, configurations, provenance, sweeps) is wider than
    a 1,440 px window or needs a scroll bar, and none grows taller than MAX_ROW_HEIGHT per row:
    long labels and titles wrap instead of crushing the columns beside them."""
    for page in pages:
        res = probe(page, tmp_path, width=1440)
        assert len(res["tables"]) >= 2, page
        for t in res["tables"]:
            assert not t["scrolls"] and t["right"] <= res["viewport"], (page, t)
            assert t["height"] <= MAX_ROW_HEIGHT * t["rows"], (page, t)


def test_figures_keep_at_least_half_the_page(pages, tmp_path):
    """A figure is shown at its natural size or, when the page scales it down, at no less than half
    the text width."""
    for page in pages:
        res = probe(page, tmp_path, width=1440)
        for f in res["figures"]:
            assert f["width"] >= min(f["natural"], 0.5 * res["body_width"]) - 1, (page, f)


def test_reports_show_the_ranked_board_and_the_uniform_reference(pages):
    for page in pages[:3]:     # pbn_sweep is no registered suite: its class count is unknown
        text = page.read_text()
        assert "uniform predictor" in text, page
    report = pages[0].read_text()
    # the ranked board with its cost columns comes before every other table of the report
    first = report.index("<table")
    assert report[first:].startswith('<table class="leaderboard-') and "train s" in report[first:report.index("</table>", first)]


def test_pages_carry_their_profile_banner(pages):
    for page in pages[:3]:
        assert 'class="banner"' in page.read_text() and "SMOKE" in page.read_text()
    quick = pages[3].read_text()       # a quick-profile report: the reduced-budget banner
    assert 'class="banner"' in quick and "QUICK PROFILE: a reduced budget" in quick


def test_screenshot_script(pages, tmp_path):
    out = tmp_path / "shots"
    subprocess.run(["bash", str(ROOT / "scripts" / "screenshot_reports.sh"), str(out), str(pages[0])], check=True,
                   capture_output=True, timeout=180)
    shot = out / "mnist_rotated-index.png"
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
