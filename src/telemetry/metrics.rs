//! The service's metrics in Prometheus form: the OpenTelemetry GenAI client metrics
//! (`gen_ai_client_operation_duration_seconds`, `gen_ai_client_token_usage`) and the
//! runner's own (`agent_runner_*`).
//!
//! Labels are bounded on purpose: provider and model names come from the server's
//! configuration, tool names from registered providers (a tool the model made up is
//! counted as `unknown`), and no message or conversation id is ever a label. A tenant label
//! is added only when the operator asks for it.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::domain::CallOutcome;

/// Seconds buckets of the GenAI operation duration, as the semantic conventions advise.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Token-count buckets of the GenAI token usage, as the semantic conventions advise.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// Seconds buckets of store flushes: from well below a millisecond up to a slow disk.
const FLUSH_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn durations() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn tokens() -> Histogram {
    Histogram::new(TOKEN_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    /// The configured provider's name (`gen_ai_provider_name` is its API, e.g. `openai`).
    provider: String,
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    provider: String,
    gen_ai_token_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    status: &'static str,
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    provider: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolDurationLabels {
    provider: String,
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    provider: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    currency: String,
    tenant: String,
}

/// How a run ended, as `agent_runner_runs_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The model answered.
    Completed,
    /// The run failed.
    Failed,
    /// A caller stopped it.
    Cancelled,
    /// The server stopped while it ran.
    Interrupted,
    /// The model still wanted tools after the last allowed round.
    MaxIterations,
}

impl RunOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
            Self::MaxIterations => "max_iterations",
        }
    }
}

/// One LLM call (one attempt) as the GenAI client metrics describe it.
#[derive(Debug, Clone)]
pub struct LlmCall<'a> {
    /// The provider's API (`openai`, `anthropic`).
    pub api: &'a str,
    /// The configured provider's name.
    pub provider: &'a str,
    /// The model asked for.
    pub model: &'a str,
    /// How long the call took.
    pub duration: Duration,
    /// Input and output tokens, when known.
    pub tokens: Option<(u64, u64)>,
    /// The failure's code, when it failed.
    pub error: Option<&'a str>,
}

/// Labels of runs that met a live run in their conversation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BusyLabels {
    outcome: &'static str,
}

/// Labels of the replica's info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabels {
    replica_id: String,
}

/// Every metric of one server, registered in its own registry.
pub struct Metrics {
    registry: Registry,
    operation_duration: Histograms<OperationLabels>,
    token_usage: Histograms<TokenLabels>,
    runs: Family<RunLabels, Counter>,
    runs_active: Gauge,
    run_duration: Histograms<StatusLabels>,
    first_delta: Histogram,
    tool_calls: Family<ToolLabels, Counter>,
    tool_duration: Histograms<ToolDurationLabels>,
    retries: Family<RetryLabels, Counter>,
    budget_exhausted: Family<BudgetLabels, Counter>,
    cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    store_flush: Histogram,
    store_commit_wait: Histogram,
    replica_info: Family<ReplicaLabels, Gauge>,
    relayed_events: Counter,
    relay_lag: Histogram,
    bus_rejected: Counter,
    conversation_busy: Family<BusyLabels, Counter>,
    /// Whether run counts and cost carry a `tenant` label.
    tenant_label: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(false)
    }
}

