# Sourced by the scripts that drive clients against a real service: the debug binaries,
# a free port, and the scripted model with a service in front of it.
# Needs TARGET, WORK and BIN set; sets LLM_PORT and PORT, and kills what it started on exit.

cargo build --locked --features mock-llm --bin agent-runner --bin agent-runner-mock-llm

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT

# start_scripted CHUNK_DELAY_MS: the scripted model (it reasons a little, as reasoning
# models do beside their text, calls the offered tool once, then answers in 20 pieces
# CHUNK_DELAY_MS apart) and a service on it, data under $WORK/data.
start_scripted() {
  start_on "" --chunk-delay-ms "$1" --reasoning "First the clock, then the answer. "
}

# start_on SUFFIX MOCK_ARGS...: the scripted model with MOCK_ARGS and a service on it, data
# under $WORK/data$SUFFIX, logs named with SUFFIX; sets LLM_PORT and PORT.
start_on() {
  local suffix=$1
  shift
  LLM_PORT=$(free_port)
  PORT=$(free_port)
  "$BIN/agent-runner-mock-llm" --listen "127.0.0.1:$LLM_PORT" "$@" \
    >"$WORK/mock-llm$suffix.log" 2>&1 &
  pids+=($!)
  rm -rf "$WORK/data$suffix"
  OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/v1" OPENAI_API_KEY= \
    "$BIN/agent-runner" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data$suffix" \
    >"$WORK/server$suffix.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    "$BIN/agent-runner" health --addr "127.0.0.1:$PORT" >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$BIN/agent-runner" health --addr "127.0.0.1:$PORT"
}
