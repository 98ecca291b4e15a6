//! The runner's tunables, from the server configuration.

use std::time::Duration;

/// Tunables of the loop, from the server configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerSettings {
    /// Longest a single tool call may take before it becomes a timeout observation.
    pub tool_timeout: Duration,
    /// Tool calls of one round that run at once.
    pub tool_concurrency: usize,
    /// Live events kept per run for clients that fall behind (the rest come from the store).
    pub event_buffer: usize,
    /// Longest a run waits for the results of client-executed tools.
    pub client_tool_timeout: Duration,
    /// How long a run waits for decisions on calls that need approval.
    pub approval_timeout: Duration,
    /// Record prompts and completions on LLM spans (off: they may hold personal data).
    pub trace_content: bool,
    /// The most text a model may write in one run (tool-call arguments included).
    pub max_answer_bytes: usize,
    /// The longest query, and the most bytes of instruction inputs, a run accepts.
    pub max_query_bytes: usize,
    /// The longest instruction once its variables are filled, and the longest ReAct prompt
    /// once rendered: a few bytes of template must not become gigabytes of prompt.
    pub max_instruction_bytes: usize,
    /// Longest observation of a client tool's result; longer ones are cut with a marker.
    pub tool_output_limit: usize,
    /// Calls of one round that are run; the rest get an observation saying so.
    pub max_tool_calls_per_round: usize,
    /// How deep sub-agents nest (a top run is depth 0).
    pub max_agent_depth: u32,
    /// Runs of one tree alive at once, its top run included.
    pub max_tree_runs: u32,
    /// Runs one tree starts over its life, its top run included.
    pub max_tree_runs_total: u32,
    /// How long a run tries to commit its records while the store is unavailable before
    /// it stops as on a full disk (it announces nothing meanwhile).
    pub write_timeout: Duration,
    /// How a forming tool call's arguments are streamed.
    pub argument_deltas: DeltaPacing,
    /// Whether an agent may keep its model's reasoning (`reasoning: KEEP`); operators who
    /// must not store it turn this off.
    pub allow_keep_reasoning: bool,
    /// On shutdown, hand runs over (each stops at the end of its step and is left for the
    /// next process or a peer to go on with) instead of ending them interrupted.
    pub hand_over: bool,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(30),
            tool_concurrency: 8,
            event_buffer: 64,
            client_tool_timeout: Duration::from_secs(600),
            approval_timeout: Duration::from_secs(600),
            trace_content: false,
            max_answer_bytes: 2 * 1024 * 1024,
            max_query_bytes: 1024 * 1024,
            max_instruction_bytes: 4 * 1024 * 1024,
            tool_output_limit: 16 * 1024,
            max_tool_calls_per_round: 128,
            max_agent_depth: 3,
            max_tree_runs: 32,
            max_tree_runs_total: 256,
            write_timeout: Duration::from_secs(10),
            argument_deltas: DeltaPacing::default(),
            allow_keep_reasoning: true,
            hand_over: false,
        }
    }
}

/// How often a forming tool call's arguments are sent: each delta event is stored, so
/// pieces are gathered rather than sent one by one as the model writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaPacing {
    /// A call's gathered text is sent once this long has passed since its last delta.
    pub interval: Duration,
    /// ... or once this many bytes have gathered, whichever comes first.
    pub bytes: usize,
    /// The most of one call's arguments that is streamed; past it one delta says
    /// `truncated` and no more follow (the call itself is whole in `tool_started`).
    pub max_bytes: usize,
}

impl Default for DeltaPacing {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(50),
            bytes: 1024,
            max_bytes: 64 * 1024,
        }
    }
}
