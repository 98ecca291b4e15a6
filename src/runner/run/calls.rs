//! How a call's result is stored and announced, and a wait shown on the message; shared by
//! the server's, the caller's and the sub-agents' calls.

use std::time::Duration;

use super::allowance::Clock;
use super::halt::Halt;
use super::recorder::Recorder;
use super::state::Round;
use crate::domain::{Message, MessageStatus};
use crate::telemetry::Metrics;
use crate::tools::{Invocation, CLIENT_PROVIDER};

/// Where a round's call results go (written, counted, then announced), and the message
/// whose status shows what the round waits for; the wall clock stands still while the
/// run waits on the caller.
pub struct CallResults<'a> {
    /// Where results are written and announced.
    pub recorder: &'a mut Recorder,
    /// The message, whose status shows a wait for the caller.
    pub message: &'a mut Message,
    /// Where tool calls are counted.
    pub metrics: &'a Metrics,
    /// The wall clock, which stands still while the run waits on the caller.
    pub clock: Option<&'a mut Clock>,
}

impl CallResults<'_> {
    /// Shows `status` on the message, stored and announced with the next write.
    pub(super) fn set_status(&mut self, status: MessageStatus) -> Result<(), Halt> {
        if let Some(clock) = self.clock.as_deref_mut() {
            match status {
                MessageStatus::WaitingApproval | MessageStatus::WaitingToolOutputs => clock.pause(),
                MessageStatus::Running
                | MessageStatus::Queued
                | MessageStatus::Completed
                | MessageStatus::Failed
                | MessageStatus::Cancelled
                | MessageStatus::Interrupted => clock.start(),
            }
        }
        self.message.status = status;
        self.message.updated_at = crate::domain::now();
        self.recorder.message(self.message);
        Ok(())
    }

    /// Stores a call's files and result, then announces the call as finished.
    pub(super) async fn record(
        &mut self,
        round: &mut Round,
        index: usize,
        invocation: Invocation,
    ) -> Result<(), Halt> {
        self.record_all(round, vec![(index, invocation)]).await
    }

    /// Stores the files and results of calls that finished together, writes the thought
    /// once for all of them, then announces each as finished.
    pub(super) async fn record_all(
        &mut self,
        round: &mut Round,
        results: Vec<(usize, Invocation)>,
    ) -> Result<(), Halt> {
        let mut finished = Vec::with_capacity(results.len());
        for (index, mut invocation) in results {
            if let Some(call) = round.thought.tool_calls.get(index) {
                self.metrics.tool_call(
                    &invocation.provider,
                    tool_label(&invocation.provider, &call.name),
                    invocation.outcome,
                    Duration::from_secs_f64(invocation.meta.time_cost.max(0.0)),
                );
            }
            let files = self
                .recorder
                .files(self.message.id, &invocation.files)
                .await?;
            // The model learns each file's id, so it can hand the file to another tool.
            for file in &files {
                invocation
                    .observation
                    .push_str(&format!("\n[file {}: {}]", file.id, file.name));
            }
            let file_ids = files.iter().map(|f| f.id.to_string());
            if let Some(call) = round.observe(index, invocation, file_ids) {
                finished.push(call);
            }
        }
        if !finished.is_empty() {
            self.recorder.tools_finished(&round.thought, finished);
        }
        Ok(())
    }
}

/// A tool's name as a metric label: a client tool's name is the caller's, so client tools
/// are counted under one label.
pub(super) fn tool_label<'a>(provider: &str, name: &'a str) -> &'a str {
    if provider == CLIENT_PROVIDER {
        CLIENT_PROVIDER
    } else {
        name
    }
}
