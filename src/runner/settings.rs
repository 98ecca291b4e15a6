//! The runner's tunables, from the server configuration.

use std::time::Duration;

/// Tunables of the loop, from the server configuration.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Longest a single tool call may take before it becomes a timeout observation.
    pub tool_timeout: Duration,
    /// Tool calls of one round that run at once.
    pub tool_concurrency: usize,
    /// Live events kept per run for clients that fall behind (the rest come from the store).
    pub event_buffer: usize,
    /// Longest a run waits for the results of client-executed tools.
    pub client_tool_timeout: Duration,
    /// Record prompts and completions on LLM spans (off: they may hold personal data).
    pub trace_content: bool,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(30),
            tool_concurrency: 8,
            event_buffer: 64,
            client_tool_timeout: Duration::from_secs(600),
            trace_content: false,
        }
    }
}
