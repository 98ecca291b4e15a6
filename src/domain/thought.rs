//! Thought records: one per LLM round, holding what the model said and the tools it called.

use chrono::{DateTime, Utc};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::{MessageId, ThoughtId, Usage};

/// How one tool call went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInvokeMeta {
    /// Seconds the tool took.
    pub time_cost: f64,
    /// The failure the model was told about, if any.
    pub error: Option<String>,
    /// Which tool ran with which preset parameters.
    pub tool_config: serde_json::Map<String, serde_json::Value>,
    /// What a sub-agent's run used (its model calls and its own children's), counted in
    /// this run's usage too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::Usage>,
    /// Tool calls a sub-agent's run made (its own children's included), counted against
    /// this run's tool-call budget too.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// How the observation of a call that was not made begins.
pub const NOT_RUN: &str = "not run:";

/// How a tool call ended, as metrics and spans tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The tool answered.
    Success,
    /// The tool ran and failed.
    Error,
    /// The tool did not finish in time.
    Timeout,
    /// The arguments did not fit the tool's schema.
    InvalidArguments,
    /// The run offers no such tool.
    UnknownTool,
    /// The call needed approval and was declined.
    Declined,
    /// The round held more calls than one round may run.
    NotRun,
    /// The call was under way when its run's owner was lost; it is not made again (the
    /// tool may not be idempotent), so whether it took effect is unknown.
    OutcomeUnknown,
    /// A newer run of the conversation stopped the run before the call answered.
    Interrupted,
}

impl CallOutcome {
    /// The outcome's name in metrics and spans.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::InvalidArguments => "invalid_arguments",
            Self::UnknownTool => "unknown_tool",
            Self::Declined => "declined",
            Self::NotRun => "not_run",
            Self::OutcomeUnknown => "tool_outcome_unknown",
            Self::Interrupted => "interrupted",
        }
    }
}

/// A passage a tool retrieved, kept as evidence for the answer: where it came from and
/// how well it matched. Knowledge tools give them; an API or MCP tool whose answer is an
/// object with a `records` list of `{content, title, score, metadata}` gives them too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetrieverResource {
    /// 1-based, in the order the model saw the passages within the message.
    pub position: u32,
    /// The provider of the tool that retrieved it.
    pub provider: String,
    /// The call that retrieved it.
    pub tool_call_id: String,
    /// The passage.
    pub content: String,
    /// Its title.
    pub title: String,
    /// The document or location it comes from (`metadata.source`, `.path`,
    /// `.document_name` or `.url` of a record).
    pub source: String,
    /// How well it matched, as the knowledge base scored it.
    pub score: Option<f64>,
}

/// One tool call of a round. Calls are kept in the order the model made them and keyed by
/// their call id, so two calls of the same tool keep both results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Call id from the model, or minted when it gave none.
    pub id: String,
    /// Tool name as the model wrote it.
    pub name: String,
    /// Provider of the tool; empty when no such tool exists.
    pub provider: String,
    /// Arguments exactly as the model wrote them.
    pub arguments: String,
    /// The tool's result as the model sees it; `None` until the tool has run.
    pub observation: Option<String>,
    /// Timing and error of the call; `None` until the tool has run.
    pub meta: Option<ToolInvokeMeta>,
}

/// One round of the agent loop.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "ThoughtWire")]
pub struct Thought {
    /// The record's id.
    pub id: ThoughtId,
    /// The message the round belongs to.
    pub message_id: MessageId,
    /// 1-based, continuous within the message.
    pub position: u32,
    /// What the model said in this round (stored once).
    pub thought: String,
    /// Tool calls the model made in this round.
    pub tool_calls: Vec<ToolCallRecord>,
    /// The round's contribution to the answer. Stored once when it equals `thought` (as
    /// for function calling): see the `Serialize` impl.
    pub answer: String,
    /// Files the round's tools produced.
    pub file_ids: Vec<String>,
    /// Passages the round's tools retrieved, in the order the model saw them.
    pub retriever_resources: Vec<RetrieverResource>,
    /// The round's LLM usage; `None` until the model has answered.
    pub usage: Option<Usage>,
    /// Provider of the model that answered the round (a fallback's when the primary failed).
    pub provider: String,
    /// The model that answered the round.
    #[serde(default)]
    pub model: String,
    /// The model's reasoning in the round, kept when its agent asks to keep it.
    pub reasoning: String,
    /// The blocks its provider needs back to go on with the round's calls; sealed at
    /// rest, never shown.
    pub provider_reasoning: super::ProviderReasoning,
    /// Texts steering runs added before this round's model call, as they arrived.
    pub steered: Vec<super::SteeredText>,
    /// When the round began.
    pub created_at: DateTime<Utc>,
}

