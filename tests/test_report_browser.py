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
      images: Array.prototype.map.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; })
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

    root = tmp_path_factory.mktemp("browser")
    results = root / "results"
    write_synthetic(results)
    assert main(["report", "--results", str(results), "--out", str(root / "reports")]) == 0
    assert main(["leaderboard", "--results", str(results), "--out", str(root / "lb"), "--include-smoke"]) == 0
    return [root / "reports" / "mnist_rotated" / "index.html", root / "reports" / "cifar10c" / "index.html",
            root / "lb" / "leaderboard.html"]


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


def test_smoke_pages_carry_the_banner(pages):
    for page in pages:
        assert 'class="banner"' in page.read_text() and "SMOKE" in page.read_text()


def test_screenshot_script(pages, tmp_path):
    out = tmp_path / "shots"
    subprocess.run(["bash", str(ROOT / "scripts" / "screenshot_reports.sh"), str(out), str(pages[0])], check=True,
                   capture_output=True, timeout=180)
    shot = out / "mnist_rotated-index.png"
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
