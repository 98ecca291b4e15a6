//! What one run knows between its I/O: usage, LLM calls made, finished rounds, the round in
//! progress and the answer as it is assembled. Nothing here reads or writes anything; the
//! run task feeds it what happened and records what it returns.
//!
//! The answer rules live here, once for both strategies: each round's text is shown as it
//! arrives, a round's first text (and an answer shown late, as a ReAct final answer is)
//! starts on a new line after earlier text, and the message's answer is the rounds' answers
//! joined by the same rule. For function calling that makes the answer exactly the text
//! the deltas showed.

use crate::domain::{
    MessageId, ProviderReasoning, RetrieverResource, SteeredText, Thought, TokenUsage,
    ToolCallRecord, Usage,
};
use crate::llm::{ChatRequest, Reasoning, Tokenizer, ToolCallRequest, TurnEnd};
use crate::runner::strategy::{ModelStep, RoundRecord};
use crate::tools::Invocation;

/// The state of one run.
#[derive(Debug, Default)]
pub struct RunState {
    /// Usage summed over the rounds so far.
    usage: Usage,
    /// LLM calls made (or being made).
    iterations: u32,
    /// Finished tool rounds, as later prompts replay them.
    rounds: Vec<RoundRecord>,
    /// Every answer delta sent so far.
    shown: String,
    /// The answers of the finished rounds, joined.
    answer: String,
    /// The round a failure or cancel interrupted, kept so the run's end can record it.
    unfinished: Option<Round>,
    /// Bytes the model wrote so far (text and tool calls), against the run's limit.
    written: usize,
    /// Passages the finished rounds' tools retrieved, in the order the model saw them.
    resources: Vec<RetrieverResource>,
    /// The answer of the last finished round.
    last_answer: String,
    /// The answer as the document the output schema asked for, with its text.
    document: Option<(serde_json::Value, String)>,
    /// Why the answer does not meet the output schema (kept as text).
    output_invalid: Option<String>,
    /// Sub-agent calls whose usage is counted, and their tokens.
    children: std::collections::HashSet<String>,
    child_tokens: u64,
    /// Tool calls the finished rounds made, their sub-agents' own included.
    tool_calls: u32,
    /// The steers the run took, so none is taken twice.
    steers: Vec<MessageId>,
    /// Steers taken for the round about to begin: its thought records them.
    joining: Vec<SteeredText>,
}

impl RunState {
    /// Starts round `position`: its LLM call counts from now on.
    pub fn begin_round(&mut self, message_id: MessageId, position: u32) -> Round {
        self.iterations = position;
        let mut thought = Thought::begin(message_id, position);
        thought.steered = std::mem::take(&mut self.joining);
        Round {
            thought,
            shown_any: false,
            resources_before: self.resources.len(),
        }
    }

    /// The text of a delta that shows `text` of `round`, or `None` when there is nothing to
    /// show. `answer` says whether the text is answer rather than thought.
    pub fn show(&mut self, round: &mut Round, text: &str, answer: bool) -> Option<String> {
        if text.is_empty() {
            return None;
        }
        round.thought.thought.push_str(text);
        if answer {
            round.thought.answer.push_str(text);
        }
        let starts_round = !std::mem::replace(&mut round.shown_any, true);
        Some(self.delta(text, starts_round))
    }

    /// The text of a delta that shows `text` as a paragraph of its own (an answer the user
    /// has not seen as it was written), or `None` when it is empty.
    pub fn show_paragraph(&mut self, text: &str) -> Option<String> {
        (!text.is_empty()).then(|| self.delta(text, true))
    }

    fn delta(&mut self, text: &str, new_paragraph: bool) -> String {
        let separate = new_paragraph && !self.shown.is_empty() && !self.shown.ends_with('\n');
        let piece = if separate {
            format!("\n{text}")
        } else {
            text.to_owned()
        };
        self.shown.push_str(&piece);
        piece
    }

    /// Counts `bytes` more that the model wrote.
    pub fn add_written(&mut self, bytes: usize) {
        self.written = self.written.saturating_add(bytes);
    }

    /// How much more the model may write within `limit`.
    pub fn output_room(&self, limit: usize) -> usize {
        limit.saturating_sub(self.written)
    }