/// The most text one thought carries where a client reads it (an event, a page of
/// `ListThoughts`), so each stays below the 4 MiB a default gRPC client receives.
pub const SHOWN_TEXT_LIMIT: usize = 3 * 1024 * 1024 + 512 * 1024;

impl Thought {
    /// About the bytes the thought takes where a client reads it: its texts, and for each
    /// call and passage its fields and framing.
    pub fn text_len(&self) -> usize {
        let calls: usize = self.tool_calls.iter().map(ToolCallRecord::shown_len).sum();
        let passages: usize = self
            .retriever_resources
            .iter()
            .map(|r| {
                r.content.len()
                    + r.title.len()
                    + r.source.len()
                    + r.provider.len()
                    + PASSAGE_OVERHEAD
            })
            .sum();
        let steered: usize = self.steered.iter().map(|s| s.text.len() + 48).sum();
        self.thought.len()
            + steered
            + self.answer.len()
            + self.reasoning.len()
            + calls
            + passages
            + self.file_ids.len() * 48
    }

    /// The thought as a client is shown it: whole when it fits `limit` bytes; otherwise cut
    /// in this order until it does, each cut with a marker giving the original size: the
    /// longest observations and passages (all to one length), the calls' error texts, the
    /// longest arguments, the kept reasoning, the thought text, and last (a round of thousands of calls) the
    /// calls past those that fit, which a note in the thought text counts. The stored
    /// record stays whole.
    pub fn fitted(&self, limit: usize) -> std::borrow::Cow<'_, Thought> {
        if self.text_len() <= limit {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut copy = self.clone();
        let excess = copy.text_len() - limit;
        let mut texts: Vec<&mut String> = Vec::new();
        for call in &mut copy.tool_calls {
            if let Some(observation) = call.observation.as_mut() {
                texts.push(observation);
            }
        }
        for passage in &mut copy.retriever_resources {
            texts.push(&mut passage.content);
        }
        level(texts, excess);
        if copy.text_len() > limit {
            for call in &mut copy.tool_calls {
                if let Some(error) = call.meta.as_mut().and_then(|m| m.error.as_mut()) {
                    if error.len() > SHORT_TEXT + MARKER_ROOM {
                        cut(error, SHORT_TEXT);
                    }
                }
            }
        }
        if copy.text_len() > limit {
            let excess = copy.text_len() - limit;
            level(
                copy.tool_calls
                    .iter_mut()
                    .map(|c| &mut c.arguments)
                    .collect(),
                excess,
            );
        }
        let over = copy.text_len().saturating_sub(limit);
        shorten(&mut copy.reasoning, over);
        let over = copy.text_len().saturating_sub(limit);
        shorten(&mut copy.thought, over);
        if copy.text_len() > limit {
            let total = copy.tool_calls.len();
            let mut size = copy.text_len() + MARKER_ROOM;
            while size > limit {
                let Some(call) = copy.tool_calls.pop() else {
                    break;
                };
                size = size.saturating_sub(call.shown_len());
            }
            copy.thought.push_str(&format!(
                "\n[{} more tool calls of this round are not shown, to fit one message]",
                total - copy.tool_calls.len()
            ));
        }
        std::borrow::Cow::Owned(copy)
    }
}

impl ToolCallRecord {
    /// The tool calls this call counts for against a budget: none when it was not made,
    /// else itself and, for a sub-agent, the calls its run made.
    pub fn calls_made(&self) -> u32 {
        let meta = self.meta.as_ref();
        let not_run = meta
            .and_then(|meta| meta.error.as_deref())
            .is_some_and(|error| error.starts_with(NOT_RUN));
        match not_run {
            true => 0,
            false => 1 + meta.map_or(0, |meta| meta.tool_calls),
        }
    }

    /// The usage a sub-agent call carries once its child ended (other calls carry none).
    pub fn sub_agent_usage(&self) -> Option<&Usage> {
        self.meta.as_ref().and_then(|meta| meta.usage.as_ref())
    }

    /// About the bytes the call takes where a client reads it.
    fn shown_len(&self) -> usize {
        let meta = self
            .meta
            .as_ref()
            .map_or(0, |m| m.error.as_ref().map_or(0, String::len) + 32);
        self.id.len()
            + self.name.len()
            + self.provider.len()
            + self.arguments.len()
            + self.observation.as_ref().map_or(0, String::len)
            + meta
            + CALL_OVERHEAD
    }

