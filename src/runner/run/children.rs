//! Sub-agents: a call of a stored agent offered as a tool starts a run of its own (a
//! message in a conversation of its own, linked to this run and call), whose events this
//! run carries wrapped in `child` events and whose end becomes the call's observation.
//! Depth and cycles are refused before anything starts; the child's token is a child of
//! this run's, so cancelling this run cancels every descendant.

use std::collections::VecDeque;
use std::time::Instant;

use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::calls::CallResults;
use super::halt::{or_cancel, Halt};
use super::launch::{child_message_id, legacy_child_message_id, ChildRun, ChildStart, Family};
use super::state::Round;
use crate::domain::{
    CallAt, CallOutcome, ChildEvent, EventEnvelope, FinishReason, MessageId, MessageStatus,
    ParentLink, RunBudget, RunEnded, RunEvent, ToolInvokeMeta,
};
use crate::runner::error::RunError;
use crate::runner::tree::{TreeHandle, TreeSlot};
use crate::tools::{observation, Invocation, AGENT_PROVIDER};

/// One child being followed: the call it answers and what it has shown.
struct Following {
    index: usize,
    call_id: String,
    agent_id: String,
    agent_version: u32,
    started: Instant,
    /// The last of its events this run carried before it was taken over.
    carried: u64,
    /// Tool calls it (and the runs below it) started.
    tool_calls: u32,
    /// What it waits for, as its last event said.
    wait: Option<MessageStatus>,
    /// Its place in the tree, given back when its events end.
    slot: Option<TreeSlot>,
    /// Stops it when this run stops following it before its end.
    _stop: StopOnDrop,
}

/// Cancels a child's token when dropped, unless the process is handing its runs over (then
/// the child goes on, and whoever takes this run over follows it again). A child that
/// ended is not affected.
struct StopOnDrop {
    child: CancellationToken,
    draining: CancellationToken,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.draining.is_cancelled() {
            self.child.cancel();
        }
    }
}

/// A followed child's item: one of its events, or the end of them (`None`).
type ChildItem = (usize, Option<Result<EventEnvelope, RunError>>);

/// What a round gives its sub-agent calls.
pub(super) struct ChildRound<'a> {
    /// Where sub-agents start.
    pub family: &'a Family,
    /// Stops every call at once.
    pub cancel: &'a CancellationToken,
    /// Fires when the process hands its runs over: children then go on without this run.
    pub draining: &'a CancellationToken,
    /// Children followed at once.
    pub limit: usize,
    /// What each child may spend.
    pub share: RunBudget,
}

/// A round's sub-agent calls as they run: the children followed, their event streams, the
/// calls still to start, and the share of the budget each child gets.
pub(super) struct ChildCalls<'t, 'a> {
    results: &'t mut CallResults<'a>,
    round: ChildRound<'a>,
    pending: VecDeque<usize>,
    following: Vec<Following>,
    streams: SelectAll<BoxStream<'static, ChildItem>>,
}

impl<'t, 'a> ChildCalls<'t, 'a> {
    /// Runs the sub-agent calls at `indices`, at most `runner.tool_concurrency` at once as
    /// other tools are, carrying their events, and records each child's end as its call's
    /// result.
    pub(super) async fn run(
        results: &'t mut CallResults<'a>,
        given: ChildRound<'a>,
        round: &mut Round,
        indices: Vec<usize>,
    ) -> Result<(), Halt> {
        let mut children = Self {
            results,
            round: given,
            pending: indices.into(),
            following: Vec::new(),
            streams: SelectAll::new(),
        };
        children.follow_all(round).await
    }

    /// Starts calls while there is room, and carries the children's events until every
    /// child has ended.
    async fn follow_all(&mut self, round: &mut Round) -> Result<(), Halt> {
        let limit = self.round.limit;
        loop {
            while self.streams.len() < limit {
                let Some(index) = self.pending.pop_front() else {
                    break;
                };
                self.follow(round, index).await?;
            }
            let Some((slot, item)) = or_cancel(self.round.cancel, self.streams.next()).await?
            else {
                if self.pending.is_empty() {
                    break;
                }
                continue;
            };
            match item {
                Some(item) => self.carry(round, slot, item).await?,
                // Its events ended: its place in the tree is free for the next call.
                None => self.following[slot].slot = None,
            }
        }
        // Every child has ended: nothing is waited for any more.
        self.show(MessageStatus::Running)
    }