    /// Adds a model call's usage (one attempt's) to the run and to its round; a round's
    /// latency is the sum of its attempts'.
    pub fn add_usage(&mut self, round: &mut Round, usage: Usage) {
        self.usage.add(&usage);
        match &mut round.thought.usage {
            Some(total) => {
                total.add(&usage);
                total.latency += usage.latency;
            }
            None => round.thought.usage = Some(usage),
        }
    }

    /// Ends `round`: its answer joins the message's, and a round that called tools is kept
    /// for the prompts of later rounds.
    pub fn close_round(&mut self, round: Round) {
        append_paragraph(&mut self.answer, &round.thought.answer);
        self.last_answer.clone_from(&round.thought.answer);
        self.resources
            .extend(round.thought.retriever_resources.iter().cloned());
        let made: u32 = round
            .thought
            .tool_calls
            .iter()
            .map(ToolCallRecord::calls_made)
            .sum();
        self.tool_calls = self.tool_calls.saturating_add(made);
        if !round.thought.tool_calls.is_empty() {
            self.rounds.push(round.record());
        }
    }

    /// Takes a round a lost owner finished (its thought as stored) as one of this run's.
    pub fn restore_round(&mut self, thought: Thought) {
        let round = self.restore(thought);
        self.close_round(round);
    }

    /// Takes steers' texts as user turns after the last finished round: every later prompt
    /// has them, and the round begun next records them. A steer taken already is skipped.
    pub fn join_steers(&mut self, steers: Vec<SteeredText>) {
        for steer in steers {
            if self.steers.contains(&steer.message_id) {
                continue;
            }
            self.steers.push(steer.message_id);
            if let Some(before) = self.rounds.last_mut() {
                before.steered.push(steer.text.clone());
            }
            self.joining.push(steer);
        }
    }

    /// Whether the run took the steer `id` already.
    pub fn took_steer(&self, id: MessageId) -> bool {
        self.steers.contains(&id)
    }

    /// A round a lost owner made durable (its usage counted), as a round in progress here.
    pub fn restore(&mut self, thought: Thought) -> Round {
        self.iterations = thought.position;
        for steer in &thought.steered {
            self.steers.push(steer.message_id);
            if let Some(before) = self.rounds.last_mut() {
                before.steered.push(steer.text.clone());
            }
        }
        if let Some(usage) = &thought.usage {
            self.usage.add(usage);
        }
        let calls: usize = thought.tool_calls.iter().map(|c| c.arguments.len()).sum();
        self.add_written(thought.thought.len() + calls);
        let round = Round {
            shown_any: !thought.answer.is_empty(),
            resources_before: self.resources.len(),
            thought,
        };
        self.count_children(&round);
        round
    }

    /// Adds the usage of the round's sub-agent calls that ended to the run's, each once.
    pub fn count_children(&mut self, round: &Round) {
        for call in &round.thought.tool_calls {
            let Some(usage) = call.sub_agent_usage() else {
                continue;
            };
            if self.children.insert(call.id.clone()) {
                self.usage.add(usage);
                self.child_tokens += usage.tokens.total_tokens;
            }
        }
    }

    /// Tokens of sub-agents' model calls in the run's usage: counted by the sub-agents
    /// themselves, not again by this run.
    pub fn child_tokens(&self) -> u64 {
        self.child_tokens
    }

    /// Adds the estimated usage of a model call cut with its owner, which no round keeps.
    pub fn add_cut_usage(&mut self, usage: &Usage) {
        self.usage.add(usage);
    }

    /// Counts `text` as shown before the run was taken over.
    pub fn restore_shown(&mut self, text: &str) {
        self.shown.push_str(text);
    }

    /// Keeps the round a failure or cancel interrupted for the run's end.
    pub fn interrupt(&mut self, round: Round) {
        self.unfinished = Some(round);
    }

    /// The interrupted round, if any.
    pub fn unfinished(&self) -> Option<&Round> {
        self.unfinished.as_ref()
    }

    /// The interrupted round, to answer what it left open.
    pub fn unfinished_mut(&mut self) -> Option<&mut Round> {
        self.unfinished.as_mut()
    }

    /// The finished tool rounds, oldest first.
    pub fn rounds(&self) -> &[RoundRecord] {
        &self.rounds
    }

    /// LLM calls made.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// The answer so far, an interrupted round's part included.
    pub fn answer(&self) -> String {
        let mut answer = self.answer.clone();
        if let Some(round) = &self.unfinished {
            append_paragraph(&mut answer, &round.thought.answer);
        }
        answer
    }

