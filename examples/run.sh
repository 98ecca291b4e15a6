#!/usr/bin/env bash
# Runs the Python and Node examples against a real agent-runner process and the scripted
# model, installing grpcio and @grpc/grpc-js from their registries. CI runs it, so the
# examples cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
WORK=$TARGET/examples
BIN=$TARGET/debug
mkdir -p "$WORK"

cargo build --locked --features mock-llm --bin agent-runner --bin agent-runner-mock-llm

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
LLM_PORT=$(free_port)
PORT=$(free_port)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

# The scripted model calls the offered tool once, then answers in 20 pieces 50 ms apart,
# slowly enough for the examples to cancel a run in the middle.
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$LLM_PORT" --chunk-delay-ms 50 \
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
"$BIN/agent-runner" health --addr "127.0.0.1:$PORT"

export AGENT_RUNNER_ADDR="127.0.0.1:$PORT"
export AGENT_RUNNER_MODEL=openai/mock
unset AGENT_RUNNER_API_KEY

echo "--- python"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check -r examples/python/requirements.txt
(cd examples/python && export PATH="$WORK/venv/bin:$PATH" && ./generate.sh && python run_agent.py) ||
  { tail -20 "$WORK/server.log"; exit 1; }

echo "--- node"
(cd examples/node && npm ci --no-audit --no-fund --loglevel=error && node run_agent.js) ||
  { tail -20 "$WORK/server.log"; exit 1; }
