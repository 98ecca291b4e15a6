//! Server configuration: command-line flags (each also an `AGENT_RUNNER_*` environment
//! variable) and an optional TOML file for runner tunables and LLM providers.
//!
//! With no arguments the service runs on its embedded default: the embedded store under `./data`,
//! listening on `127.0.0.1:50051`, with one provider `openai` configured from
//! `OPENAI_BASE_URL` and `OPENAI_API_KEY` (and `anthropic` when `ANTHROPIC_API_KEY` is set).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::domain::Secret;
use crate::domain::TenantLimits;
use crate::domain::{ProviderApi, ProviderConfig};

mod a2a;
mod args;
mod cluster;
mod console;
mod outbound;
mod server;
mod store;
pub use a2a::A2aConfig;
pub use args::ServeArgs;
pub use cluster::ClusterConfig;
pub use console::ConsoleConfig;
pub use outbound::OutboundConfig;
pub use server::ServerConfig;
pub use store::StoreConfig;

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The key file made in the data directory when no key is configured.
pub const KEY_FILE: &str = "secret.key";

fn default_tool_timeout() -> u64 {
    30
}
fn default_tool_concurrency() -> usize {
    8
}
fn default_event_buffer() -> usize {
    64
}
fn default_client_tool_timeout() -> u64 {
    600
}
fn default_approval_timeout() -> u64 {
    600
}
fn default_tool_output_limit() -> usize {
    16 * 1024
}
fn default_max_answer_bytes() -> usize {
    2 * 1024 * 1024
}
fn default_max_query_bytes() -> usize {
    1024 * 1024
}
fn default_max_instruction_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_max_agent_depth() -> u32 {
    3
}
fn default_tool_delta_interval_ms() -> u64 {
    50
}
fn default_tool_delta_bytes() -> usize {
    1024
}
fn default_max_tool_delta_bytes() -> usize {
    64 * 1024
}
fn default_max_tree_runs() -> u32 {
    32
}
fn default_max_tree_runs_total() -> u32 {
    256
}

/// The provider used when no configuration file is given, configured as the OpenAI SDKs
/// are: `OPENAI_BASE_URL` (default `https://api.openai.com/v1`) and `OPENAI_API_KEY`.
fn openai_from_env() -> ProviderConfig {
    ProviderConfig {
        kind: ProviderApi::Openai,
        base_url: std::env::var("OPENAI_BASE_URL")
            .unwrap_or_else(|_| "https://api.openai.com/v1".to_owned()),
        api_key_env: Some("OPENAI_API_KEY".to_owned()),
        ..ProviderConfig::default()
    }
}

/// The provider configured as Anthropic's SDKs are, when `ANTHROPIC_API_KEY` is set:
/// `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`) and that key.
fn anthropic_from_env() -> Option<ProviderConfig> {
    std::env::var("ANTHROPIC_API_KEY")
        .ok()
        .filter(|key| !key.trim().is_empty())?;
    Some(ProviderConfig {
        kind: ProviderApi::Anthropic,
        base_url: std::env::var("ANTHROPIC_BASE_URL").unwrap_or_default(),
        api_key_env: Some("ANTHROPIC_API_KEY".to_owned()),
        ..ProviderConfig::default()
    })
}

fn default_max_tool_calls_per_round() -> usize {
    128
}
fn default_max_schema_patterns() -> usize {
    2_000
}
fn default_schema_cache_mb() -> usize {
    64
}
fn default_tool_file_limit() -> usize {
    10 * 1024 * 1024
}
fn default_openapi_max_bytes() -> usize {
    2 * 1024 * 1024
}
fn default_openapi_max_operations() -> usize {
    256
}
fn default_tool_schema_limit() -> usize {
    64 * 1024
}
fn default_mcp_timeout() -> u64 {
    30
}

/// The largest answer (and query) a run may have: 3 MiB keeps every event and message,
/// with the service's framing, under the 4 MiB a default gRPC client receives.
pub const MAX_ANSWER_LIMIT: usize = 3 * 1024 * 1024;

