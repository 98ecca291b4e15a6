//! The rooms' settings, from the configuration's plain sections: the configuration knows
//! what an operator writes, each room what it runs with, and this file the one mapping.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::nats;
use crate::config::{
    ClusterConfig, Config, ConfigError, OutboundConfig, RunnerConfig, ServerConfig, StoreConfig,
};
use crate::net::ListenerLimits;
use crate::runner::{DeltaPacing, RunnerSettings};
use crate::store::{DatabaseSettings, StoreSettings};
use crate::tools::schema::SchemaLimits;
use crate::tools::{OutboundPolicy, ProviderSettings};

/// Where records are kept: the shared database when `[store] database_url` is set, else
/// the embedded one under `[server] data_dir`.
pub fn store_settings(config: &Config) -> StoreSettings {
    match database_settings(&config.store, &config.cluster) {
        Some(database) => StoreSettings::Shared(database),
        None => StoreSettings::Embedded {
            dir: config.server.data_dir.clone(),
            cache_bytes: config.server.store_cache_mb.saturating_mul(1024 * 1024),
        },
    }
}

/// How to reach the shared database, when one is configured, as replica `cluster`.
fn database_settings(store: &StoreConfig, cluster: &ClusterConfig) -> Option<DatabaseSettings> {
    store.database_url.as_ref().map(|url| DatabaseSettings {
        url: url.expose().to_owned(),
        replica_id: cluster.id().to_owned(),
        lease: cluster.lease(),
        notify: cluster.nats_url.is_none(),
        pool_size: store.pool_size,
        pool_wait: Duration::from_millis(store.pool_wait_ms),
        statement_timeout: Duration::from_millis(store.statement_timeout_ms),
    })
}

/// How to reach NATS, when configured.
pub fn nats_settings(cluster: &ClusterConfig) -> Option<nats::Settings> {
    cluster.nats_url.as_ref().map(|url| nats::Settings {
        url: url.expose().to_owned(),
        credentials_file: cluster.nats_credentials_file.clone(),
        ca_file: cluster.nats_ca_file.clone(),
        prefix: cluster.subject_prefix.clone(),
        replica: cluster.id().to_owned(),
    })
}

/// The bounds of the gRPC listener.
pub fn grpc_limits(server: &ServerConfig) -> ListenerLimits {
    ListenerLimits {
        max_connections: server.max_connections,
        handshake_timeout: Duration::from_secs(server.handshake_timeout_secs),
    }
}

/// Which browsers the API answers: the listed origins by CORS; with API keys off, only
/// requests naming a loopback host or one of `allowed_hosts` (DNS rebinding).
pub fn browsers(config: &Config) -> crate::api::front_door::BrowserSettings {
    crate::api::front_door::BrowserSettings {
        cors_origins: config.server.cors_origins.clone(),
        allowed_hosts: (!config.auth.required).then(|| config.server.allowed_hosts.clone()),
        console: config.console.enabled,
    }
}

/// The gRPC address agent cards name: `[a2a] public_url`, else the address served on.
pub fn cards_public_url(config: &Config, api_addr: Option<std::net::SocketAddr>) -> String {
    config
        .a2a
        .public_url
        .clone()
        .or_else(|| api_addr.map(|addr| addr.to_string()))
        .unwrap_or_default()
}

/// The bounds of the metrics listener.
pub fn metrics_limits(server: &ServerConfig) -> ListenerLimits {
    ListenerLimits {
        max_connections: server.metrics_max_connections,
        handshake_timeout: Duration::from_secs(server.handshake_timeout_secs),
    }
}

/// Where tools may send requests besides public addresses; an entry that is neither a
/// network, an address nor a host name is refused, naming `outbound.allow`.
pub fn outbound_policy(outbound: &OutboundConfig) -> Result<OutboundPolicy, ConfigError> {
    OutboundPolicy::allowing(&outbound.allow).map_err(|reason| ConfigError::Invalid {
        field: "outbound.allow".to_owned(),
        reason,
    })
}