    /// The answer of the last finished round: what an output schema checks.
    pub fn last_answer(&self) -> &str {
        &self.last_answer
    }

    /// The answer met the output schema as `document`; `text` becomes the whole answer.
    pub fn set_document(&mut self, document: serde_json::Value, text: String) {
        self.document = Some((document, text));
    }

    /// The answer did not meet the output schema, for `problems`; it stays text.
    pub fn set_output_invalid(&mut self, problems: String) {
        self.output_invalid = Some(problems);
    }

    /// The answer's document and its text, once it met the output schema.
    pub fn document(&self) -> Option<&(serde_json::Value, String)> {
        self.document.as_ref()
    }

    /// Why the answer does not meet the output schema, if it does not.
    pub fn output_invalid(&self) -> Option<&str> {
        self.output_invalid.as_deref()
    }

    /// Passages retrieved so far, an interrupted round's included.
    pub fn resources(&self) -> Vec<RetrieverResource> {
        let unfinished = self
            .unfinished
            .iter()
            .flat_map(|round| round.thought.retriever_resources.iter());
        self.resources.iter().chain(unfinished).cloned().collect()
    }

    /// Tool calls the finished rounds made, their sub-agents' own included.
    pub fn tool_calls(&self) -> u32 {
        self.tool_calls
    }

    /// Tokens and cost so far: every model call's, the ended sub-agents' included.
    pub fn spent_usage(&self) -> &Usage {
        &self.usage
    }

    /// Usage over every round, with the run's wall-clock `latency` in seconds.
    pub fn usage(&self, latency: f64) -> Usage {
        Usage {
            latency,
            ..self.usage.clone()
        }
    }
}

/// `text` after `buffer`, on a new line unless `buffer` is empty or already ends with one.
fn append_paragraph(buffer: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !buffer.is_empty() && !buffer.ends_with('\n') {
        buffer.push('\n');
    }
    buffer.push_str(text);
}

/// The round in progress: its thought record as it stands.
#[derive(Debug, Clone)]
pub struct Round {
    /// The record, stored and announced as it changes.
    pub thought: Thought,
    /// Whether any of the round's text was shown yet.
    shown_any: bool,
    /// Passages the run's earlier rounds retrieved: where this round's numbering starts.
    resources_before: usize,
}

impl Round {
    /// Whether any of the round's text was shown to the user: from then on a failed call
    /// cannot be tried again without showing a second version.
    pub fn has_shown(&self) -> bool {
        self.shown_any
    }

    /// Keeps the model's reasoning blocks with the round (sealed once stored), to hand
    /// back with its calls, here or on a replica that takes the run over.
    pub fn keep_reasoning(&mut self, reasoning: Vec<Reasoning>) {
        self.thought.provider_reasoning = match reasoning.is_empty() {
            true => ProviderReasoning::None,
            false => ProviderReasoning::Open(reasoning),
        };
    }

    /// Records which model is answering the round.
    pub fn served_by(&mut self, provider: &str, model: &str) {
        provider.clone_into(&mut self.thought.provider);
        model.clone_into(&mut self.thought.model);
    }

    /// Takes the model's decision: the thought's text, answer and calls become the step's.
    /// `provider_of` names the provider of each called tool (empty for unknown tools).
    pub fn decide(&mut self, step: ModelStep, provider_of: impl Fn(&str) -> String) {
        self.thought.thought = step.thought;
        self.thought.answer = step.answer;
        self.thought.tool_calls = step
            .calls
            .into_iter()
            .map(|call| ToolCallRecord {
                provider: provider_of(&call.name),
                id: call.id,
                name: call.name,
                arguments: call.arguments,
                observation: None,
                meta: None,
            })
            .collect();
    }

    /// Records the result of the call at `index` with the files it produced; returns the
    /// call as it now stands.
    pub fn observe(
        &mut self,
        index: usize,
        invocation: Invocation,
        file_ids: impl IntoIterator<Item = String>,
    ) -> Option<ToolCallRecord> {
        let call = self.thought.tool_calls.get_mut(index)?;
        call.observation = Some(invocation.observation);
        call.meta = Some(invocation.meta);
        let call = call.clone();
        self.thought.file_ids.extend(file_ids);
        let provider = invocation.provider;
        self.thought
            .retriever_resources
            .extend(
                invocation
                    .resources
                    .into_iter()
                    .map(|resource| RetrieverResource {
                        provider: provider.clone(),
                        tool_call_id: call.id.clone(),
                        ..resource
                    }),
            );
        self.number_resources();
        Some(call)
    }

