//! The run's event stream in domain terms. The API layer turns these into protobuf; the store
//! keeps them so a message's events can be replayed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    ConversationId, FileRecord, FinishReason, MessageId, MessageStatus, RetrieverResource,
    RunFailure, StrategyKind, Thought, ThoughtId, ToolCallRecord, Usage,
};

/// What happened in a run. Every variant is a snapshot taken when the event was produced, so
/// a later change to a record never alters an event already sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run was accepted and the message row exists.
    Started(Box<RunStarted>),
    /// The run waits behind others of its conversation (`enqueue`); sent when it is queued
    /// and again whenever the runs ahead of it change.
    Queued {
        /// How many live runs are ahead of it.
        ahead: u32,
        /// The run directly ahead, which it waits for.
        behind: MessageId,
    },
    /// The first event of a steering run: its text is to join the live run `joined`.
    Steered {
        /// The live run the text joins.
        joined: MessageId,
        /// The steer itself: the run the text becomes should `joined` not take it.
        steer: MessageId,
    },
    /// A steer's text joined this run before the model call of round `position`.
    UserTurn {
        /// The round whose model call first sees it.
        position: u32,
        /// The steer that brought it.
        steer: MessageId,
        /// The text.
        text: String,
    },
    /// A piece of answer text as the model writes it.
    AnswerDelta {
        /// The text.
        text: String,
    },
    /// A piece of a tool call's arguments as the model writes them, before the call is
    /// whole. Only the call `tool_started` announces is run; these show it forming.
    ToolCallDelta(Box<CallDelta>),
    /// A piece of the model's reasoning, when its agent asks to see it: stored like any
    /// event under `keep`; under `stream` sent with `seq` 0 to live followers only.
    ReasoningDelta {
        /// The round's thought id.
        thought_id: ThoughtId,
        /// The round's position.
        position: u32,
        /// The text.
        text: String,
    },
    /// A thought record as it stands now.
    Thought(Box<Thought>),
    /// A tool call is about to run.
    ToolStarted {
        /// The round's thought id.
        thought_id: ThoughtId,
        /// The round's position.
        position: u32,
        /// The call, without observation.
        call: Box<ToolCallRecord>,
    },
    /// A tool call finished (successfully or not).
    ToolFinished {
        /// The round's thought id.
        thought_id: ThoughtId,
        /// The round's position.
        position: u32,
        /// The call with its observation and meta.
        call: Box<ToolCallRecord>,
    },
    /// A tool produced a file for the user; it is stored with the message.
    File(Box<FileRecord>),
    /// The caller must run these tools and submit their results.
    ToolCallsRequired {
        /// The round's thought id.
        thought_id: ThoughtId,
        /// The calls, without observations.
        calls: Vec<ToolCallRecord>,
    },
    /// Tools that need approval were called; the run waits for a decision on each.
    ApprovalRequired {
        /// The round's thought id.
        thought_id: ThoughtId,
        /// The calls, without observations.
        calls: Vec<ToolCallRecord>,
    },
    /// A model call failed before the user saw any of its answer and is tried again.
    Retry {
        /// The round the call belongs to.
        position: u32,
        /// The attempt about to be made; 2 for the first retry.
        attempt: u32,
        /// Seconds waited before it.
        delay: f64,
        /// The failure, as an error event would carry it.
        failure: Box<RunFailure>,
        /// Provider of the model the next attempt goes to.
        provider: String,
        /// The model the next attempt goes to.
        model: String,
    },
    /// The run's owner was lost and another took it over: round `position` is made again
    /// from its start. The `AnswerDelta`, `ToolCallDelta` and `ReasoningDelta` events from
    /// `discard_from_seq` up to this event are void (an empty range when the cut round had
    /// shown nothing).
    RoundRestarted {
        /// The round made again.
        position: u32,
        /// The first void delta's `seq`; this event's own when none is void.
        discard_from_seq: u64,
        /// Why: `owner_lost` (the owner died or stalled) or `handed_over` (it stopped).
        reason: String,
    },
    /// An event of a sub-agent's run, carried in its parent's stream.
    Child(Box<ChildEvent>),
    /// The run ended normally.
    MessageEnd(Box<RunEnded>),
    /// The run failed; nothing follows.
    Error {
        /// What went wrong.
        failure: RunFailure,
        /// Usage of the rounds made before the failure.
        usage: Box<Usage>,
        /// LLM calls made, the failed one included.
        #[serde(default)]
        iterations: u32,
    },
}

