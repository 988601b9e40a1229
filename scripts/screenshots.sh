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
shoot() {  # shoot NAME PAGE [HEIGHT]: PAGE is a path in the site, with an optional #fragment
  local name=$1 page=$2 height=${3:-1400}
  "$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="1280,$height" \
    --screenshot="docs/screenshots/$name.png" "file://$site/$page" >/dev/null 2>&1
  echo "docs/screenshots/$name.png: $page"
}
shoot home index.html
shoot which-method which-method/index.html 1800
shoot hardware-status "vllm-and-ray/index.html#status-by-hardware" 1100
shoot gpu-check "es-at-scale/index.html#on-a-gpu" 900