    /// Starts (or, after a takeover, finds) the child of the call at `index` and follows
    /// its events; a call that starts nothing is recorded with why.
    async fn follow(&mut self, round: &mut Round, index: usize) -> Result<(), Halt> {
        let call = round.thought.tool_calls[index].clone();
        let at = CallAt {
            position: round.thought.position,
            index: u32::try_from(index).unwrap_or(u32::MAX),
        };
        let stop = StopOnDrop {
            child: self.round.cancel.child_token(),
            draining: self.round.draining.clone(),
        };
        let parent = self.results.message.id;
        let child = stop.child.clone();
        let started = start_child(
            self.round.family,
            &self.round.share,
            parent,
            at,
            &call,
            child,
        )
        .await;
        let (run, agent_id, tree_slot) = match started {
            Ok(started) => started,
            Err(invocation) => return self.results.record(round, index, invocation).await,
        };
        let carried = match run.found {
            true => {
                let parent = self.results.message.id;
                self.results
                    .recorder
                    .last_child_seq(parent, run.message_id)
                    .await?
            }
            false => 0,
        };
        let slot = self.following.len();
        self.following.push(Following {
            index,
            call_id: call.id.clone(),
            agent_id,
            agent_version: run.agent_version,
            started: Instant::now(),
            carried,
            tool_calls: 0,
            wait: None,
            slot: Some(tree_slot),
            _stop: stop,
        });
        let events = run
            .events
            .map(Some)
            .chain(futures::stream::once(async { None }))
            .map(move |item| (slot, item));
        self.streams.push(events.boxed());
        Ok(())
    }

    /// Carries one of a child's events (wrapped as `child`), shows what the children wait
    /// for, and records the call's result when the event ends the child.
    async fn carry(
        &mut self,
        round: &mut Round,
        slot: usize,
        item: Result<EventEnvelope, RunError>,
    ) -> Result<(), Halt> {
        let event = match item {
            Ok(event) => event,
            Err(err) => {
                let text = observation::invoke_error(&format_args!(
                    "the sub-agent's run could not be followed: {err}"
                ));
                let child = &self.following[slot];
                let (index, invocation) = (child.index, failure(text, child.started));
                return self.results.record(round, index, invocation).await;
            }
        };
        let depth = self.round.family.depth + 1;
        let child = &mut self.following[slot];
        child.tool_calls = child.tool_calls.saturating_add(tool_calls_in(&event.event));
        let end = child_result(&event.event, child.started).map(|mut invocation| {
            invocation.meta.tool_calls = child.tool_calls;
            invocation
        });
        let index = child.index;
        child.wait = asks(&event.event);
        // Events carried before this run was taken over are counted, not carried again.
        let carried = (event.seq > child.carried).then(|| {
            RunEvent::Child(Box::new(ChildEvent {
                tool_call_id: child.call_id.clone(),
                depth,
                agent_id: child.agent_id.clone(),
                agent_version: child.agent_version,
                event,
            }))
        });
        self.show_waiting()?;
        if let Some(carried) = carried {
            self.results.recorder.announce(carried);
        }
        if let Some(invocation) = end {
            self.results.record(round, index, invocation).await?;
        }
        Ok(())
    }

    /// Shows on this run's message what its children wait for: approval when any waits
    /// for one, else tool outputs when any waits for those, else running.
    fn show_waiting(&mut self) -> Result<(), Halt> {
        let waits = |status| {
            self.following
                .iter()
                .any(|child| child.wait == Some(status))
        };
        let status = if waits(MessageStatus::WaitingApproval) {
            MessageStatus::WaitingApproval
        } else if waits(MessageStatus::WaitingToolOutputs) {
            MessageStatus::WaitingToolOutputs
        } else {
            MessageStatus::Running
        };
        self.show(status)
    }

    /// Shows `status` on this run's message, unless it shows it already.
    fn show(&mut self, status: MessageStatus) -> Result<(), Halt> {
        if self.results.message.status == status {
            return Ok(());
        }
        self.results.set_status(status)
    }
}

