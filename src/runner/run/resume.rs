//! Where a run taken over picks up, rebuilt from what its lost owner made durable: its
//! thoughts and its events. Free of I/O, so a unit test drives it with records alone.
//!
//! A round whose calls all have results is finished and replays into later prompts as it
//! is. A round whose model call finished (its calls stored) keeps its decision: its calls
//! without results are still to run. Any later round was cut: it is made again from its
//! start, and the answer text it had shown is void.

use std::collections::HashSet;

use super::state::{Round, RunState};
use crate::domain::{EventEnvelope, RunEvent, Thought};

/// A run rebuilt from its records.
#[derive(Debug)]
pub struct Resumption {
    /// What the run knew at its last durable round.
    pub state: RunState,
    /// Where the run goes on.
    pub resume: Resume,
    /// The last `seq` the lost owner made durable.
    pub last_seq: u64,
}

/// What the new owner does first.
#[derive(Debug)]
pub struct Resume {
    /// A round whose model call finished and whose calls are still to run.
    pub decided: Option<Round>,
    /// The cut round's thought as stored, whose id and place the new attempt keeps.
    pub cut: Option<Thought>,
    /// The round the model is called for next.
    pub next_position: u32,
    /// The first `seq` of the cut round's answer text, now void; `None` when it showed none.
    pub void_from: Option<u64>,
    /// The void text: what the cut model call had written, counted as its estimated usage.
    pub void_text: String,
    /// Calls whose start is durable: perhaps made, so never made again.
    pub started: HashSet<String>,
    /// Whether the run's owner handed it over (stopping) rather than being lost.
    pub handed_over: bool,
    /// How long the run had been waiting for its caller when it was taken over.
    pub waited: std::time::Duration,
}

impl Resume {
    /// The round the takeover goes on with: the decided one, else the one made next.
    pub fn position(&self) -> u32 {
        self.decided
            .as_ref()
            .map_or(self.next_position, |round| round.thought.position)
    }
}

/// Rebuilds a run from its `thoughts` (any order) and `events` (in `seq` order).
pub fn rebuild(mut thoughts: Vec<Thought>, events: &[EventEnvelope]) -> Resumption {
    thoughts.sort_by_key(|thought| thought.position);
    let mut state = RunState::default();
    let mut decided = None;
    let mut cut = None;
    let mut next_position = 1;
    for thought in thoughts {
        let answered_calls = !thought.tool_calls.is_empty()
            && thought.tool_calls.iter().all(|c| c.observation.is_some());
        if answered_calls {
            next_position = thought.position + 1;
            state.restore_round(thought);
            continue;
        }
        if !thought.tool_calls.is_empty() && thought.usage.is_some() {
            next_position = thought.position + 1;
            decided = Some(state.restore(thought));
        } else {
            next_position = thought.position;
            cut = Some(thought);
        }
        // Nothing after a round that did not finish was begun.
        break;
    }
    let cut_begins = cut.as_ref().and_then(|thought| {
        events.iter().position(
            |event| matches!(&event.event, RunEvent::Thought(t) if t.position == thought.position),
        )
    });
    let mut void_from = None;
    let mut void_text = String::new();
    for (index, event) in events.iter().enumerate() {
        let in_cut_round = cut_begins.is_some_and(|begins| index > begins);
        // The cut round's forming calls and kept reasoning are void with its text; the
        // model wrote them, so they count as its output.
        let (text, answer) = if let RunEvent::AnswerDelta { text } = &event.event {
            (text, true)
        } else if let RunEvent::ToolCallDelta(delta) = &event.event {
            (&delta.arguments_delta, false)
        } else if let RunEvent::ReasoningDelta { text, .. } = &event.event {
            (text, false)
        } else {
            continue;
        };
        if in_cut_round {
            void_from.get_or_insert(event.seq);
            void_text.push_str(text);
        } else if answer {
            state.restore_shown(text);
        }
    }
    let started = match &decided {
        Some(round) => started_calls(events, round.thought.position),
        None => HashSet::new(),
    };
    Resumption {
        state,
        resume: Resume {
            decided,
            cut,
            next_position,
            void_from,
            void_text,
            started,
            handed_over: false,
            waited: std::time::Duration::ZERO,
        },
        last_seq: events.last().map_or(0, |event| event.seq),
    }
}

