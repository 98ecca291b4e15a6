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

cargo build --locked --features mock-llm --bin agent-runner --bin agent-runner-mock-llm
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
LLM_PORT=$(free_port)
PORT=$(free_port)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$LLM_PORT" --chunk-delay-ms 20 \
  >"$WORK/mock-llm.log" 2>&1 &
pids+=($!)
rm -rf "$WORK/data"
OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" \
  >"$WORK/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
bash .ci/chromium "$WORK/chromium-install.log"
(cd console && CONSOLE_URL="http://127.0.0.1:$PORT" CONSOLE_SHOTS="$WORK" node test.mjs) ||
  { tail -20 "$WORK/server.log"; exit 1; }