    /// Orders the round's passages as the model reads them (by call, then as each tool
    /// gave them: results arrive in any order, prompts list them in call order) and numbers
    /// them after the run's earlier ones.
    fn number_resources(&mut self) {
        if self.thought.retriever_resources.is_empty() {
            return;
        }
        let order: std::collections::HashMap<&str, usize> = self
            .thought
            .tool_calls
            .iter()
            .enumerate()
            .rev()
            .map(|(index, call)| (call.id.as_str(), index))
            .collect();
        let mut resources = std::mem::take(&mut self.thought.retriever_resources);
        resources.sort_by_key(|resource| order.get(resource.tool_call_id.as_str()).copied());
        self.thought.retriever_resources = resources;
        for (offset, resource) in self.thought.retriever_resources.iter_mut().enumerate() {
            resource.position =
                u32::try_from(self.resources_before + offset + 1).unwrap_or(u32::MAX);
        }
    }

    /// The round as later prompts replay it: its text, and each call with its result.
    fn record(&self) -> RoundRecord {
        RoundRecord {
            text: self.thought.thought.clone(),
            calls: self
                .thought
                .tool_calls
                .iter()
                .map(|call| {
                    let request = ToolCallRequest {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    };
                    (request, call.observation.clone().unwrap_or_default())
                })
                .collect(),
            reasoning: self.thought.provider_reasoning.blocks().to_vec(),
            steered: Vec::new(),
        }
    }
}

/// What one model call produced, for its usage record.
#[derive(Debug, Default)]
pub struct Tally {
    /// The provider accepted the request and began to answer, so its tokens count.
    pub answered: bool,
    /// Counts the provider reported.
    pub reported: Option<TokenUsage>,
    /// Everything the model wrote, hidden parts and tool calls included.
    pub written: String,
}

impl Tally {
    /// Adds the turn's tool calls to what the model wrote.
    pub fn add_calls(&mut self, end: &TurnEnd) {
        for call in &end.tool_calls {
            self.written.push_str(&call.name);
            self.written.push_str(&call.arguments);
        }
    }

    /// Whether [`Self::tokens`] counts (the provider answered without reporting usage).
    pub fn counts(&self) -> bool {
        self.answered && self.reported.is_none()
    }

