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
cargo build --locked --features mock-llm --bin agent-runner --bin agent-runner-mock-llm
bash .ci/chromium "$WORK/chromium-install.log"
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
LLM_PORT=$(free_port)
PORT=$(free_port)
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$LLM_PORT" --chunk-delay-ms 0 \
  --rounds 99 --parallel-tools 3 >"$WORK/mock-llm.log" 2>&1 &
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
# The run to its end, then its id from its first event.
"$BIN/agent-runner" run "What time is it, many times over?" --addr "127.0.0.1:$PORT" \
  --model openai/mock --tool time/current_time --max-iteration 99 --json >"$WORK/run.jsonl"
RUN=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["message_id"])' "$WORK/run.jsonl")
# A model that streams 20,000 deltas back to back, and a service on it.
FAST_LLM_PORT=$(free_port)
FAST_PORT=$(free_port)
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$FAST_LLM_PORT" --answer-chunks 20000 \
  >"$WORK/mock-llm-fast.log" 2>&1 &
pids+=($!)
rm -rf "$WORK/data-fast"
OPENAI_BASE_URL="http://127.0.0.1:$FAST_LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --listen "127.0.0.1:$FAST_PORT" --data-dir "$WORK/data-fast" \
  >"$WORK/server-fast.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$FAST_PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
(cd console && CONSOLE_URL="http://127.0.0.1:$PORT" CONSOLE_RUN="$RUN" \
  CONSOLE_FAST_URL="http://127.0.0.1:$FAST_PORT" CONSOLE_BIN="$BIN/agent-runner" \
  CONSOLE_FAST_ADDR="127.0.0.1:$FAST_PORT" node bench.mjs)
