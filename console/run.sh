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
# 50 ms a piece: slowly enough to see a live run's answer grow.
start_scripted 50
# A scripted model that calls the tool `helper` (a stored agent the test makes), for a
# parent run with a sub-agent's run.
DELEGATING_LLM_PORT=$(free_port)
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$DELEGATING_LLM_PORT" --chunk-delay-ms 50 \
  --tool helper --arguments '{"input": "What time is it?"}' >"$WORK/mock-llm-delegating.log" 2>&1 &
pids+=($!)
# And one that calls `helper` three times at once, slowly: a parent with three live children.
FANOUT_LLM_PORT=$(free_port)
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$FANOUT_LLM_PORT" --chunk-delay-ms 150 --parallel-tools 3 \
  --tool helper --arguments '{"input": "What time is it?"}' >"$WORK/mock-llm-fanout.log" 2>&1 &
pids+=($!)
# And one that calls the tool three times in every round it may: the longest run.
LONG_LLM_PORT=$(free_port)
"$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$LONG_LLM_PORT" --chunk-delay-ms 0 --rounds 99 --parallel-tools 3 \
  >"$WORK/mock-llm-long.log" 2>&1 &
pids+=($!)
# A second service with API keys on, and a key of tenant `acme` on it.
KEYED_PORT=$(free_port)
export AGENT_RUNNER_ADMIN_TOKEN="console-test-admin-$$"
rm -rf "$WORK/data-keyed"
OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
  "$BIN/agent-runner" serve --listen "127.0.0.1:$KEYED_PORT" --data-dir "$WORK/data-keyed" \
  --require-auth >"$WORK/server-keyed.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$BIN/agent-runner" health --addr "127.0.0.1:$KEYED_PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
KEY=$("$BIN/agent-runner" keys create --addr "127.0.0.1:$KEYED_PORT" --tenant acme | tail -1)
bash .ci/chromium "$WORK/chromium-install.log"
# Two replicas on PostgreSQL, for a run taken over by the replica its page follows: a
# database of this run's own, dropped at the end. Without a reachable server the step is
# skipped and says so, except under CI, where it must run.
CONSOLE_DATABASE_URL=
PG="psql -h 127.0.0.1 -U postgres -d test -qtA"
if $PG -c 'SELECT 1' >/dev/null 2>&1; then
  CONSOLE_DB="agent_runner_console_$$"
  $PG -c "CREATE DATABASE $CONSOLE_DB" >/dev/null
  trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; $PG -c "DROP DATABASE IF EXISTS $CONSOLE_DB WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
  CONSOLE_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$CONSOLE_DB"
elif [ "${CI:-}" = true ]; then
  echo "console: PostgreSQL is not reachable at 127.0.0.1:5432; CI needs it for the replicas step" >&2
  exit 1
else
  echo "console: skipped the two-replica step: PostgreSQL is not reachable at 127.0.0.1:5432"
fi
(cd console && CONSOLE_URL="http://127.0.0.1:$PORT" CONSOLE_KEYED_URL="http://127.0.0.1:$KEYED_PORT" \
  CONSOLE_KEY="$KEY" CONSOLE_SHOTS="${CONSOLE_SHOTS:-$WORK}" CONSOLE_WORK="$WORK" \
  CONSOLE_BIN="$BIN/agent-runner" CONSOLE_LLM_PORT="$LLM_PORT" \
  CONSOLE_DELEGATING_LLM_PORT="$DELEGATING_LLM_PORT" CONSOLE_ADMIN_TOKEN="$AGENT_RUNNER_ADMIN_TOKEN" \
  CONSOLE_DATABASE_URL="$CONSOLE_DATABASE_URL" CONSOLE_FANOUT_LLM_PORT="$FANOUT_LLM_PORT" CONSOLE_LONG_LLM_PORT="$LONG_LLM_PORT" node test.mjs) ||
  { tail -20 "$WORK/server.log"; exit 1; }