// An event is moved many times between the run and its clients (into the burst, the
// broadcast, each follower's stream): its large variants are boxed so that every move is
// small. 344 bytes before they were; held here so none grows back unseen.
const _: () = assert!(std::mem::size_of::<RunEvent>() <= 80);

/// What a run starts with, as [`RunEvent::Started`] announces it (boxed there: an event is
/// moved many times on its way to clients, and a small one moves cheaply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    /// Strategy that runs.
    pub strategy: StrategyKind,
    /// LLM provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Effective iteration limit.
    pub max_iteration: u32,
    /// How much of the conversation's history the first prompt carries.
    pub history: HistoryReport,
    /// The stored agent and version that runs; `None` for an inline agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::PinnedAgent>,
    /// The budget in force (the agent's, lowered by the run's overrides and the
    /// tenant's ceilings); `None` when nothing is limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::RunBudget>,
}

/// How a run ended, as [`RunEvent::MessageEnd`] announces it (boxed there, as
/// [`RunStarted`] is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnded {
    /// The whole answer.
    pub answer: String,
    /// Usage summed over every round.
    pub usage: Usage,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// LLM rounds made.
    pub iterations: u32,
    /// Passages the run's tools retrieved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retriever_resources: Vec<RetrieverResource>,
    /// The answer as the document `output_schema` asked for, when it met it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    /// Why the answer does not meet `output_schema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_invalid: Option<String>,
    /// Which budget ran out, with `finish_reason` `budget_exhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exhausted: Option<super::BudgetKind>,
    /// With `finish_reason` `interrupted`: the newer run that stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<super::MessageId>,
}

impl RunEvent {
    /// The end of a run that completed with `answer`: for tests of whatever reads events.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn completed(answer: &str) -> Self {
        RunEvent::MessageEnd(Box::new(RunEnded {
            answer: answer.into(),
            usage: super::Usage::default(),
            finish_reason: FinishReason::Stop,
            iterations: 1,
            retriever_resources: Vec::new(),
            budget_exhausted: None,
            structured_output: None,
            output_invalid: None,
            interrupted_by: None,
        }))
    }

    /// Whether this is the last event of a run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, RunEvent::MessageEnd(_) | RunEvent::Error { .. })
    }

    /// What this event says its run — or, for a `child` event, the run below it — now
    /// waits on; `None` for an event that announces no wait.
    pub fn wait(&self) -> Option<Wait<'_>> {
        if let RunEvent::Child(child) = self {
            let wait = child.event.event.wait()?;
            return Some(Wait {
                run: wait.run.or(Some(child.event.message_id)),
                ..wait
            });
        }
        // Like `is_terminal`, a predicate over the two kinds that wait: every other kind
        // announces none.
        let (status, calls) = if let RunEvent::ApprovalRequired { calls, .. } = self {
            (MessageStatus::WaitingApproval, calls)
        } else if let RunEvent::ToolCallsRequired { calls, .. } = self {
            (MessageStatus::WaitingToolOutputs, calls)
        } else {
            return None;
        };
        Some(Wait {
            status,
            calls,
            run: None,
        })
    }
}

