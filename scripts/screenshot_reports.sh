#!/usr/bin/env bash
# Screenshots of generated reports as a 1,440 px wide browser shows them (headless Chromium),
# for people to look at: bash scripts/screenshot_reports.sh OUT_DIR [PAGE.html ...]
# Without pages: every reports/*/index.html and reports/leaderboard/leaderboard.html.
# Each page gives <parent folder>-<name>.png (the first 900 px) and <...>-full.png (the whole page).
set -euo pipefail
out=${1:?usage: screenshot_reports.sh OUT_DIR [PAGE.html ...]}
shift
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "no Chromium found: apt-get install chromium" >&2
  exit 2
fi
pages=("$@")
if [ ${#pages[@]} -eq 0 ]; then
  shopt -s nullglob
  pages=(reports/*/index.html reports/leaderboard/leaderboard.html)
fi
mkdir -p "$out"
for page in "${pages[@]}"; do
  [ -f "$page" ] || { echo "not a file: $page" >&2; exit 2; }
  name="$(basename "$(dirname "$page")")-$(basename "$page" .html)"
  url="file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")"
  common=(--headless=new --no-sandbox --disable-gpu --no-first-run --hide-scrollbars
          --proxy-server=127.0.0.1:9 "--host-resolver-rules=MAP * ~NOTFOUND")
  "$browser" "${common[@]}" --window-size=1440,900 --screenshot="$out/$name.png" "$url" 2>/dev/null
  # the whole page: as tall as the document (measured by a first headless pass is not possible
  # without scripting, so a generous fixed height)
  "$browser" "${common[@]}" --window-size=1440,6000 --screenshot="$out/$name-full.png" "$url" 2>/dev/null
  echo "$out/$name.png"
done
