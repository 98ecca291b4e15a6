//! Fitting a round's prompt into the model's context window: history is cut whole turns at
//! a time, oldest first, to `context_window − max_tokens − current prompt`; when the
//! current prompt alone leaves too little room, `max_tokens` is lowered (never below 16).

use serde_json::{Map, Value};

use super::strategy::{PastTurn, PromptContext};
use crate::llm::{ChatRequest, ModelInfo, Tokenizer};

/// The fewest tokens left for the answer before the run gives up.
pub const MIN_ANSWER_TOKENS: u64 = 16;

/// What fitting removed from the history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trim {
    /// Whole turns dropped.
    pub turns: u32,
    /// Their tokens.
    pub tokens: u64,
}

/// The prompt does not fit even without history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the prompt needs {prompt} tokens, leaving fewer than {MIN_ANSWER_TOKENS} for the answer in the model's {window}-token context window")]
pub struct Overflow {
    /// Tokens of the prompt without history.
    pub prompt: u64,
    /// The model's context window.
    pub window: u64,
}

/// Builds the request for `context`, first cutting its history (for good: later rounds keep
/// the cut) and lowering its `max_tokens` when needed.
///
/// When every turn's size was kept with its message, only the prompt without history is
/// counted and the history is summed: a long conversation then costs no more to fit than a
/// short one. Otherwise the prompt is counted whole and turns measured as they are dropped.
pub fn fit(
    context: &mut PromptContext,
    model: &ModelInfo,
    build: impl Fn(&PromptContext) -> ChatRequest,
) -> Result<(ChatRequest, Trim), Overflow> {
    let Some(window) = model.context_window.map(u64::from) else {
        return Ok((build(context), Trim::default()));
    };
    let reserve = reserved_answer_tokens(&context.parameters);
    let tokenizer = model.tokenizer;
    let count = |request: &ChatRequest| tokenizer.count_request(request) as u64;
    let budget = window.saturating_sub(reserve);
    let (used, trim) = match kept_sizes(&context.history) {
        Some(sizes) => cut_by_kept_sizes(context, &build, &count, &sizes, budget),
        None => {
            let request = build(context);
            if Tokenizer::upper_bound(&request) as u64 + reserve <= window {
                return Ok((request, Trim::default()));
            }
            cut_by_counting(context, &build, &count, count(&request), budget)
        }
    };
    if used + reserve > window {
        if used + MIN_ANSWER_TOKENS > window {
            return Err(Overflow {
                prompt: used,
                window,
            });
        }
        lower_max_tokens(&mut context.parameters, window - used);
    }
    Ok((build(context), trim))
}

/// Every turn's kept size, or `None` when one is unknown.
fn kept_sizes(history: &[PastTurn]) -> Option<Vec<u64>> {
    if history.is_empty() {
        return None;
    }
    history.iter().map(|turn| turn.tokens).collect()
}

/// The prompt's tokens without its history.
fn count_without_history(
    context: &mut PromptContext,
    build: &impl Fn(&PromptContext) -> ChatRequest,
    count: &impl Fn(&ChatRequest) -> u64,
) -> u64 {
    let history = std::mem::take(&mut context.history);
    let base = count(&build(context));
    context.history = history;
    base
}

/// Cuts by the kept sizes: the prompt without history is counted, the turns are summed.
/// The sizes were measured in other prompts, where a turn's edges may have joined their
/// neighbours differently, so a margin of 1% of the budget and a token per turn is kept.
fn cut_by_kept_sizes(
    context: &mut PromptContext,
    build: &impl Fn(&PromptContext) -> ChatRequest,
    count: &impl Fn(&ChatRequest) -> u64,
    sizes: &[u64],
    budget: u64,
) -> (u64, Trim) {
    let base = count_without_history(context, build, count);
    let margin = |turns: usize| budget / 100 + turns as u64;
    let mut used = base + sizes.iter().sum::<u64>() + margin(sizes.len());
    let mut trim = Trim::default();
    let mut dropped = 0;
    while used > budget && dropped < sizes.len() {
        used -= sizes[dropped] + 1;
        trim.tokens += sizes[dropped];
        dropped += 1;
    }
    context.history.drain(..dropped);
    trim.turns = u32::try_from(dropped).unwrap_or(u32::MAX);
    (used, trim)
}

/// Cuts by counting: the whole prompt, then each turn as it is dropped (oldest first), then
/// the prompt again.
fn cut_by_counting(
    context: &mut PromptContext,
    build: &impl Fn(&PromptContext) -> ChatRequest,
    count: &impl Fn(&ChatRequest) -> u64,
    mut used: u64,
    budget: u64,
) -> (u64, Trim) {
    if used <= budget || context.history.is_empty() {
        return (used, Trim::default());
    }
    let base = count_without_history(context, build, count);
    let mut probe = context.clone_without_history();
    let mut trim = Trim::default();
    let mut dropped = 0;
    while used > budget && dropped < context.history.len() {
        probe.history = vec![context.history[dropped].clone()];
        let size = count(&build(&probe)).saturating_sub(base);
        used = used.saturating_sub(size);
        trim.tokens += size;
        dropped += 1;
    }
    context.history.drain(..dropped);
    trim.turns = u32::try_from(dropped).unwrap_or(u32::MAX);
    (count(&build(context)), trim)
}

