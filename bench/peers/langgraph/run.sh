#!/usr/bin/env bash
# The benchmark's workload through LangGraph (create_react_agent with ChatOpenAI) against the
# same scripted LLM. Makes its own venv on first use. Arguments go to bench.py, e.g.
#   bench/peers/langgraph/run.sh --concurrency 50 --runs 2000
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
venv="${VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet -r "$here/requirements.txt"
fi
mock="$root/target/release/agent-runner-mock-llm"
[ -x "$mock" ] || (cd "$root" && cargo build --release --bins)
port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# MOCK_FLAGS passes extra flags to the mock (e.g. "--ttft-ms 1000 --chunk-delay-ms 50").
# shellcheck disable=SC2086
"$mock" --listen "127.0.0.1:$port" ${MOCK_FLAGS:-} > /dev/null &
mock_pid=$!
trap 'kill $mock_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
"$venv/bin/python" "$here/bench.py" --base-url "http://127.0.0.1:$port/v1" "$@"
