//! The workload every case runs, and what one run of it measured.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

/// The workload's request.
pub fn bench_request() -> pb::RunRequest {
    pb::RunRequest {
        query: "What time is it?".into(),
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: "mock".into(),
                name: "bench-model".into(),
                ..Default::default()
            }),
            tools: vec![pb::AgentTool {
                provider: "time".into(),
                name: "current_time".into(),
                parameters: None,
                require_approval: false,
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What one run measured.
pub struct RunResult {
    pub latency: Duration,
    pub ttft: Option<Duration>,
    pub tool_time: Duration,
    pub ok: bool,
}

impl RunResult {
    /// A run that has not ended yet.
    pub fn new() -> Self {
        Self {
            latency: Duration::ZERO,
            ttft: None,
            tool_time: Duration::ZERO,
            ok: false,
        }
    }

    /// Notes what `event`, arriving now, says of a run begun at `started`: its first
    /// delta, a tool's time, how it ended.
    pub fn note(&mut self, started: Instant, event: Option<Event>) {
        match event {
            Some(Event::Delta(_)) if self.ttft.is_none() => self.ttft = Some(started.elapsed()),
            Some(Event::ToolFinished(finished)) => {
                let cost = finished
                    .tool_call
                    .and_then(|c| c.meta)
                    .map_or(0.0, |m| m.time_cost);
                self.tool_time += Duration::from_secs_f64(cost.max(0.0));
            }
            Some(Event::End(end)) => self.ok = end.finish_reason == pb::FinishReason::Stop as i32,
            _ => {}
        }
    }
}
