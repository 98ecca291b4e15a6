#!/usr/bin/env bash
# Runs the Python, Node and browser examples against a real agent-runner process and the
# scripted model, installing grpcio, @grpc/grpc-js and the web example's packages from their
# registries (and Debian's chromium when it is absent). CI runs it, so the examples cannot
# rot.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
WORK=$TARGET/examples
BIN=$TARGET/debug
mkdir -p "$WORK"

source .ci/scripted-service.sh
# Slowly enough (50 ms a piece) for the examples to cancel a run in the middle.
start_scripted 50

export AGENT_RUNNER_ADDR="127.0.0.1:$PORT"
export AGENT_RUNNER_MODEL=openai/mock
unset AGENT_RUNNER_API_KEY

echo "--- python"
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check -r examples/python/requirements.txt
(cd examples/python && export PATH="$WORK/venv/bin:$PATH" && ./generate.sh && python run_agent.py &&
  echo "--- python, gRPC-Web by hand" && python grpc_web_raw.py) ||
  { tail -20 "$WORK/server.log"; exit 1; }

echo "--- node"
(cd examples/node && npm ci --no-audit --no-fund --loglevel=error && node run_agent.js) ||
  { tail -20 "$WORK/server.log"; exit 1; }

echo "--- web (gRPC-Web from headless Chromium, the page on another origin)"
WEB_PORT=$(free_port)
WEB_API_PORT=$(free_port)
rm -rf "$WORK/data-web"
OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --listen "127.0.0.1:$WEB_API_PORT" --data-dir "$WORK/data-web" \
  --cors-origin "http://127.0.0.1:$WEB_PORT" >"$WORK/server-web.log" 2>&1 &
pids+=($!)
bash .ci/chromium "$WORK/chromium-install.log"
(cd examples/web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build) ||
  { echo "the web example did not build" >&2; exit 1; }
python3 -m http.server "$WEB_PORT" --bind 127.0.0.1 --directory examples/web \
  >"$WORK/web-page.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$WEB_API_PORT" >/dev/null 2>&1 &&
    (exec 3<>"/dev/tcp/127.0.0.1/$WEB_PORT") 2>/dev/null && break
  sleep 0.1
done
(cd examples/web &&
  WEB_PAGE_URL="http://127.0.0.1:$WEB_PORT/?server=http://127.0.0.1:$WEB_API_PORT&model=openai/mock" \
    WEB_SCREENSHOT="$WORK/web.png" node test.mjs) ||
  { tail -20 "$WORK/server-web.log"; exit 1; }

echo "--- a2a (the official A2A Python SDK)"
A2A_PORT=$(free_port)
CARDS_PORT=$(free_port)
printf '[a2a]\nenabled = true\n' >"$WORK/a2a.toml"
rm -rf "$WORK/data-a2a"
OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --config "$WORK/a2a.toml" --listen "127.0.0.1:$A2A_PORT" \
  --metrics-listen "127.0.0.1:$CARDS_PORT" --data-dir "$WORK/data-a2a" \
  >"$WORK/server-a2a.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$A2A_PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
for agent in helper gatekeeper; do
  "$BIN/agent-runner" agents create "examples/a2a/$agent.json" --addr "127.0.0.1:$A2A_PORT"
done
python3 -m venv "$WORK/venv-a2a"
"$WORK/venv-a2a/bin/pip" install --quiet --disable-pip-version-check -r examples/a2a/requirements.txt
(AGENT_RUNNER_CARDS="127.0.0.1:$CARDS_PORT" "$WORK/venv-a2a/bin/python" examples/a2a/a2a_client.py) ||
  { tail -20 "$WORK/server-a2a.log"; exit 1; }

# The generated Python stubs again, against a server keeping its records in PostgreSQL,
# in a database made for this run and dropped after it. Skipped (and said so) without a
# PostgreSQL on 127.0.0.1; under CI=true that fails instead.
if ! pg_isready -h 127.0.0.1 -q 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "PostgreSQL on 127.0.0.1 is needed in CI" >&2
    exit 1
  fi
  echo "--- python on PostgreSQL: skipped, no PostgreSQL on 127.0.0.1"
  exit 0
fi
echo "--- python on PostgreSQL"
DB="agent_runner_examples_$$"
psql -h 127.0.0.1 -U postgres -d test -qc "CREATE DATABASE $DB"
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true;
  psql -h 127.0.0.1 -U postgres -d test -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"' EXIT
PG_PORT=$(free_port)
AGENT_RUNNER_SECRET_KEY=$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())') \
  OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --listen "127.0.0.1:$PG_PORT" \
  --database-url "postgres://postgres@127.0.0.1:5432/$DB" >"$WORK/server-pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$PG_PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
"$BIN/agent-runner" health --addr "127.0.0.1:$PG_PORT"
(cd examples/python && export PATH="$WORK/venv/bin:$PATH" AGENT_RUNNER_ADDR="127.0.0.1:$PG_PORT" &&
  python run_agent.py) || { tail -20 "$WORK/server-pg.log"; exit 1; }
