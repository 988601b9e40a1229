#!/usr/bin/env bash
# Screenshots of the documentation site's pages, as a reader sees them, into docs/screenshots/.
#
#   bash scripts/screenshots.sh            # needs mkdocs (the docs extra) and a headless Chromium (Debian: chromium)
#
# The site is built from the working tree into a temporary folder; each page is opened by headless Chromium at a
# fixed window size, scrolled to the section its name gives (a URL fragment).
set -euo pipefail
cd "$(dirname "$0")/.."
BROWSER=${BROWSER:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$BROWSER" ]; then
  echo "no headless Chromium found: install it (Debian: apt-get install chromium) or set BROWSER" >&2
  exit 2
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
mkdocs build --quiet --site-dir "$site"
shoot() {  # shoot NAME PAGE [HEIGHT]: PAGE is a path in the site, with an optional #section
  local name=$1 page=$2 height=${3:-1400} file
  file=${page%%#*}
  if [ "$page" != "$file" ]; then
    # headless Chromium draws a blank page for a URL with a fragment: shoot a copy of the page whose article holds
    # only that section (beside the original, so the site's styles still load)
    file=$(python3 - "$site/$file" "${page#*#}" <<'PY'
import sys
from pathlib import Path
path, section = Path(sys.argv[1]), sys.argv[2]
html = path.read_text()
heading = html.rfind("<h", 0, html.index(f'id="{section}"'))
level = html[heading + 2]
end = html.find(f"<h{level}", heading + 3)
article = html.index(">", html.index("<article")) + 1
close = html.index("</article>")
end = close if end == -1 or end > close else end
trimmed = path.with_name(f"{path.stem}.{section}.html")
trimmed.write_text(html[:article] + html[heading:end] + html[close:])
print(trimmed)
PY
)
    file=${file#$site/}
  fi
  "$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="1280,$height" \
    --screenshot="docs/screenshots/$name.png" "file://$site/$file" >/dev/null 2>&1
  echo "docs/screenshots/$name.png: $page"
}
shoot home index.html
shoot which-method which-method/index.html 1800
shoot which-method-addition "which-method/index.html#2-digit-addition" 1500
shoot which-method-memory "which-method/index.html#memory" 1350
shoot hardware-status "vllm-and-ray/index.html#status-by-hardware" 1900
shoot gpu-check "es-at-scale/index.html#on-a-gpu" 900
shoot guide-pick-a-method guides/pick-a-method/index.html 1600
shoot scaling benchmarks/scaling/index.html 1600