/// `[runner]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerConfig {
    /// Seconds one tool call may take.
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout_secs: u64,
    /// Tool calls of one round that run at once.
    #[serde(default = "default_tool_concurrency")]
    pub tool_concurrency: usize,
    /// Live events kept per run for clients that fall behind; a client further behind reads
    /// the rest back from the store.
    #[serde(default = "default_event_buffer")]
    pub event_buffer: usize,
    /// Seconds a run waits for the results of client-executed tools.
    #[serde(default = "default_client_tool_timeout")]
    pub client_tool_timeout_secs: u64,
    /// Seconds a run waits for decisions on tool calls that need approval; then it ends
    /// with `approval_timeout`.
    #[serde(default = "default_approval_timeout")]
    pub approval_timeout_secs: u64,
    /// Longest observation an API or knowledge tool returns; longer ones are cut with a
    /// marker saying so.
    #[serde(default = "default_tool_output_limit")]
    pub tool_output_limit_bytes: usize,
    /// Largest file (or knowledge answer) a tool call may return; beyond it the call is a
    /// `tool invoke error` and the rest is not read.
    #[serde(default = "default_tool_file_limit")]
    pub tool_file_limit_bytes: usize,
    /// Largest OpenAPI document a provider may register.
    #[serde(default = "default_openapi_max_bytes")]
    pub openapi_max_bytes: usize,
    /// Most operations one OpenAPI document may define.
    #[serde(default = "default_openapi_max_operations")]
    pub openapi_max_operations: usize,
    /// Largest JSON Schema of one tool once its `$ref`s are inlined.
    #[serde(default = "default_tool_schema_limit")]
    pub tool_schema_limit_bytes: usize,
    /// Longest any step with an MCP server may take (connect, initialize, list, call).
    #[serde(default = "default_mcp_timeout")]
    pub mcp_timeout_secs: u64,
    /// The most text a model may write in one run (all rounds, tool-call arguments
    /// included); beyond it the run ends with `answer_too_large`, keeping what came before.
    #[serde(default = "default_max_answer_bytes")]
    pub max_answer_bytes: usize,
    /// The longest query (and the most bytes of instruction inputs) a run accepts.
    #[serde(default = "default_max_query_bytes")]
    pub max_query_bytes: usize,
    /// The longest instruction once `{{name}}` variables are filled, and the longest ReAct
    /// prompt once rendered; a run past it is refused before anything is built.
    #[serde(default = "default_max_instruction_bytes")]
    pub max_instruction_bytes: usize,
    /// Calls of one round that are run; each call past it gets the observation "not run:
    /// more than N calls in one round" and the model goes on.
    #[serde(default = "default_max_tool_calls_per_round")]
    pub max_tool_calls_per_round: usize,
    /// How deep sub-agents nest: a top run is depth 0, its child 1 …; a call past it is
    /// the tool error `max_depth` (0 forbids sub-agents; at most 10).
    #[serde(default = "default_max_agent_depth")]
    pub max_agent_depth: u32,
    /// Runs of one sub-agent tree alive at once, its top run included: a call past it is
    /// the tool error `sub_agent_limit` and starts nothing (never a wait, so no tree
    /// deadlocks on its own slots).
    #[serde(default = "default_max_tree_runs")]
    pub max_tree_runs: u32,
    /// Runs one tree starts over its life, its top run included; past it, as above.
    #[serde(default = "default_max_tree_runs_total")]
    pub max_tree_runs_total: u32,
    /// Most `pattern`s (and `patternProperties` keys) the schemas of one provider, or of one
    /// request (output schema and client tools), may hold; each compiles to a regex.
    #[serde(default = "default_max_schema_patterns")]
    pub max_schema_patterns: usize,
    /// MiB of compiled schema validators kept at once, shared by every provider and run;
    /// also the most one schema may compile to.
    #[serde(default = "default_schema_cache_mb")]
    pub schema_cache_mb: usize,
    /// A forming tool call's arguments are sent once this many milliseconds passed since
    /// the call's last `tool_call_delta` (or `tool_delta_bytes` gathered).
    #[serde(default = "default_tool_delta_interval_ms")]
    pub tool_delta_interval_ms: u64,
    /// ... or once this many bytes of them gathered, whichever comes first.
    #[serde(default = "default_tool_delta_bytes")]
    pub tool_delta_bytes: usize,
    /// The most of one call's arguments streamed as `tool_call_delta`; past it one delta
    /// says `truncated` (the call is whole in `tool_started`); 0 streams none.
    #[serde(default = "default_max_tool_delta_bytes")]
    pub max_tool_delta_bytes: usize,
    /// Whether agents may keep their model's reasoning (`reasoning: KEEP`, stored with the
    /// run); `false` refuses KEEP with `INVALID_ARGUMENT` naming `agent.reasoning`.
    #[serde(default = "default_true")]
    pub allow_keep_reasoning: bool,
    /// Record prompts and completions on exported LLM spans. Also turned on by the GenAI
    /// conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
    #[serde(default)]
    pub trace_content: bool,
    /// Resume the runs a previous process (or a replica that died) left running, from
    /// their last durable round; `false` ends them `INTERRUPTED` instead.
    #[serde(default = "default_true")]
    pub resume_after_restart: bool,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            tool_timeout_secs: default_tool_timeout(),
            tool_concurrency: default_tool_concurrency(),
            event_buffer: default_event_buffer(),
            tool_output_limit_bytes: default_tool_output_limit(),
            client_tool_timeout_secs: default_client_tool_timeout(),
            approval_timeout_secs: default_approval_timeout(),
            tool_file_limit_bytes: default_tool_file_limit(),
            openapi_max_bytes: default_openapi_max_bytes(),
            openapi_max_operations: default_openapi_max_operations(),
            tool_schema_limit_bytes: default_tool_schema_limit(),
            mcp_timeout_secs: default_mcp_timeout(),
            trace_content: false,
            resume_after_restart: true,
            max_answer_bytes: default_max_answer_bytes(),
            max_query_bytes: default_max_query_bytes(),
            max_instruction_bytes: default_max_instruction_bytes(),
            max_tool_calls_per_round: default_max_tool_calls_per_round(),
            max_agent_depth: default_max_agent_depth(),
            max_tree_runs: default_max_tree_runs(),
            max_tree_runs_total: default_max_tree_runs_total(),
            max_schema_patterns: default_max_schema_patterns(),
            schema_cache_mb: default_schema_cache_mb(),
            allow_keep_reasoning: true,
            tool_delta_interval_ms: default_tool_delta_interval_ms(),
            tool_delta_bytes: default_tool_delta_bytes(),
            max_tool_delta_bytes: default_max_tool_delta_bytes(),
        }
    }
}