/// Starts the child `call` of `parent` asks for, holding its place in the tree, or says
/// why it does not start.
async fn start_child(
    family: &Family,
    budget: &RunBudget,
    parent: MessageId,
    at: CallAt,
    call: &crate::domain::ToolCallRecord,
    cancel: CancellationToken,
) -> Result<(ChildRun, String, TreeSlot), Invocation> {
    let started = Instant::now();
    let refuse = |code: &str, text: String| {
        failure(
            observation::invoke_error(&format_args!("{code}: {text}")),
            started,
        )
    };
    let Some(agent) = family
        .sub_agents
        .iter()
        .find(|sub| sub.agent_id == call.name)
    else {
        return Err(refuse(
            "unknown_agent",
            format!("{} is not a sub-agent of this agent", call.name),
        ));
    };
    let input = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|args| {
            args.get("input")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .filter(|input| !input.trim().is_empty());
    let Some(input) = input else {
        return Err(failure(
            observation::invalid_arguments("`input` must be a non-empty string"),
            started,
        ));
    };
    let depth = family.depth + 1;
    if depth > family.max_depth {
        return Err(refuse(
            "max_depth",
            format!(
                "{} would run at depth {depth}, deeper than runner.max_agent_depth ({})",
                agent.agent_id, family.max_depth
            ),
        ));
    }
    if family.lineage.contains(&agent.agent_id) {
        return Err(refuse(
            "agent_recursion",
            format!(
                "{} is already running above this call ({})",
                agent.agent_id,
                family.lineage.join(" → ")
            ),
        ));
    }
    let tree_slot = family
        .tree
        .reserve()
        .map_err(|full| refuse("sub_agent_limit", full.to_string()))?;
    let start = ChildStart {
        tenant: family.tenant.clone(),
        user: family.user.clone(),
        agent: agent.clone(),
        input,
        parent: ParentLink {
            message_id: parent,
            tool_call_id: call.id.clone(),
            depth,
            call_at: Some(at),
        },
        lineage: family.lineage.clone(),
        message_id: child_message_id(parent, at, call),
        legacy_id: legacy_child_message_id(parent, &call.id),
        budget: budget.clone(),
        tree: TreeHandle(family.tree.clone()),
        max_children: family.max_children,
    };
    match family.launcher.start_child(start, cancel).await {
        Ok(run) => Ok((run, agent.agent_id.clone(), tree_slot)),
        Err(RunError::LimitExceeded { limit, detail, .. }) => {
            Err(refuse("sub_agent_limit", format!("{limit}: {detail}")))
        }
        Err(err) => Err(refuse("agent_unavailable", err.to_string())),
    }
}

/// The tool calls a child's event starts: one for each call it announces as started, also
/// in the runs below it.
fn tool_calls_in(event: &RunEvent) -> u32 {
    if let RunEvent::Child(child) = event {
        return tool_calls_in(&child.event.event);
    }
    u32::from(matches!(event, RunEvent::ToolStarted { .. }))
}

/// What a child's event says it (or a run below it) now waits for; `None` once it goes on.
fn asks(event: &RunEvent) -> Option<MessageStatus> {
    event.wait().map(|wait| wait.status)
}

/// A failed sub-agent call.
fn failure(text: String, started: Instant) -> Invocation {
    observation::failure(
        CallOutcome::Error,
        AGENT_PROVIDER.to_owned(),
        text,
        started.elapsed().as_secs_f64(),
        serde_json::Map::new(),
    )
}

/// The call's result when `event` ends the child: its answer (or structured output), or
/// its failure as a tool error; its usage goes with it.
fn child_result(event: &RunEvent, started: Instant) -> Option<Invocation> {
    // Only the two kinds that end a run carry a result (see `RunEvent::is_terminal`).
    let (observation, error, usage, outcome) = if let RunEvent::MessageEnd(end) = event {
        let RunEnded {
            answer,
            usage,
            finish_reason,
            structured_output,
            ..
        } = &**end;
        if *finish_reason == FinishReason::Cancelled {
            let text = observation::invoke_error(&format_args!(
                "the sub-agent's run was cancelled{}",
                if answer.is_empty() {
                    ""
                } else {
                    " (what it wrote is not its answer)"
                }
            ));
            (text.clone(), Some(text), usage.clone(), CallOutcome::Error)
        } else {
            let observation = match structured_output {
                Some(document) => document.to_string(),
                None => answer.clone(),
            };
            (observation, None, usage.clone(), CallOutcome::Success)
        }
    } else if let RunEvent::Error { failure, usage, .. } = event {
        let text = observation::invoke_error(&format_args!(
            "the sub-agent failed: {}: {}",
            failure.code, failure.message
        ));
        (
            text.clone(),
            Some(text),
            (**usage).clone(),
            CallOutcome::Error,
        )
    } else {
        return None;
    };
    Some(Invocation {
        provider: AGENT_PROVIDER.to_owned(),
        outcome,
        files: Vec::new(),
        resources: Vec::new(),
        meta: ToolInvokeMeta {
            time_cost: started.elapsed().as_secs_f64(),
            error,
            tool_config: serde_json::Map::new(),
            usage: Some(usage),
            tool_calls: 0,
        },
        observation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MessageId;

    /// An envelope's event.
    fn end_event(answer: &str) -> crate::domain::EventEnvelope {
        crate::domain::EventEnvelope {
            seq: 3,
            conversation_id: crate::domain::ConversationId::new(),
            message_id: MessageId::new(),
            created_at: crate::domain::now(),
            event: RunEvent::completed(answer),
        }
    }

    #[test]
    fn a_childs_end_is_the_calls_result() {
        let done = child_result(&end_event("Paris.").event, Instant::now()).unwrap();
        assert_eq!(done.observation, "Paris.");
        assert_eq!(done.outcome, CallOutcome::Success);
        assert!(done.meta.usage.is_some());
        let delta = RunEvent::AnswerDelta { text: "x".into() };
        assert!(child_result(&delta, Instant::now()).is_none());
        let failed = RunEvent::Error {
            failure: crate::domain::RunFailure {
                code: "llm_server_error".into(),
                message: "down".into(),
            },
            usage: Box::default(),
            iterations: 1,
        };
        let failed = child_result(&failed, Instant::now()).unwrap();
        assert_eq!(
            failed.observation,
            "tool invoke error: the sub-agent failed: llm_server_error: down"
        );
    }
}
