#!/usr/bin/env bash
# The console: checks that the committed console/dist is exactly what its sources build
# (the binary embeds it), then drives it in headless Chromium against a real server on the
# scripted model. CI runs it; screenshots land in target/console/.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
WORK=$TARGET/console
BIN=$TARGET/debug
mkdir -p "$WORK"

(cd console && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
if ! git diff --quiet -- console/dist || [ -n "$(git status --porcelain --untracked-files=all -- console/dist)" ]; then
  git status --short -- console/dist >&2
  echo "console/dist is not what console/ builds: run (cd console && npm ci && npm run build) and commit dist/" >&2
  exit 1
fi
echo "console: dist/ is what its sources build"

source .ci/scripted-service.sh
start_scripted 20
bash .ci/chromium "$WORK/chromium-install.log"
(cd console && CONSOLE_URL="http://127.0.0.1:$PORT" CONSOLE_SHOTS="$WORK" node test.mjs) ||
  { tail -20 "$WORK/server.log"; exit 1; }
