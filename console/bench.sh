#!/usr/bin/env bash
# The console's bench, in headless Chromium: a finished run of the most rounds a run makes
# (99 tool rounds of 3 calls each, then the answer: 100 rounds, 297 calls) drawn from its
# page, 5 times, each time and the median printed; then a live run whose model streams
# 20,000 deltas as fast as it can, its page open: the deltas a second, the longest
# main-thread task (Long Tasks API) and how soon a click on Cancel is answered. Not part
# of CI's checks (a timing belongs in a bench, never in a test); the console test checks
# that such a run renders and that Cancel works.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
WORK=$TARGET/console-bench
BIN=$TARGET/debug
mkdir -p "$WORK"
(cd console && npm ci --no-audit --no-fund --loglevel=error)
source .ci/scripted-service.sh
bash .ci/chromium "$WORK/chromium-install.log"
start_on "" --rounds 99 --parallel-tools 3
LONG_PORT=$PORT
# The run to its end, then its id from its first event.
"$BIN/agent-runner" run "What time is it, many times over?" --addr "127.0.0.1:$LONG_PORT" \
  --model openai/mock --tool time/current_time --max-iteration 99 --json >"$WORK/run.jsonl"
RUN=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["message_id"])' "$WORK/run.jsonl")
# A model that streams 20,000 deltas back to back, and a service on it.
start_on "-fast" --answer-chunks 20000
(cd console && CONSOLE_URL="http://127.0.0.1:$LONG_PORT" CONSOLE_RUN="$RUN" \
  CONSOLE_FAST_URL="http://127.0.0.1:$PORT" CONSOLE_BIN="$BIN/agent-runner" \
  CONSOLE_FAST_ADDR="127.0.0.1:$PORT" node bench.mjs)