fn default_true() -> bool {
    true
}

/// `[auth]`: who may call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Every call needs an API key, whose tenant it acts for.
    #[serde(default)]
    pub required: bool,
    /// The token of `AdminService` calls; `AGENT_RUNNER_ADMIN_TOKEN` overrides it. No admin
    /// call succeeds without one.
    #[serde(default)]
    pub admin_token: Option<Secret>,
    /// Serve gRPC reflection (what grpcurl lists services with).
    #[serde(default = "default_true")]
    pub reflection: bool,
    /// Allow serving without auth on a non-loopback address.
    #[serde(default)]
    pub insecure_no_auth: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            required: false,
            admin_token: None,
            reflection: true,
            insecure_no_auth: false,
        }
    }
}

/// `[tls]`: serve over TLS, and optionally require client certificates.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificate chain (PEM).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// CA whose client certificates are required (PEM); none: no client certificates.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listening, storage, shutdown and logs.
    #[serde(default)]
    pub server: ServerConfig,
    /// Loop tunables.
    #[serde(default)]
    pub runner: RunnerConfig,
    /// LLM providers by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Where tools may send requests.
    #[serde(default)]
    pub outbound: OutboundConfig,
    /// Who may call.
    #[serde(default)]
    pub auth: AuthConfig,
    /// TLS of the API.
    #[serde(default)]
    pub tls: TlsConfig,
    /// `[limits]`: every tenant's limits unless its key sets its own; 0 is unlimited.
    #[serde(default)]
    pub limits: TenantLimits,
    /// `[store]`: the shared database, when records are not kept in the embedded store.
    #[serde(default)]
    pub store: StoreConfig,
    /// `[cluster]`: this replica among the others on the shared database.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// `[a2a]`: the A2A protocol for every stored agent.
    #[serde(default)]
    pub a2a: A2aConfig,
    /// `[console]`: the browser console on the API's port.
    #[serde(default)]
    pub console: ConsoleConfig,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid configuration in {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// Unauthenticated service on an address others can reach.
    #[error("refusing to serve without authentication on {listen}, where other machines can reach it and act as any tenant: require API keys (--require-auth with AGENT_RUNNER_ADMIN_TOKEN to create them) or, on a network you trust, pass --insecure-no-auth")]
    Unprotected {
        /// The listen address.
        listen: SocketAddr,
    },
    /// A value is out of range.
    #[error("invalid configuration: {field} {reason}")]
    Invalid {
        /// The setting, e.g. `runner.tool_timeout_secs`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

impl Config {
    /// Reads the file named by `args` (if any), applies the flags and validates.
    pub fn load(args: &ServeArgs) -> Result<Self, ConfigError> {
        let mut config = match &args.config {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        if let Some(listen) = args.listen {
            config.server.listen = listen;
        }
        if let Some(dir) = &args.data_dir {
            config.server.data_dir.clone_from(dir);
        }
        if let Some(url) = &args.database_url {
            config.store.database_url = Some(url.clone());
        }
        if let Some(id) = &args.replica_id {
            config.cluster.replica_id = Some(id.clone());
        }
        if let Some(url) = &args.nats_url {
            config.cluster.nats_url = Some(url.clone());
        }
        if let Some(format) = args.log_format {
            config.server.log_format = format;
        }
        if let Some(addr) = args.metrics_listen {
            config.server.metrics_listen = Some(addr);
        }
        if !args.cors_origins.is_empty() {
            config.server.cors_origins.clone_from(&args.cors_origins);
        }
        if let Some(console) = args.console {
            config.console.enabled = console;
        }
        if let Some(threads) = args.worker_threads {
            config.server.worker_threads = Some(threads);
        }
        config.auth.required |= args.require_auth;
        config.auth.insecure_no_auth |= args.insecure_no_auth;
        if let Ok(token) = std::env::var("AGENT_RUNNER_ADMIN_TOKEN") {
            if !token.trim().is_empty() {
                config.auth.admin_token = Some(Secret::new(token.trim()));
            }
        }
        for (flag, setting) in [
            (&args.tls_cert, &mut config.tls.cert),
            (&args.tls_key, &mut config.tls.key),
            (&args.tls_client_ca, &mut config.tls.client_ca),
        ] {
            if flag.is_some() {
                setting.clone_from(flag);
            }
        }
        if let Ok(key) = std::env::var("AGENT_RUNNER_SECRET_KEY") {
            if !key.trim().is_empty() {
                config.server.secret_key = Some(Secret::new(key));
            }
        }
        if let Ok(allow) = std::env::var("AGENT_RUNNER_OUTBOUND_ALLOW") {
            config.outbound.allow.extend(
                allow
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(str::to_owned),
            );
        }
        if std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|value| value.eq_ignore_ascii_case("true"))
        {
            config.runner.trace_content = true;
        }
        config.with_default_provider().validated()
    }

    /// Parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// With no provider configured: the `openai` provider from the environment, and
    /// `anthropic` beside it when `ANTHROPIC_API_KEY` is set (as Anthropic's SDKs read it).
    pub fn with_default_provider(mut self) -> Self {
        if self.providers.is_empty() {
            self.providers
                .insert("openai".to_owned(), openai_from_env());
            if let Some(anthropic) = anthropic_from_env() {
                self.providers.insert("anthropic".to_owned(), anthropic);
            }
        }
        self
    }

    /// Fails fast on values the service cannot run with.
    pub fn validated(mut self) -> Result<Self, ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            field: field.to_owned(),
            reason: reason.to_owned(),
        };
        // Every listener that serves tenant data holds the same rule: the API, and the
        // metrics listener where it serves A2A agent cards beside the API's own.
        let mut tenant_listeners = vec![self.server.listen];
        if self.a2a.enabled {
            tenant_listeners.extend(self.server.metrics_listen);
        }
        if !self.auth.required && !self.auth.insecure_no_auth {
            if let Some(listen) = tenant_listeners
                .into_iter()
                .find(|listen| !listen.ip().is_loopback())
            {
                return Err(ConfigError::Unprotected { listen });
            }
        }
        match (&self.tls.cert, &self.tls.key) {
            (Some(_), None) => return Err(invalid("tls.key", "is needed with tls.cert")),
            (None, Some(_)) => return Err(invalid("tls.cert", "is needed with tls.key")),
            _ => {}
        }
        if let Some((field, reason)) = self.a2a.problem() {
            return Err(invalid(field, &reason));
        }
        if let Some((field, reason)) = self.server.browser_problem(self.auth.required) {
            return Err(invalid(field, &reason));
        }
        if self
            .server
            .worker_threads
            .is_some_and(|threads| !(1..=server::MAX_WORKER_THREADS).contains(&threads))
        {
            return Err(invalid(
                "server.worker_threads",
                &format!("must be between 1 and {}", server::MAX_WORKER_THREADS),
            ));
        }
        if self.limits.max_run_cost.is_sign_negative()
            || self.limits.max_run_cost > crate::domain::MAX_BUDGET_COST
        {
            return Err(invalid(
                "limits.max_run_cost",
                &format!("must be between 0 and {}", crate::domain::MAX_BUDGET_COST),
            ));
        }
        if self.tls.client_ca.is_some() && self.tls.cert.is_none() {
            return Err(invalid(
                "tls.client_ca",
                "needs tls.cert and tls.key: client certificates are asked for over TLS",
            ));
        }
        for (field, value) in [
            ("server.max_connections", self.server.max_connections),
            (
                "server.metrics_max_connections",
                self.server.metrics_max_connections,
            ),
            (
                "server.handshake_timeout_secs",
                self.server.handshake_timeout_secs as usize,
            ),
        ] {
            if value == 0 {
                return Err(invalid(field, "must be at least 1"));
            }
        }
        if self.server.max_request_bytes < 1024 {
            return Err(invalid("server.max_request_bytes", "must be at least 1024"));
        }
        self.cluster.validate()?;
        if let Some((field, reason)) = self.store.problem() {
            return Err(invalid(field, &reason));
        }
        if let Some((field, reason)) = runner_problem(&self.runner) {
            return Err(invalid(field, &reason));
        }
        if self.limits.max_concurrent_child_runs == 0 {
            self.limits.max_concurrent_child_runs =
                crate::domain::DEFAULT_MAX_CONCURRENT_CHILD_RUNS;
        }
        if self.limits.max_follow_streams == 0 {
            self.limits.max_follow_streams = crate::domain::DEFAULT_MAX_FOLLOW_STREAMS;
        }
        if self.limits.max_queued_per_conversation == 0 {
            self.limits.max_queued_per_conversation =
                crate::domain::DEFAULT_MAX_QUEUED_PER_CONVERSATION;
        }
        if self.runner.max_agent_depth > 10 {
            return Err(invalid("runner.max_agent_depth", "must be at most 10"));
        }
        if self.runner.schema_cache_mb == 0 {
            return Err(invalid("runner.schema_cache_mb", "must be at least 1"));
        }
        if self.runner.mcp_timeout_secs == 0 {
            return Err(invalid("runner.mcp_timeout_secs", "must be at least 1"));
        }
        if self.runner.event_buffer == 0 {
            return Err(invalid("runner.event_buffer", "must be at least 1"));
        }
        for (name, provider) in &self.providers {
            let url = provider.api_base();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    &format!("providers.{name}.base_url"),
                    "must be an http:// or https:// URL",
                ));
            }
        }
        Ok(self)
    }
}

