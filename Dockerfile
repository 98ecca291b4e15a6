# Build: protos are compiled by protox inside build.rs, so no protoc is needed.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin agent-runner

# Run: a slim image with CA roots (for HTTPS to LLM providers) and an unprivileged user.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/agent-runner agent \
    && mkdir -p /var/lib/agent-runner/data \
    && chown -R agent /var/lib/agent-runner
COPY --from=build /src/target/release/agent-runner /usr/local/bin/agent-runner
USER 10001
# Reachable from outside the container, so API keys are required; pass
# AGENT_RUNNER_ADMIN_TOKEN to make them (`agent-runner keys create --tenant ...`).
ENV AGENT_RUNNER_LISTEN=0.0.0.0:50051 \
    AGENT_RUNNER_REQUIRE_AUTH=true \
    AGENT_RUNNER_METRICS_LISTEN=0.0.0.0:9464 \
    AGENT_RUNNER_DATA_DIR=/var/lib/agent-runner/data \
    AGENT_RUNNER_LOG_FORMAT=json
VOLUME ["/var/lib/agent-runner/data"]
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["agent-runner", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["agent-runner"]
CMD ["serve"]