/// The ids of the calls of round `position` announced as started.
fn started_calls(events: &[EventEnvelope], position: u32) -> HashSet<String> {
    let mut started = HashSet::new();
    for event in events {
        if let RunEvent::ToolStarted {
            position: at, call, ..
        } = &event.event
        {
            if *at == position {
                started.insert(call.id.clone());
            }
        }
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, MessageId, ToolCallRecord, Usage};

    fn call(id: &str, observation: Option<&str>) -> ToolCallRecord {
        ToolCallRecord {
            provider: "p".into(),
            id: id.into(),
            name: "lookup".into(),
            arguments: "{}".into(),
            observation: observation.map(str::to_owned),
            meta: None,
        }
    }

    fn thought(
        message: MessageId,
        position: u32,
        text: &str,
        calls: Vec<ToolCallRecord>,
    ) -> Thought {
        Thought {
            thought: text.into(),
            answer: text.into(),
            tool_calls: calls,
            usage: Some(Usage::default()),
            ..Thought::begin(message, position)
        }
    }

    struct Log {
        message: MessageId,
        events: Vec<EventEnvelope>,
    }

    impl Log {
        fn new(message: MessageId) -> Self {
            Self {
                message,
                events: Vec::new(),
            }
        }

        fn push(&mut self, event: RunEvent) {
            self.events.push(EventEnvelope {
                seq: self.events.len() as u64 + 1,
                conversation_id: ConversationId::new(),
                message_id: self.message,
                created_at: crate::domain::now(),
                event,
            });
        }

        fn delta(&mut self, text: &str) {
            self.push(RunEvent::AnswerDelta { text: text.into() });
        }
    }

    #[test]
    fn a_round_cut_mid_answer_is_made_again_and_its_text_is_void() {
        let message = MessageId::new();
        let first = thought(message, 1, "Looking", vec![call("a", Some("42"))]);
        let cut = Thought::begin(message, 2);
        let mut log = Log::new(message);
        log.push(RunEvent::Thought(Box::new(Thought::begin(message, 1))));
        log.delta("Looking");
        log.push(RunEvent::Thought(Box::new(first.clone())));
        log.push(RunEvent::Thought(Box::new(cut.clone())));
        log.delta("The ans");
        log.delta("wer is");
        let resumed = rebuild(vec![cut.clone(), first], &log.events);
        assert_eq!(resumed.last_seq, 6);
        assert_eq!(resumed.resume.next_position, 2);
        assert_eq!(resumed.resume.position(), 2);
        assert_eq!(resumed.resume.void_from, Some(5));
        assert_eq!(resumed.resume.void_text, "The answer is");
        assert_eq!(resumed.resume.cut.map(|t| t.id), Some(cut.id));
        assert!(resumed.resume.decided.is_none());
        assert_eq!(
            resumed.state.rounds().len(),
            1,
            "the finished round replays"
        );
        assert_eq!(resumed.state.answer(), "Looking");
        assert_eq!(resumed.state.iterations(), 1);
    }

    /// A call the cut round was forming is void with its text, from its first delta; a
    /// finished round's formed call is not.
    #[test]
    fn a_cut_rounds_forming_call_is_void_from_its_first_delta() {
        let message = MessageId::new();
        let first = thought(message, 1, "", vec![call("a", Some("42"))]);
        let cut = Thought::begin(message, 2);
        let forming = |position: u32, text: &str| {
            RunEvent::ToolCallDelta(Box::new(crate::domain::CallDelta {
                thought_id: first.id,
                position,
                tool_call_id: "c".into(),
                index: 0,
                name: None,
                arguments_delta: text.into(),
                truncated: false,
            }))
        };
        let mut log = Log::new(message);
        log.push(RunEvent::Thought(Box::new(Thought::begin(message, 1))));
        log.push(forming(1, "{}"));
        log.push(RunEvent::Thought(Box::new(first.clone())));
        log.push(RunEvent::Thought(Box::new(cut.clone())));
        log.push(forming(2, "{\"q\": "));
        log.delta("never");
        let resumed = rebuild(vec![cut, first], &log.events);
        assert_eq!(resumed.resume.void_from, Some(5));
        assert_eq!(resumed.resume.void_text, "{\"q\": never");
        assert_eq!(resumed.state.answer(), "");
    }

    #[test]
    fn a_decided_round_keeps_its_calls_and_knows_which_started() {
        let message = MessageId::new();
        let decided = thought(
            message,
            1,
            "",
            vec![
                call("done", Some("ok")),
                call("begun", None),
                call("new", None),
            ],
        );
        let mut log = Log::new(message);
        log.push(RunEvent::Thought(Box::new(Thought::begin(message, 1))));
        log.push(RunEvent::Thought(Box::new(decided.clone())));
        for id in ["done", "begun"] {
            log.push(RunEvent::ToolStarted {
                thought_id: decided.id,
                position: 1,
                call: Box::new(call(id, None)),
            });
        }
        let resumed = rebuild(vec![decided], &log.events);
        let resume = resumed.resume;
        assert_eq!(resume.position(), 1);
        assert_eq!(resume.next_position, 2);
        assert_eq!(resume.void_from, None);
        assert!(resume.cut.is_none());
        let round = resume.decided.expect("the decision is kept");
        assert_eq!(round.thought.tool_calls.len(), 3);
        assert_eq!(
            resume.started,
            HashSet::from(["done".to_owned(), "begun".to_owned()])
        );
    }

    #[test]
    fn a_run_cut_before_its_first_round_begins_at_the_first() {
        let message = MessageId::new();
        let mut log = Log::new(message);
        log.push(RunEvent::Retry {
            position: 1,
            attempt: 2,
            delay: 0.1,
            failure: Box::new(crate::domain::RunFailure {
                code: "llm_unavailable".into(),
                message: "busy".into(),
            }),
            provider: "p".into(),
            model: "m".into(),
        });
        let resumed = rebuild(Vec::new(), &log.events);
        assert_eq!(resumed.resume.next_position, 1);
        assert_eq!(resumed.resume.void_from, None);
        assert_eq!(resumed.last_seq, 1);
        assert_eq!(resumed.state.answer(), "");
    }
}