impl Metrics {
    /// Registers every metric; `tenant_label` adds the tenant to run counts and cost.
    pub fn new(tenant_label: bool) -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            operation_duration: Family::new_with_constructor(durations),
            token_usage: Family::new_with_constructor(tokens),
            runs: Family::default(),
            runs_active: Gauge::default(),
            run_duration: Family::new_with_constructor(durations),
            first_delta: durations(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(durations),
            retries: Family::default(),
            budget_exhausted: Family::default(),
            cost: Family::default(),
            store_flush: Histogram::new(FLUSH_BUCKETS),
            store_commit_wait: Histogram::new(FLUSH_BUCKETS),
            replica_info: Family::default(),
            relayed_events: Counter::default(),
            relay_lag: Histogram::new(FLUSH_BUCKETS),
            bus_rejected: Counter::default(),
            conversation_busy: Family::default(),
            tenant_label,
        };
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "gen_ai_client_operation_duration_seconds",
            "Duration of GenAI operations (one per LLM call)",
            self.operation_duration.clone(),
        );
        registry.register(
            "gen_ai_client_token_usage",
            "Tokens used per LLM call, by token type",
            self.token_usage.clone(),
        );
        registry.register(
            "agent_runner_runs",
            "Runs ended, by how they ended",
            self.runs.clone(),
        );
        registry.register(
            "agent_runner_runs_active",
            "Runs in progress",
            self.runs_active.clone(),
        );
        registry.register(
            "agent_runner_run_duration_seconds",
            "Wall-clock duration of runs, by how they ended",
            self.run_duration.clone(),
        );
        registry.register(
            "agent_runner_time_to_first_delta_seconds",
            "From a run's start to its first answer delta",
            self.first_delta.clone(),
        );
        registry.register(
            "agent_runner_tool_calls",
            "Tool calls, by provider, tool and outcome",
            self.tool_calls.clone(),
        );
        registry.register(
            "agent_runner_tool_duration_seconds",
            "Duration of tool calls",
            self.tool_duration.clone(),
        );
        registry.register(
            "agent_runner_llm_retries",
            "LLM calls tried again, by provider and the failure's code",
            self.retries.clone(),
        );
        registry.register(
            "agent_runner_budget_exhausted",
            "Runs ended because a budget ran out, by which (tokens, cost, wall_clock, tool_calls)",
            self.budget_exhausted.clone(),
        );
        registry.register(
            "agent_runner_cost",
            "LLM cost of ended runs, by currency",
            self.cost.clone(),
        );
        registry.register(
            "agent_runner_store_flush_duration_seconds",
            "Duration of store flushes that make records durable",
            self.store_flush.clone(),
        );
        registry.register(
            "agent_runner_store_commit_wait_seconds",
            "Time a run's records wait for a free committer before their flush starts",
            self.store_commit_wait.clone(),
        );
        registry.register(
            "agent_runner_replica_info",
            "This replica's id among those sharing the database (always 1)",
            self.replica_info.clone(),
        );
        registry.register(
            "agent_runner_relayed_events",
            "Events of runs held by other replicas, heard on the bus by followers here",
            self.relayed_events.clone(),
        );
        registry.register(
            "agent_runner_relay_lag_seconds",
            "From an event's making on its replica to its notice reaching this one",
            self.relay_lag.clone(),
        );
        registry.register(
            "agent_runner_bus_rejected",
            "Payloads heard on the bus that did not open with the deployment's key (forged, \
             replayed, or of a replica of an earlier release), dropped unread",
            self.bus_rejected.clone(),
        );
        registry.register(
            "agent_runner_conversation_busy",
            "Runs that arrived while their conversation had a live run, by what their \
             conversation policy did (queued, rejected, interrupted, rolled_back, steered)",
            self.conversation_busy.clone(),
        );
    }

    /// A run met a live run in its conversation and its policy did `outcome`.
    pub fn conversation_busy(&self, outcome: &'static str) {
        self.conversation_busy
            .get_or_create(&BusyLabels { outcome })
            .inc();
    }

    /// A notice of `events` events of another replica's run arrived `lag` after the last
    /// was made.
    pub fn relayed(&self, events: usize, lag: Duration) {
        self.relayed_events.inc_by(events as u64);
        self.relay_lag.observe(lag.as_secs_f64());
    }

    /// A payload on the bus did not open and was dropped.
    pub fn bus_rejected(&self) {
        self.bus_rejected.inc();
    }

    /// Names the replica this process is, for dashboards that join on it.
    pub fn set_replica(&self, replica_id: &str) {
        self.replica_info
            .get_or_create(&ReplicaLabels {
                replica_id: replica_id.to_owned(),
            })
            .set(1);
    }

    /// A run began.
    pub fn run_started(&self) {
        self.runs_active.inc();
    }

    /// A run left this process, still running, for another to go on with.
    pub fn run_handed_over(&self) {
        self.runs_active.dec();
    }

    /// A run of `tenant` ended after `duration`, having cost `cost` in `currency`.
    pub fn run_ended(
        &self,
        tenant: &str,
        outcome: RunOutcome,
        duration: Duration,
        cost: (f64, &str),
    ) {
        self.runs_active.dec();
        let tenant = if self.tenant_label { tenant } else { "" };
        self.runs
            .get_or_create(&RunLabels {
                status: outcome.label(),
                tenant: tenant.to_owned(),
            })
            .inc();
        self.run_duration
            .get_or_create(&StatusLabels {
                status: outcome.label(),
            })
            .observe(duration.as_secs_f64());
        let (amount, currency) = cost;
        if amount > 0.0 {
            self.cost
                .get_or_create(&CostLabels {
                    currency: currency.to_owned(),
                    tenant: tenant.to_owned(),
                })
                .inc_by(amount);
        }
    }

    /// A run showed its first answer text `after` its start.
    pub fn first_delta(&self, after: Duration) {
        self.first_delta.observe(after.as_secs_f64());
    }

    /// One LLM call ended.
    pub fn llm_call(&self, call: &LlmCall<'_>) {
        self.operation_duration
            .get_or_create(&OperationLabels {
                gen_ai_operation_name: "chat",
                gen_ai_provider_name: call.api.to_owned(),
                gen_ai_request_model: call.model.to_owned(),
                provider: call.provider.to_owned(),
                error_type: call.error.unwrap_or_default().to_owned(),
            })
            .observe(call.duration.as_secs_f64());
        let Some((input, output)) = call.tokens else {
            return;
        };
        for (kind, count) in [("input", input), ("output", output)] {
            self.token_usage
                .get_or_create(&TokenLabels {
                    gen_ai_operation_name: "chat",
                    gen_ai_provider_name: call.api.to_owned(),
                    gen_ai_request_model: call.model.to_owned(),
                    provider: call.provider.to_owned(),
                    gen_ai_token_type: kind,
                })
                .observe(count as f64);
        }
    }

    /// One tool call ended. `provider` is empty for a tool the run does not have.
    pub fn tool_call(&self, provider: &str, tool: &str, outcome: CallOutcome, duration: Duration) {
        let tool = if provider.is_empty() { "unknown" } else { tool };
        self.tool_calls
            .get_or_create(&ToolLabels {
                provider: provider.to_owned(),
                tool: tool.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
        self.tool_duration
            .get_or_create(&ToolDurationLabels {
                provider: provider.to_owned(),
                tool: tool.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// An LLM call of `provider` failed with `code` and is tried again.
    pub fn llm_retry(&self, provider: &str, code: &str) {
        self.retries
            .get_or_create(&RetryLabels {
                provider: provider.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// A run ended because its `kind` budget ran out.
    pub fn budget_exhausted(&self, kind: crate::domain::BudgetKind) {
        self.budget_exhausted
            .get_or_create(&BudgetLabels {
                kind: kind.as_str(),
            })
            .inc();
    }

    /// A store flush took `duration`.
    pub fn store_flush(&self, duration: Duration) {
        self.store_flush.observe(duration.as_secs_f64());
    }

    /// Records how long a burst waited for a committer and a connection: with the flushes,
    /// where a commit's time goes.
    pub fn store_commit_wait(&self, duration: Duration) {
        self.store_commit_wait.observe(duration.as_secs_f64());
    }

    /// Every metric in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(error = %err, "cannot encode the metrics");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
        text.lines().find(|line| line.starts_with(start))
    }

    #[test]
    fn counts_come_out_under_their_prometheus_names() {
        let metrics = Metrics::new(false);
        metrics.run_started();
        metrics.run_ended(
            "acme",
            RunOutcome::Completed,
            Duration::from_millis(20),
            (0.5, "USD"),
        );
        metrics.llm_call(&LlmCall {
            api: "openai",
            provider: "local",
            model: "m",
            duration: Duration::from_millis(30),
            tokens: Some((100, 7)),
            error: None,
        });
        metrics.tool_call("", "made_up", CallOutcome::UnknownTool, Duration::ZERO);
        let text = metrics.render();
        assert_eq!(
            line(&text, "agent_runner_runs_total{"),
            Some("agent_runner_runs_total{status=\"completed\",tenant=\"\"} 1")
        );
        assert_eq!(
            line(&text, "agent_runner_runs_active "),
            Some("agent_runner_runs_active 0")
        );
        assert!(text.contains("gen_ai_client_token_usage_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"m\",provider=\"local\",gen_ai_token_type=\"output\"} 1"), "{text}");
        assert!(text.contains("agent_runner_tool_calls_total{provider=\"\",tool=\"unknown\",outcome=\"unknown_tool\"} 1"), "{text}");
        assert!(
            text.contains("agent_runner_cost_total{currency=\"USD\",tenant=\"\"} 0.5"),
            "{text}"
        );
    }

    #[test]
    fn the_tenant_label_is_there_only_when_asked_for() {
        let metrics = Metrics::new(true);
        metrics.run_started();
        metrics.run_ended("acme", RunOutcome::Failed, Duration::ZERO, (0.0, "USD"));
        assert!(metrics
            .render()
            .contains("agent_runner_runs_total{status=\"failed\",tenant=\"acme\"} 1"));
    }
}