    /// The call as a client is shown it: its observation cut (with a marker) when the call
    /// would not fit `limit` bytes.
    pub fn fitted(mut self, limit: usize) -> Self {
        let rest = self.shown_len() - self.observation.as_ref().map_or(0, String::len);
        let keep = limit.saturating_sub(rest + MARKER_ROOM);
        if let Some(observation) = self.observation.as_mut() {
            if observation.len() > keep {
                cut(observation, keep);
            }
        }
        self
    }
}

/// Bytes a cut marker may take.
const MARKER_ROOM: usize = 96;
/// Framing and small fields of one call, and of one passage, in an encoded message.
const CALL_OVERHEAD: usize = 48;
const PASSAGE_OVERHEAD: usize = 40;
/// What an error text is cut to once a thought must shrink past its observations.
const SHORT_TEXT: usize = 256;

/// Cuts the longest of `texts`, all to one length, so that (markers included) their sum
/// shrinks by at least `excess` bytes, as far as cutting them can.
fn level(texts: Vec<&mut String>, excess: usize) {
    let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
    let room = lengths.iter().sum::<usize>().saturating_sub(excess);
    let mut cap = water_level(&lengths, room);
    // Each cut adds a marker: lower the level until the markers fit as well.
    loop {
        let cuts = lengths.iter().filter(|l| **l > cap).count();
        let after = lengths.iter().map(|l| (*l).min(cap)).sum::<usize>() + cuts * MARKER_ROOM;
        if after <= room || cap == 0 {
            break;
        }
        cap = cap.saturating_sub((after - room).div_ceil(cuts.max(1)));
    }
    for text in texts {
        if text.len() > cap {
            cut(text, cap);
        }
    }
}

/// The largest length `cap` such that the lengths, each limited to `cap`, sum to at most
/// `room`: cutting only the longest ones, all to the same length.
fn water_level(lengths: &[usize], room: usize) -> usize {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let mut used = 0usize;
    for (index, &length) in sorted.iter().enumerate() {
        let rest = sorted.len() - index;
        if used + length * rest > room {
            return (room - used) / rest;
        }
        used += length;
    }
    usize::MAX
}

/// Cuts `over` bytes (and a marker's room) off `text` when anything is over.
fn shorten(text: &mut String, over: usize) {
    if over == 0 {
        return;
    }
    let keep = text.len().saturating_sub(over + MARKER_ROOM);
    if keep < text.len() {
        cut(text, keep);
    }
}

/// Cuts `text` to at most `keep` bytes (at a character boundary) and says so.
fn cut(text: &mut String, keep: usize) {
    let original = text.len();
    let mut keep = keep.min(original);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(&format!(
        "\n[cut from {original} bytes to fit one message; the stored record is whole]"
    ));
}

/// The stored form of a [`Thought`]: `answer_is_thought` stands for an answer equal to the
/// thought text, so a round's text is written once, not twice.
#[derive(Deserialize)]
struct ThoughtWire {
    id: ThoughtId,
    message_id: MessageId,
    position: u32,
    thought: String,
    tool_calls: Vec<ToolCallRecord>,
    #[serde(default)]
    answer: String,
    #[serde(default)]
    answer_is_thought: bool,
    file_ids: Vec<String>,
    #[serde(default)]
    retriever_resources: Vec<RetrieverResource>,
    usage: Option<Usage>,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    reasoning: String,
    #[serde(default)]
    sealed_reasoning: Option<String>,
    #[serde(default)]
    steered: Vec<super::SteeredText>,
    created_at: DateTime<Utc>,
}

impl From<ThoughtWire> for Thought {
    fn from(wire: ThoughtWire) -> Self {
        let answer = if wire.answer_is_thought {
            wire.thought.clone()
        } else {
            wire.answer
        };
        Self {
            id: wire.id,
            message_id: wire.message_id,
            position: wire.position,
            thought: wire.thought,
            tool_calls: wire.tool_calls,
            answer,
            file_ids: wire.file_ids,
            retriever_resources: wire.retriever_resources,
            usage: wire.usage,
            provider: wire.provider,
            model: wire.model,
            reasoning: wire.reasoning,
            provider_reasoning: wire.sealed_reasoning.map_or(
                super::ProviderReasoning::None,
                super::ProviderReasoning::Sealed,
            ),
            steered: wire.steered,
            created_at: wire.created_at,
        }
    }
}