/// Tokens `turn` adds to the prompt `build` makes of `context` (whose own history is left
/// out): what is kept with a message when its turn ends.
pub fn turn_tokens(
    context: &PromptContext,
    turn: &PastTurn,
    tokenizer: Tokenizer,
    build: impl Fn(&PromptContext) -> ChatRequest,
) -> u64 {
    let mut probe = context.clone_without_history();
    let base = tokenizer.count_request(&build(&probe)) as u64;
    probe.history = vec![turn.clone()];
    (tokenizer.count_request(&build(&probe)) as u64).saturating_sub(base)
}

/// The `max_tokens` (or `max_completion_tokens`) the caller set, else nothing reserved.
pub fn reserved_answer_tokens(parameters: &Map<String, Value>) -> u64 {
    ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|key| parameters.get(*key).and_then(Value::as_u64))
        .unwrap_or(0)
}

/// Sets the answer's token limit (`max_completion_tokens` when the caller used it, else
/// `max_tokens`) to `available`.
pub fn lower_max_tokens(parameters: &mut Map<String, Value>, available: u64) {
    let key = if parameters.contains_key("max_completion_tokens") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    parameters.insert(key.to_owned(), Value::from(available));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::{ChatMessage, ModelEntry};
    use crate::runner::strategy::{FunctionCalling, Strategy};

    fn model(window: u32) -> ModelInfo {
        let mut entry = ModelEntry::unlisted("gpt-4o");
        entry.context_window = Some(window);
        ModelInfo::from(&entry)
    }

    fn context(turns: usize, max_tokens: u64) -> PromptContext {
        PromptContext {
            model: "gpt-4o".into(),
            instruction: "Be brief.".into(),
            history: (0..turns)
                .map(|i| PastTurn {
                    query: format!("question {i} {}", "word ".repeat(40)),
                    rounds: vec![],
                    answer: format!("answer {i} {}", "word ".repeat(40)),
                    tokens: None,
                })
                .collect(),
            query: "the current question".into(),
            parameters: json!({"max_tokens": max_tokens})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ..PromptContext::default()
        }
    }

    fn build(context: &PromptContext) -> ChatRequest {
        FunctionCalling.build_request(context, &[], &[])
    }

    #[test]
    fn oldest_turns_are_dropped_whole_until_the_prompt_fits() {
        let mut ctx = context(10, 100);
        let (request, trim) = fit(&mut ctx, &model(600), build).unwrap();
        let used = Tokenizer::O200kBase.count_request(&request) as u64;
        assert!(used + 100 <= 600, "{used}");
        assert!(trim.turns > 0 && trim.turns < 10, "{trim:?}");
        assert_eq!(ctx.history.len(), 10 - trim.turns as usize);
        assert!(ctx.history[0]
            .query
            .starts_with(&format!("question {}", trim.turns)));
        let first = &request.messages[1];
        assert_eq!(first, &ChatMessage::user_text(ctx.history[0].query.clone()));
    }

    #[test]
    fn kept_turn_sizes_cut_the_same_turns_without_counting_the_history() {
        let mut counted = context(10, 100);
        let (_, by_counting) = fit(&mut counted, &model(600), build).unwrap();

        let mut kept = context(10, 100);
        for turn in &mut kept.history {
            turn.tokens = Some(turn_tokens(&kept_base(), turn, Tokenizer::O200kBase, build));
        }
        let (request, by_kept_sizes) = fit(&mut kept, &model(600), build).unwrap();
        let used = Tokenizer::O200kBase.count_request(&request) as u64;
        assert!(used + 100 <= 600, "{used}");
        // The margin for sizes measured in other prompts may cost one turn more.
        assert!(
            (by_counting.turns..=by_counting.turns + 1).contains(&by_kept_sizes.turns),
            "{by_counting:?} {by_kept_sizes:?}"
        );

        // The kept sizes are trusted: turns said to be huge are dropped, whatever they hold.
        let mut claimed = context(10, 100);
        for turn in &mut claimed.history[..5] {
            turn.tokens = Some(10_000);
        }
        for turn in &mut claimed.history[5..] {
            turn.tokens = Some(1);
        }
        let (_, trim) = fit(&mut claimed, &model(600), build).unwrap();
        assert_eq!(trim.turns, 5);
        assert_eq!(claimed.history.len(), 5);
    }

    fn kept_base() -> PromptContext {
        context(0, 100)
    }

    #[test]
    fn a_prompt_that_fits_is_left_alone() {
        let mut ctx = context(3, 100);
        let (_, trim) = fit(&mut ctx, &model(100_000), build).unwrap();
        assert_eq!(trim, Trim::default());
        assert_eq!(ctx.history.len(), 3);
    }

    #[test]
    fn max_tokens_is_lowered_when_the_prompt_alone_is_too_big_and_fails_below_16() {
        let mut ctx = context(0, 1000);
        let used = Tokenizer::O200kBase.count_request(&build(&ctx)) as u64;
        fit(&mut ctx, &model(u32::try_from(used + 50).unwrap()), build).unwrap();
        assert_eq!(ctx.parameters["max_tokens"], json!(50));
        let mut tight = context(0, 1000);
        let err = fit(&mut tight, &model(u32::try_from(used + 10).unwrap()), build).unwrap_err();
        assert_eq!(err.prompt, used);
    }
}
