#!/usr/bin/env bash
# The console's render bench: a finished run of the most rounds a run makes (99 tool rounds
# of 3 calls each, then the answer: 100 rounds, 297 calls) drawn from its page in headless
# Chromium, 5 times; prints each time and the median. Not part of CI's checks (a timing
# belongs in a bench, never in a test); the console test checks that such a run renders.
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
(cd console && CONSOLE_URL="http://127.0.0.1:$PORT" CONSOLE_RUN="$RUN" node bench.mjs)