/// A piece of one forming tool call's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallDelta {
    /// The round's thought id.
    pub thought_id: ThoughtId,
    /// The round's position.
    pub position: u32,
    /// The id the call has in `tool_started`.
    pub tool_call_id: String,
    /// The call's place among the round's calls, from 0.
    pub index: u32,
    /// The tool's name, on a call's first delta only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The text that follows what earlier deltas of the call carried.
    pub arguments_delta: String,
    /// The call's arguments passed the most that is streamed; no delta of it follows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A wait an event announces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wait<'a> {
    /// The status the waiting run shows.
    pub status: MessageStatus,
    /// The calls waited on.
    pub calls: &'a [ToolCallRecord],
    /// The sub-agent run that waits, when it is not the event's own run.
    pub run: Option<MessageId>,
}

/// How much history fitted into the context window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryReport {
    /// Earlier turns sent to the model.
    pub kept_turns: u32,
    /// Earlier turns left out, oldest first, to fit the window.
    pub dropped_turns: u32,
    /// Tokens of the turns left out.
    pub dropped_tokens: u64,
}

/// An event with its place in the message's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// 1, 2, 3 … per message, with no gaps.
    pub seq: u64,
    /// The conversation of the message.
    pub conversation_id: ConversationId,
    /// The message the event belongs to.
    pub message_id: MessageId,
    /// When the event was produced.
    pub created_at: DateTime<Utc>,
    /// The event itself.
    pub event: RunEvent,
}

/// A sub-agent's event as its parent carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildEvent {
    /// The parent's call that started the child.
    pub tool_call_id: String,
    /// 1 for a child of a top run.
    pub depth: u32,
    /// The child's stored agent.
    pub agent_id: String,
    /// Its version.
    pub agent_version: u32,
    /// The child's own event, with its `seq` and ids.
    pub event: EventEnvelope,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{RunFailure, StrategyKind, ToolCallRecord, Usage};
    use serde_json::{json, to_value};

    /// Boxing a variant changes nothing of its JSON: events stored, and notices of replicas
    /// of earlier releases, read as before. Each is flat, under its `type`.
    #[test]
    fn boxed_events_keep_their_json_form() {
        let usage = to_value(Usage::default()).unwrap();
        let end = to_value(RunEvent::completed("hi")).unwrap();
        let expected = json!({"type": "message_end", "answer": "hi", "usage": usage,
            "finish_reason": "stop", "iterations": 1});
        assert_eq!(end, expected);
        assert_eq!(
            serde_json::from_value::<RunEvent>(expected).unwrap(),
            RunEvent::completed("hi")
        );

        let started = RunEvent::Started(Box::new(RunStarted {
            strategy: StrategyKind::FunctionCalling,
            provider: "openai".into(),
            model: "gpt".into(),
            max_iteration: 5,
            history: HistoryReport::default(),
            agent: None,
            budget: None,
        }));
        let value = to_value(&started).unwrap();
        assert_eq!(value["type"], "started");
        assert_eq!(value["provider"], "openai");
        assert_eq!(value["max_iteration"], 5);
        assert_eq!(value["history"]["kept_turns"], 0);
        assert_eq!(serde_json::from_value::<RunEvent>(value).unwrap(), started);

        let call = ToolCallRecord {
            id: "call_1".into(),
            name: "lookup".into(),
            provider: "time".into(),
            arguments: "{}".into(),
            observation: None,
            meta: None,
        };
        let tool = RunEvent::ToolStarted {
            thought_id: crate::domain::ThoughtId::new(),
            position: 1,
            call: Box::new(call.clone()),
        };
        let value = to_value(&tool).unwrap();
        assert_eq!(value["call"], to_value(&call).unwrap());

        let failed = RunEvent::Error {
            failure: RunFailure {
                code: "llm_server_error".into(),
                message: "down".into(),
            },
            usage: Box::default(),
            iterations: 2,
        };
        let value = to_value(&failed).unwrap();
        assert_eq!(value["usage"], usage);
        assert_eq!(value["failure"]["code"], "llm_server_error");
        assert!(matches!(
            serde_json::from_value::<RunEvent>(value).unwrap(),
            RunEvent::Error { iterations: 2, .. }
        ));
    }
}