/// The first setting of `[runner]` out of its bounds, with why.
fn runner_problem(runner: &RunnerConfig) -> Option<(&'static str, String)> {
    if runner.tool_timeout_secs == 0 {
        return Some(("runner.tool_timeout_secs", "must be at least 1".to_owned()));
    }
    if runner.tool_concurrency == 0 {
        return Some(("runner.tool_concurrency", "must be at least 1".to_owned()));
    }
    if !(1024..=MAX_ANSWER_LIMIT).contains(&runner.max_answer_bytes) {
        return Some((
            "runner.max_answer_bytes",
            format!("must be between 1024 and {MAX_ANSWER_LIMIT}"),
        ));
    }
    if !(1024..=MAX_ANSWER_LIMIT).contains(&runner.max_query_bytes) {
        return Some((
            "runner.max_query_bytes",
            format!("must be between 1024 and {MAX_ANSWER_LIMIT}"),
        ));
    }
    if runner.max_instruction_bytes < 1024 {
        return Some((
            "runner.max_instruction_bytes",
            "must be at least 1024".to_owned(),
        ));
    }
    if runner.max_tool_calls_per_round == 0 {
        return Some((
            "runner.max_tool_calls_per_round",
            "must be at least 1".to_owned(),
        ));
    }
    if runner.max_tree_runs == 0 {
        return Some(("runner.max_tree_runs", "must be at least 1".to_owned()));
    }
    if runner.tool_delta_interval_ms > 10_000 {
        return Some((
            "runner.tool_delta_interval_ms",
            "must be at most 10000".to_owned(),
        ));
    }
    if runner.tool_delta_bytes == 0 {
        return Some(("runner.tool_delta_bytes", "must be at least 1".to_owned()));
    }
    if runner.max_tool_delta_bytes > MAX_ANSWER_LIMIT {
        return Some((
            "runner.max_tool_delta_bytes",
            format!("must be at most {MAX_ANSWER_LIMIT}"),
        ));
    }
    if runner.max_tree_runs_total < runner.max_tree_runs {
        return Some((
            "runner.max_tree_runs_total",
            "must be at least runner.max_tree_runs".to_owned(),
        ));
    }
    None
}

#[cfg(test)]
mod tests;