impl Serialize for Thought {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let same = !self.answer.is_empty() && self.answer == self.thought;
        let mut out = serializer.serialize_struct("Thought", 13)?;
        out.serialize_field("id", &self.id)?;
        out.serialize_field("message_id", &self.message_id)?;
        out.serialize_field("position", &self.position)?;
        out.serialize_field("thought", &self.thought)?;
        out.serialize_field("tool_calls", &self.tool_calls)?;
        if same {
            out.serialize_field("answer_is_thought", &true)?;
        } else {
            out.serialize_field("answer", &self.answer)?;
        }
        out.serialize_field("file_ids", &self.file_ids)?;
        if !self.retriever_resources.is_empty() {
            out.serialize_field("retriever_resources", &self.retriever_resources)?;
        }
        out.serialize_field("usage", &self.usage)?;
        out.serialize_field("provider", &self.provider)?;
        out.serialize_field("model", &self.model)?;
        if !self.reasoning.is_empty() {
            out.serialize_field("reasoning", &self.reasoning)?;
        }
        // Only ever sealed: open blocks are the run's, not the record's.
        if let Some(sealed) = self.provider_reasoning.sealed() {
            out.serialize_field("sealed_reasoning", sealed)?;
        }
        if !self.steered.is_empty() {
            out.serialize_field("steered", &self.steered)?;
        }
        out.serialize_field("created_at", &self.created_at)?;
        out.end()
    }
}

impl Thought {
    /// An empty record for round `position`, written before the model is called.
    pub fn begin(message_id: MessageId, position: u32) -> Self {
        Self {
            id: ThoughtId::new(),
            message_id,
            position,
            thought: String::new(),
            tool_calls: Vec::new(),
            answer: String::new(),
            file_ids: Vec::new(),
            retriever_resources: Vec::new(),
            usage: None,
            provider: String::new(),
            model: String::new(),
            reasoning: String::new(),
            provider_reasoning: super::ProviderReasoning::None,
            steered: Vec::new(),
            created_at: super::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_equal_to_the_thought_is_stored_once_and_read_back_whole() {
        let mut thought = Thought::begin(MessageId::new(), 1);
        thought.thought = "The same text".into();
        thought.answer = "The same text".into();
        let json = serde_json::to_string(&thought).unwrap();
        assert_eq!(json.matches("The same text").count(), 1, "{json}");
        assert_eq!(serde_json::from_str::<Thought>(&json).unwrap(), thought);
        thought.answer = "Different".into();
        let json = serde_json::to_string(&thought).unwrap();
        assert_eq!(serde_json::from_str::<Thought>(&json).unwrap(), thought);
        let old = json.replace("\"provider\":\"\",\"model\":\"\",", "");
        assert_eq!(
            serde_json::from_str::<Thought>(&old).unwrap(),
            thought,
            "records of earlier versions"
        );
    }

    /// A round's signed thinking is written only sealed: open blocks never reach a record
    /// (or an event), sealed ones read back as they were.
    #[test]
    fn provider_reasoning_is_never_written_open() {
        let mut thought = Thought::begin(MessageId::new(), 1);
        thought.provider_reasoning =
            super::super::ProviderReasoning::Open(vec![super::super::Reasoning::Thinking {
                thinking: "secret plan".into(),
                signature: "sig".into(),
            }]);
        let json = serde_json::to_string(&thought).unwrap();
        assert!(!json.contains("secret plan"), "{json}");
        thought.provider_reasoning = super::super::ProviderReasoning::Sealed("c2VhbGVk".into());
        let json = serde_json::to_string(&thought).unwrap();
        assert_eq!(serde_json::from_str::<Thought>(&json).unwrap(), thought);
    }

    #[test]
    fn a_thought_too_large_to_show_has_its_longest_observations_cut_to_one_length() {
        let mut thought = Thought::begin(MessageId::new(), 1);
        thought.thought = "Looking.".into();
        for (index, size) in [1_100_000, 1_100_000, 50, 900_000].into_iter().enumerate() {
            thought.tool_calls.push(ToolCallRecord {
                id: format!("c{index}"),
                name: "t".into(),
                provider: "p".into(),
                arguments: "{}".into(),
                observation: Some("o".repeat(size)),
                meta: None,
            });
        }
        assert!(matches!(
            thought.fitted(4_000_000),
            std::borrow::Cow::Borrowed(_)
        ));
        let shown = thought.fitted(1_000_000);
        assert!(shown.text_len() <= 1_000_000, "{}", shown.text_len());
        let lengths: Vec<usize> = shown
            .tool_calls
            .iter()
            .map(|c| c.observation.as_ref().unwrap().len())
            .collect();
        assert_eq!(lengths[2], 50, "short ones stay whole");
        assert_eq!(lengths[0], lengths[1]);
        assert_eq!(
            lengths[0],
            lengths[3] + 1,
            "the long ones share the room (one more digit in the marker)"
        );
        let first = shown.tool_calls[0].observation.as_ref().unwrap();
        assert!(first
            .ends_with("[cut from 1100000 bytes to fit one message; the stored record is whole]"));
        assert_eq!(shown.thought, "Looking.");
    }
}
