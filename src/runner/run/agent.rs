//! The agent a run drives: its model and fallbacks, strategy, tools, history and output
//! schema, resolved before its message was written.

use std::sync::Arc;

use super::output::Output;
use crate::llm::ResolvedModel;
use crate::runner::history::History;
use crate::runner::spec::ReasoningMode;
use crate::runner::strategy::Strategy;
use crate::tools::ToolSet;

/// The agent a run drives, resolved before its message was written.
pub struct Agent {
    /// The model and its client.
    pub model: ResolvedModel,
    /// Models tried in order when `model` fails after its retries.
    pub fallbacks: Vec<ResolvedModel>,
    /// How prompts are built and turns read.
    pub strategy: Box<dyn Strategy>,
    /// The tools the model may call.
    pub tools: Arc<ToolSet>,
    /// Earlier turns of the conversation, oldest first, and what was left out unread.
    pub history: History,
    /// The schema the final answer must meet, if any.
    pub output: Option<Output>,
    /// Whether the model's reasoning is shown, and kept.
    pub reasoning: ReasoningMode,
}

impl Agent {
    /// The models a call may go to, in order: the primary, then the fallbacks.
    pub fn candidates(&self) -> impl Iterator<Item = &ResolvedModel> {
        std::iter::once(&self.model).chain(&self.fallbacks)
    }

    /// Candidate `index` (0 is the primary; past the end, the last fallback).
    pub fn candidate(&self, index: usize) -> &ResolvedModel {
        match index.checked_sub(1) {
            None => &self.model,
            Some(fallback) => self
                .fallbacks
                .get(fallback)
                .or(self.fallbacks.last())
                .unwrap_or(&self.model),
        }
    }
}
