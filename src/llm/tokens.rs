//! Token counting with tiktoken, so history can be cut to the model's context window.
//!
//! Counts are taken on the request exactly as it goes on the wire (see
//! [`super::openai::request_body`]): every message's role and text, tool calls' names and
//! arguments, the offered tools' JSON, and the per-message framing the chat format adds.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

use super::ChatRequest;

/// Tokens the chat format adds per message (role markers and separators).
const PER_MESSAGE: usize = 4;
/// Tokens that prime the assistant's reply.
const REPLY_PRIMING: usize = 3;
/// What an image part is counted as (a low-detail image).
const IMAGE_TOKENS: usize = 85;

/// A BPE vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// GPT-4 and GPT-3.5 era models; also the fallback for unknown families.
    #[default]
    Cl100kBase,
    /// GPT-4o, GPT-4.1, GPT-5 and the o-series.
    O200kBase,
}

impl From<crate::domain::Vocabulary> for Tokenizer {
    fn from(vocabulary: crate::domain::Vocabulary) -> Self {
        match vocabulary {
            crate::domain::Vocabulary::Cl100kBase => Self::Cl100kBase,
            crate::domain::Vocabulary::O200kBase => Self::O200kBase,
        }
    }
}

impl Tokenizer {
    /// Tokens the chat format adds per message, for estimates made without a request.
    pub const PER_MESSAGE: usize = PER_MESSAGE;

    /// The vocabulary of a model family, judged by its name, or `fallback`.
    pub fn for_model(model: &str, fallback: Option<Tokenizer>) -> Self {
        let name = model.to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "o1",
            "o3",
            "o4",
            "chatgpt-4o",
        ];
        let cl100k = ["gpt-4", "gpt-3.5", "text-embedding"];
        if o200k.iter().any(|family| name.starts_with(family)) {
            Tokenizer::O200kBase
        } else if cl100k.iter().any(|family| name.starts_with(family)) {
            Tokenizer::Cl100kBase
        } else {
            fallback.unwrap_or_default()
        }
    }

    /// The vocabulary's name, under which counts made with it are kept.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Cl100kBase => "cl100k_base",
            Tokenizer::O200kBase => "o200k_base",
        }
    }

    /// Builds this vocabulary if no count has yet, on a blocking thread: building one from
    /// its ranks holds its thread for a while (a fraction of a second in a release build,
    /// most of one in a debug build) and takes tens of MiB, so it is built only when a run
    /// first needs it, never at start and never on a runtime worker (heartbeats keep their
    /// timing). Call before counting on an async path.
    pub async fn load(self) {
        if self.loaded().load(Ordering::Acquire) {
            return;
        }
        if tokio::task::spawn_blocking(move || self.bpe())
            .await
            .is_err()
        {
            tracing::warn!(
                tokenizer = self.name(),
                "a vocabulary could not be built ahead; its first count builds it"
            );
        }
    }

    /// Builds every vocabulary on the calling thread: for tests that time deadlines, whose
    /// runs then wait for none.
    pub fn load_all() {
        for tokenizer in [Tokenizer::Cl100kBase, Tokenizer::O200kBase] {
            let _ = tokenizer.bpe();
        }
    }

    /// Whether this vocabulary was built.
    fn loaded(self) -> &'static AtomicBool {
        static LOADED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
        match self {
            Tokenizer::Cl100kBase => &LOADED[0],
            Tokenizer::O200kBase => &LOADED[1],
        }
    }

    fn bpe(self) -> &'static CoreBPE {
        let bpe = match self {
            Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton(),
        };
        self.loaded().store(true, Ordering::Release);
        bpe
    }

    /// Tokens of plain text.
    pub fn count_text(self, text: &str) -> usize {
        if text.is_empty() {
            0
        } else {
            self.bpe().encode_ordinary(text).len()
        }
    }

    /// Tokens of a request as it will be sent.
    pub fn count_request(self, request: &ChatRequest) -> usize {
        self.count_body(&super::openai::request_body(request, false))
    }

    /// Tokens of a Chat Completions request body: its messages and tools.
    pub fn count_body(self, body: &Value) -> usize {
        let messages: usize = body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, |messages| {
                messages.iter().map(|m| self.count_message(m)).sum()
            });
        let tools = body
            .get("tools")
            .map_or(0, |tools| self.count_text(&tools.to_string()));
        messages + tools + REPLY_PRIMING
    }

    fn count_message(self, message: &Value) -> usize {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let content = match message.get("content") {
            Some(Value::String(text)) => self.count_text(text),
            Some(Value::Array(parts)) => parts.iter().map(|part| self.count_part(part)).sum(),
            _ => 0,
        };
        let calls: usize = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map_or(0, |calls| {
                calls
                    .iter()
                    .map(|call| {
                        let function = &call["function"];
                        self.count_text(function["name"].as_str().unwrap_or_default())
                            + self.count_text(function["arguments"].as_str().unwrap_or_default())
                            + PER_MESSAGE
                    })
                    .sum()
            });
        let call_id = message
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map_or(0, |id| self.count_text(id));
        PER_MESSAGE + self.count_text(role) + content + calls + call_id
    }

    fn count_part(self, part: &Value) -> usize {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => self.count_text(part["text"].as_str().unwrap_or_default()),
            _ => IMAGE_TOKENS,
        }
    }

    /// A cheap bound that is never below the true count: every token spans at least one
    /// byte, so a request whose bytes fit needs no tokenizing.
    pub fn upper_bound(request: &ChatRequest) -> usize {
        let body = super::openai::request_body(request, false);
        let messages = body["messages"].as_array().map_or(0, Vec::len);
        body.to_string().len()
            + (messages + 1) * (PER_MESSAGE * 2)
            + REPLY_PRIMING
            + messages * IMAGE_TOKENS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_vocabulary_is_built_once_asked_for_and_counts_then() {
        Tokenizer::O200kBase.load().await;
        assert!(Tokenizer::O200kBase.loaded().load(Ordering::Acquire));
        assert_eq!(Tokenizer::O200kBase.count_text("hello world"), 2);
    }
    use crate::llm::ChatMessage;

    #[test]
    fn families_pick_their_vocabulary() {
        assert_eq!(
            Tokenizer::for_model("gpt-4o-mini", None),
            Tokenizer::O200kBase
        );
        assert_eq!(
            Tokenizer::for_model("gpt-4-turbo", None),
            Tokenizer::Cl100kBase
        );
        assert_eq!(
            Tokenizer::for_model("qwen2.5", Some(Tokenizer::O200kBase)),
            Tokenizer::O200kBase
        );
        assert_eq!(Tokenizer::for_model("llama3", None), Tokenizer::Cl100kBase);
    }

    #[test]
    fn counts_grow_with_text_and_the_bound_holds() {
        let request = |text: &str| ChatRequest {
            model: "gpt-4o".into(),
            messages: vec![
                ChatMessage::System {
                    content: "Be brief.".into(),
                },
                ChatMessage::user_text(text),
            ],
            ..ChatRequest::default()
        };
        let short = Tokenizer::O200kBase.count_request(&request("hi"));
        let long = Tokenizer::O200kBase.count_request(&request(&"hello world ".repeat(50)));
        assert!(long > short + 90, "{short} {long}");
        assert!(Tokenizer::upper_bound(&request("hi")) >= short);
        assert_eq!(Tokenizer::O200kBase.count_text("hello world"), 2);
    }
}