    /// The call's tokens as reported, else counted with `tokenizer`; `None` when the
    /// provider never began to answer.
    pub fn tokens(&self, request: &ChatRequest, tokenizer: Tokenizer) -> Option<TokenUsage> {
        if !self.answered {
            return None;
        }
        Some(self.reported.unwrap_or_else(|| {
            TokenUsage::estimated(
                tokenizer.count_request(request) as u64,
                tokenizer.count_text(&self.written) as u64,
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ToolInvokeMeta;

    fn step(text: &str, answer: &str, unshown: &str, calls: &[&str]) -> ModelStep {
        ModelStep {
            thought: text.to_owned(),
            answer: answer.to_owned(),
            unshown: unshown.to_owned(),
            calls: calls
                .iter()
                .map(|name| ToolCallRequest {
                    id: format!("id-{name}"),
                    name: (*name).to_owned(),
                    arguments: "{}".to_owned(),
                })
                .collect(),
        }
    }

    fn observed(text: &str) -> Invocation {
        Invocation {
            outcome: crate::domain::CallOutcome::Success,
            provider: "p".into(),
            observation: text.into(),
            meta: ToolInvokeMeta {
                time_cost: 0.0,
                error: None,
                tool_config: Default::default(),
                usage: None,
                tool_calls: 0,
            },
            files: vec![],
            resources: vec![],
        }
    }

    fn retrieved(passages: &[&str]) -> Invocation {
        Invocation {
            resources: passages
                .iter()
                .map(|content| RetrieverResource {
                    content: (*content).to_owned(),
                    ..RetrieverResource::default()
                })
                .collect(),
            ..observed("passages")
        }
    }

    #[test]
    fn passages_are_numbered_in_the_order_the_model_reads_them_across_rounds() {
        let mut state = RunState::default();
        let mut first = fc_round(&mut state, 1, &[], &["kb_a", "kb_b"]);
        // The second call answers first; the model still reads the first call's first.
        first.observe(1, retrieved(&["b1"]), vec![]);
        first.observe(0, retrieved(&["a1", "a2"]), vec![]);
        let numbered: Vec<(u32, &str, &str)> = first
            .thought
            .retriever_resources
            .iter()
            .map(|r| (r.position, r.content.as_str(), r.tool_call_id.as_str()))
            .collect();
        assert_eq!(
            numbered,
            [
                (1, "a1", "id-kb_a"),
                (2, "a2", "id-kb_a"),
                (3, "b1", "id-kb_b")
            ]
        );
        state.close_round(first);
        let mut second = fc_round(&mut state, 2, &[], &["kb_a"]);
        second.observe(0, retrieved(&["c1"]), vec![]);
        assert_eq!(second.thought.retriever_resources[0].position, 4);
        state.interrupt(second);
        let all: Vec<u32> = state.resources().iter().map(|r| r.position).collect();
        assert_eq!(
            all,
            [1, 2, 3, 4],
            "an interrupted round's passages count too"
        );
    }

    /// Plays a function-calling round: text shown as answer, then the model's decision.
    fn fc_round(state: &mut RunState, position: u32, pieces: &[&str], calls: &[&str]) -> Round {
        let mut round = state.begin_round(MessageId::new(), position);
        for piece in pieces {
            state.show(&mut round, piece, true);
        }
        let text = pieces.concat();
        round.decide(step(&text, &text, "", calls), |_| "p".to_owned());
        round
    }

    #[test]
    fn function_calling_answers_join_rounds_on_new_lines_exactly_as_the_deltas_show_them() {
        let mut state = RunState::default();
        let mut first = state.begin_round(MessageId::new(), 1);
        assert_eq!(
            state.show(&mut first, "Let me ", true).as_deref(),
            Some("Let me ")
        );
        assert_eq!(
            state.show(&mut first, "check.", true).as_deref(),
            Some("check.")
        );
        first.decide(
            step("Let me check.", "Let me check.", "", &["clock"]),
            |_| "p".into(),
        );
        first.observe(0, observed("10:00"), vec![]);
        state.close_round(first);
        let mut second = state.begin_round(MessageId::new(), 2);
        assert_eq!(
            state.show(&mut second, "It is ten.", true).as_deref(),
            Some("\nIt is ten.")
        );
        second.decide(step("It is ten.", "It is ten.", "", &[]), |_| "p".into());
        state.close_round(second);

        assert_eq!(state.answer(), "Let me check.\nIt is ten.");
        assert_eq!(state.shown, state.answer());
        assert_eq!(state.iterations(), 2);
        assert_eq!(state.rounds().len(), 1, "only tool rounds are replayed");
        assert_eq!(state.rounds()[0].calls[0].1, "10:00");
    }

    #[test]
    fn a_steer_follows_the_last_results_once_and_its_round_records_it() {
        let mut state = RunState::default();
        let mut first = fc_round(&mut state, 1, &["Looking."], &["a"]);
        first.observe(0, observed("10:00"), vec![]);
        state.close_round(first);
        let steer = SteeredText {
            message_id: MessageId::new(),
            text: "In Tokyo, please.".into(),
        };
        state.join_steers(vec![steer.clone()]);
        state.join_steers(vec![steer.clone()]);
        assert!(state.took_steer(steer.message_id));
        assert_eq!(state.rounds()[0].steered, ["In Tokyo, please."], "once");
        let second = state.begin_round(MessageId::new(), 2);
        assert_eq!(second.thought.steered, std::slice::from_ref(&steer));
        let third = state.begin_round(MessageId::new(), 3);
        assert!(third.thought.steered.is_empty(), "recorded by one round");

        // A run rebuilt from its thoughts has the text in the same place, and takes the
        // steer no second time.
        let mut rebuilt = RunState::default();
        let mut first = fc_round(&mut rebuilt, 1, &["Looking."], &["a"]);
        first.observe(0, observed("10:00"), vec![]);
        rebuilt.restore_round(first.thought);
        let mut second = fc_round(&mut rebuilt, 2, &[], &["b"]);
        second.thought.steered = vec![steer.clone()];
        second.observe(0, observed("11:00"), vec![]);
        rebuilt.restore_round(second.thought);
        assert_eq!(rebuilt.rounds()[0].steered, ["In Tokyo, please."]);
        assert!(rebuilt.rounds()[1].steered.is_empty());
        rebuilt.join_steers(vec![steer]);
        assert_eq!(rebuilt.rounds()[1].steered.len(), 0, "taken already");
    }

    #[test]
    fn a_round_with_no_text_adds_no_blank_line() {
        let mut state = RunState::default();
        let first = fc_round(&mut state, 1, &["Looking."], &["a"]);
        state.close_round(first);
        let second = fc_round(&mut state, 2, &[], &["b"]);
        state.close_round(second);
        let third = fc_round(&mut state, 3, &["Found it."], &[]);
        state.close_round(third);
        assert_eq!(state.answer(), "Looking.\nFound it.");
        assert_eq!(state.shown, "Looking.\nFound it.");
    }

    #[test]
    fn a_react_run_shows_thoughts_but_answers_with_the_final_answer_alone() {
        let mut state = RunState::default();
        let mut first = state.begin_round(MessageId::new(), 1);
        state.show(&mut first, "I should calculate.\n", false);
        first.decide(step("I should calculate.", "", "", &["maths"]), |_| {
            "p".into()
        });
        state.close_round(first);
        let mut second = state.begin_round(MessageId::new(), 2);
        state.show(&mut second, "I know it.", false);
        second.decide(step("I know it.", "It is 42.", "It is 42.", &[]), |_| {
            "p".into()
        });
        assert_eq!(
            state.show_paragraph("It is 42.").as_deref(),
            Some("\nIt is 42.")
        );
        state.close_round(second);

        assert_eq!(state.answer(), "It is 42.");
        assert_eq!(state.shown, "I should calculate.\nI know it.\nIt is 42.");
    }

    #[test]
    fn an_interrupted_round_keeps_its_partial_answer_but_not_its_thought() {
        let mut state = RunState::default();
        let first = fc_round(&mut state, 1, &["Step one."], &["a"]);
        state.close_round(first);
        let mut cut = state.begin_round(MessageId::new(), 2);
        state.show(&mut cut, "Part", true);
        state.interrupt(cut);
        assert_eq!(state.answer(), "Step one.\nPart");
        assert_eq!(state.iterations(), 2);

        let mut react = RunState::default();
        let mut thinking = react.begin_round(MessageId::new(), 1);
        react.show(&mut thinking, "Hmm, let me", false);
        react.interrupt(thinking);
        assert_eq!(react.answer(), "", "a ReAct thought is not answer");
        assert_eq!(react.unfinished().unwrap().thought.thought, "Hmm, let me");
    }

    #[test]
    fn the_last_round_calling_tools_keeps_its_calls_without_results() {
        let mut state = RunState::default();
        let last = fc_round(&mut state, 1, &[], &["clock", "web"]);
        assert_eq!(last.thought.tool_calls.len(), 2);
        assert!(last
            .thought
            .tool_calls
            .iter()
            .all(|c| c.observation.is_none()));
        state.close_round(last);
        assert_eq!(state.answer(), "");
    }

    #[test]
    fn usage_adds_up_over_rounds_and_counts_what_was_not_reported() {
        let mut state = RunState::default();
        let mut round = state.begin_round(MessageId::new(), 1);
        let pricing = crate::domain::Pricing::default();
        state.add_usage(&mut round, pricing.usage(TokenUsage::estimated(10, 2), 0.5));
        state.add_usage(&mut round, pricing.usage(TokenUsage::estimated(5, 1), 0.5));
        let usage = state.usage(3.0);
        assert_eq!(usage.tokens.total_tokens, 18);
        assert!(usage.tokens.estimated);
        assert_eq!(usage.latency, 3.0);

        let request = ChatRequest::default();
        let unanswered = Tally::default();
        assert_eq!(unanswered.tokens(&request, Tokenizer::Cl100kBase), None);
        let silent = Tally {
            answered: true,
            reported: None,
            written: "Paris is the capital.".into(),
        };
        let counted = silent.tokens(&request, Tokenizer::Cl100kBase).unwrap();
        assert!(counted.estimated);
        assert_eq!(counted.completion_tokens, 5);
    }
}