/// The limits of registered providers' tools, sending requests as `outbound` allows.
pub fn provider_settings(runner: &RunnerConfig, outbound: Arc<OutboundPolicy>) -> ProviderSettings {
    ProviderSettings {
        outbound,
        max_output_bytes: runner.tool_output_limit_bytes,
        max_file_bytes: runner.tool_file_limit_bytes,
        max_spec_bytes: runner.openapi_max_bytes,
        max_operations: runner.openapi_max_operations,
        max_schema_bytes: runner.tool_schema_limit_bytes,
        mcp_timeout: Duration::from_secs(runner.mcp_timeout_secs),
    }
}

/// The bounds of tool and answer schemas.
pub fn schema_limits(runner: &RunnerConfig) -> SchemaLimits {
    SchemaLimits {
        max_patterns: runner.max_schema_patterns,
        cache_bytes: runner.schema_cache_mb.saturating_mul(1024 * 1024),
    }
}

/// The runner's view of `[runner]`, committing within `[store] write_timeout_secs`.
pub fn runner_settings(runner: &RunnerConfig, store: &StoreConfig) -> RunnerSettings {
    RunnerSettings {
        tool_timeout: Duration::from_secs(runner.tool_timeout_secs),
        tool_concurrency: runner.tool_concurrency,
        event_buffer: runner.event_buffer,
        client_tool_timeout: Duration::from_secs(runner.client_tool_timeout_secs),
        approval_timeout: Duration::from_secs(runner.approval_timeout_secs),
        trace_content: runner.trace_content,
        max_answer_bytes: runner.max_answer_bytes,
        max_query_bytes: runner.max_query_bytes,
        max_instruction_bytes: runner.max_instruction_bytes,
        max_tool_calls_per_round: runner.max_tool_calls_per_round,
        max_agent_depth: runner.max_agent_depth,
        max_tree_runs: runner.max_tree_runs,
        max_tree_runs_total: runner.max_tree_runs_total,
        tool_output_limit: runner.tool_output_limit_bytes,
        write_timeout: Duration::from_secs(store.write_timeout_secs),
        argument_deltas: DeltaPacing {
            interval: Duration::from_millis(runner.tool_delta_interval_ms),
            bytes: runner.tool_delta_bytes,
            max_bytes: runner.max_tool_delta_bytes,
        },
        allow_keep_reasoning: runner.allow_keep_reasoning,
        hand_over: runner.resume_after_restart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration's defaults are the rooms' own: a server started without a file
    /// runs with what each room's `Default` says (where the configuration names it).
    #[test]
    fn an_empty_configuration_gives_the_rooms_their_defaults() {
        let config = Config::default();
        let runner = runner_settings(&config.runner, &config.store);
        assert_eq!(
            RunnerSettings {
                trace_content: false,
                hand_over: false,
                ..runner
            },
            RunnerSettings::default()
        );
        assert_eq!(
            grpc_limits(&config.server).handshake_timeout,
            crate::net::DEFAULT_HANDSHAKE_TIMEOUT
        );
        let limits = schema_limits(&config.runner);
        assert_eq!(
            limits.max_patterns,
            crate::tools::schema::DEFAULT_MAX_PATTERNS
        );
        assert_eq!(
            limits.cache_bytes,
            crate::tools::schema::DEFAULT_CACHE_BYTES
        );
        let tools = provider_settings(&config.runner, Arc::default());
        let defaults = ProviderSettings::default();
        assert_eq!(
            (
                tools.max_output_bytes,
                tools.max_file_bytes,
                tools.max_spec_bytes,
                tools.max_operations,
                tools.max_schema_bytes,
                tools.mcp_timeout,
            ),
            (
                defaults.max_output_bytes,
                defaults.max_file_bytes,
                defaults.max_spec_bytes,
                defaults.max_operations,
                defaults.max_schema_bytes,
                defaults.mcp_timeout,
            )
        );
    }

    /// A malformed `[outbound] allow` entry stops the start, naming the key and the entry.
    #[test]
    fn a_malformed_outbound_entry_is_named() {
        let outbound = OutboundConfig {
            allow: vec!["10.0.0.0/8".into(), "not a host/".into()],
        };
        let Err(ConfigError::Invalid { field, reason }) = outbound_policy(&outbound) else {
            panic!("refused");
        };
        assert_eq!(field, "outbound.allow");
        assert!(reason.contains("not a host/"), "{reason}");
    }
}
