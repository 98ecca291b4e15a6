//! A run as a person watches it: answer text as it arrives, each tool call with its
//! arguments, (cut) observation and time, retries, and a closing line with tokens, cost,
//! latency and the ids to read the run back. Colours only on a terminal without
//! `NO_COLOR`; or, with `--json`, one JSON object per event.

use std::io::{IsTerminal, Write};

use super::json;
use crate::pb;
use crate::pb::run_event::Event;

/// How much of an argument list or an observation one line shows.
const SHOWN_CHARS: usize = 200;

/// ANSI colours, or none.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    colour: bool,
}

impl Paint {
    /// Colours when stdout is a terminal and `NO_COLOR` is unset or empty.
    pub fn for_stdout() -> Self {
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            colour: std::io::stdout().is_terminal() && !no_colour,
        }
    }

    fn wrap(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Secondary detail.
    pub fn dim(self, text: &str) -> String {
        self.wrap("2", text)
    }

    /// Failures.
    pub fn red(self, text: &str) -> String {
        self.wrap("31", text)
    }

    /// Success.
    pub fn green(self, text: &str) -> String {
        self.wrap("32", text)
    }

    /// Waits, retries, cancels.
    pub fn yellow(self, text: &str) -> String {
        self.wrap("33", text)
    }

    /// Tool names.
    pub fn cyan(self, text: &str) -> String {
        self.wrap("36", text)
    }

    /// Headings.
    pub fn bold(self, text: &str) -> String {
        self.wrap("1", text)
    }
}

/// Where a run's events go: a person's view or JSON lines.
pub enum Printer {
    /// Readable lines.
    Human(HumanView),
    /// One JSON object per line.
    Json,
}

impl Printer {
    /// JSON lines when `json`, else the readable view.
    pub fn new(json: bool) -> Self {
        if json {
            Printer::Json
        } else {
            Printer::Human(HumanView::new(Paint::for_stdout()))
        }
    }

    /// Shows one event.
    pub fn event(&mut self, event: &pb::RunEvent) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        match self {
            Printer::Json => writeln!(out, "{}", json::event(event))?,
            Printer::Human(view) => out.write_all(view.render(event).as_bytes())?,
        }
        out.flush()
    }

    /// A remark of the CLI's own (`cancelling…`): on stderr, so JSON output stays events only.
    pub fn note(&mut self, text: &str) {
        let line = match self {
            Printer::Human(view) => view.paint.yellow(text),
            Printer::Json => text.to_owned(),
        };
        let newline = match self {
            Printer::Human(view) => std::mem::take(&mut view.mid_line),
            Printer::Json => false,
        };
        if newline {
            println!();
        }
        eprintln!("{line}");
    }
}

/// The readable view's state: where the cursor is and what was already shown.
pub struct HumanView {
    paint: Paint,
    /// Answer text ended without a newline.
    mid_line: bool,
    /// Answer text arrived since the last thought event.
    streamed_since_thought: bool,
    /// Any answer text arrived.
    streamed: bool,
    /// The answer text of the round in progress, by `seq`, to erase when the round is made
    /// again.
    round_deltas: Vec<(u64, String)>,
    /// The cursor's column after the last text shown.
    column: usize,
    /// The column where the round's first answer text began.
    round_column: usize,
    /// The views of sub-agents' runs, by message id, and whether each is at a line's start.
    children: std::collections::HashMap<String, (HumanView, bool)>,
    /// The forming calls' names by id, and the call whose arguments the cursor follows.
    forming: std::collections::HashMap<String, String>,
    forming_now: Option<String>,
}

/// What a sub-agent's lines start with, under the call that started it.
const CHILD_INDENT: &str = "  │ ";

impl HumanView {
    /// A view painting with `paint`.
    pub fn new(paint: Paint) -> Self {
        Self {
            paint,
            mid_line: false,
            streamed_since_thought: false,
            streamed: false,
            round_deltas: Vec::new(),
            column: 0,
            round_column: 0,
            children: std::collections::HashMap::new(),
            forming: std::collections::HashMap::new(),
            forming_now: None,
        }
    }

    /// The text one event adds to the screen.
    pub fn render(&mut self, event: &pb::RunEvent) -> String {
        let p = self.paint;
        if !matches!(event.event, Some(Event::ToolCallDelta(_))) {
            self.forming_now = None;
        }
        let lines = match &event.event {
            Some(Event::ToolCallDelta(delta)) => return self.forming(delta),
            Some(Event::ReasoningDelta(reasoning)) => return self.reasoning(&reasoning.text),
            Some(Event::Delta(delta)) => {
                self.streamed = true;
                self.streamed_since_thought = true;
                self.mid_line = !delta.text.ends_with('\n');
                if self.round_deltas.is_empty() {
                    self.round_column = self.column;
                }
                self.round_deltas.push((event.seq, delta.text.clone()));
                self.column = column_after(self.column, &delta.text);
                return delta.text.clone();
            }
            Some(Event::RoundRestarted(restarted)) => return self.restart(event.seq, restarted),
            Some(Event::Child(child)) => return self.child(child),
            Some(Event::Started(started)) => vec![p.dim(&started_line(started))],
            Some(Event::Queued(queued)) => vec![p.yellow(&format!(
                "… queued behind {} ({} ahead)",
                queued.message_id, queued.ahead
            ))],
            Some(Event::Steered(steered)) => vec![p.yellow(&format!(
                "↪ steering {} (should it not take the text: runs as {})",
                steered.message_id, steered.steer_message_id
            ))],
            Some(Event::UserTurn(turn)) => vec![p.yellow(&format!("↪ user: {}", turn.text))],
            Some(Event::Thought(thought)) => {
                self.round_deltas.clear();
                self.thought_lines(thought)
            }
            Some(Event::ToolStarted(started)) => started
                .tool_call
                .as_ref()
                .map(|call| vec![self.call_line(call)])
                .unwrap_or_default(),
            Some(Event::ToolFinished(finished)) => finished
                .tool_call
                .as_ref()
                .map(|call| vec![self.result_line(call)])
                .unwrap_or_default(),
            Some(Event::File(file)) => vec![p.dim(&format!(
                "  + file {} ({}{})",
                file.id,
                file.mime_type,
                if file.url.is_empty() {
                    String::new()
                } else {
                    format!(", {}", file.url)
                }
            ))],
            Some(Event::Retry(retry)) => vec![p.yellow(&format!(
                "↻ {}: {} — attempt {} with {}/{} in {:.1}s",
                retry.code, retry.message, retry.attempt, retry.provider, retry.model, retry.delay
            ))],
            Some(Event::ToolCallsRequired(required)) => {
                let mut lines = vec![p.yellow("… waiting for the caller to run these tools:")];
                lines.extend(required.tool_calls.iter().map(|c| self.call_line(c)));
                lines
            }
            Some(Event::ApprovalRequired(required)) => {
                let mut lines = vec![p.yellow("… waiting for approval (ApproveToolCalls) of:")];
                lines.extend(required.tool_calls.iter().map(|c| self.call_line(c)));
                lines
            }
            Some(Event::End(end)) => self.end_lines(event, end),
            Some(Event::Error(error)) => {
                let mut lines =
                    vec![p.red(&format!("✗ failed: {}: {}", error.code, error.message))];
                lines.push(p.dim(&usage_line(error.iterations, error.usage.as_ref())));
                lines.push(p.dim(&ids_line(event)));
                lines
            }
            None => Vec::new(),
        };
        self.lines(lines)
    }

    /// The model's reasoning, dimmed, where the text goes: it is not answer text.
    fn reasoning(&mut self, text: &str) -> String {
        self.column = column_after(self.column, text);
        self.mid_line = self.column > 0;
        self.paint.dim(text)
    }

    /// A forming call's arguments, dimmed on a line of their own under the text; the
    /// call's line follows once it is whole.
    fn forming(&mut self, delta: &pb::ToolCallDelta) -> String {
        let mut out = String::new();
        if !delta.name.is_empty() {
            self.forming
                .insert(delta.tool_call_id.clone(), delta.name.clone());
        }
        if self.forming_now.as_deref() != Some(delta.tool_call_id.as_str()) {
            if std::mem::take(&mut self.mid_line) {
                out.push('\n');
            }
            let name = self
                .forming
                .get(&delta.tool_call_id)
                .map_or("a tool", String::as_str);
            let head = format!("  ⋯ {name} ");
            self.column = head.chars().count();
            out.push_str(&self.paint.dim(&head));
            self.forming_now = Some(delta.tool_call_id.clone());
        }
        let mut text = delta.arguments_delta.clone();
        if delta.truncated {
            text.push_str(" …");
        }
        out.push_str(&self.paint.dim(&text));
        self.column = column_after(self.column, &text);
        self.mid_line = self.column > 0;
        out
    }

    /// A sub-agent's event, shown as its own run would be, indented under the call that
    /// started it.
    fn child(&mut self, child: &pb::ChildEvent) -> String {
        let Some(inner) = child.event.as_deref() else {
            return String::new();
        };
        let paint = self.paint;
        let (view, line_start) = self
            .children
            .entry(child.message_id.clone())
            .or_insert_with(|| (HumanView::new(paint), true));
        let text = view.render(inner);
        let mut out = String::new();
        if self.mid_line && !text.is_empty() {
            out.push('\n');
            self.mid_line = false;
        }
        for piece in text.split_inclusive('\n') {
            if *line_start {
                out.push_str(CHILD_INDENT);
            }
            out.push_str(piece);
            *line_start = piece.ends_with('\n');
        }
        self.column = 0;
        out
    }

    /// Erases the answer text the restarted round had shown (on a terminal; elsewhere a
    /// line says which text is void), so what stays on screen is what the answer holds.
    fn restart(&mut self, seq: u64, restarted: &pb::RoundRestarted) -> String {
        let void_at = self
            .round_deltas
            .iter()
            .position(|(at, _)| (restarted.discard_from_seq..seq).contains(at));
        let Some(void_at) = void_at else {
            return String::new();
        };
        let void: String = self.round_deltas[void_at..]
            .iter()
            .map(|(_, text)| text.as_str())
            .collect();
        let start = self.round_deltas[..void_at]
            .iter()
            .fold(self.round_column, |column, (_, text)| {
                column_after(column, text)
            });
        self.round_deltas.truncate(void_at);
        if !self.paint.colour {
            let note = format!(
                "(round {} is made again: the text above from event {} on is void)",
                restarted.position, restarted.discard_from_seq
            );
            return self.lines(vec![note]);
        }
        let mut erase = String::from("\r");
        let up = void.matches('\n').count();
        if up > 0 {
            erase.push_str(&format!("\x1b[{up}A"));
        }
        if start > 0 {
            erase.push_str(&format!("\x1b[{start}C"));
        }
        erase.push_str("\x1b[J");
        self.column = start;
        self.mid_line = start > 0;
        erase
    }

    /// Whole lines, on a line of their own even after answer text without a newline.
    fn lines(&mut self, lines: Vec<String>) -> String {
        if lines.is_empty() {
            return String::new();
        }
        self.column = 0;
        let mut text = String::new();
        if std::mem::take(&mut self.mid_line) {
            text.push('\n');
        }
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    /// A round's reasoning, when it was not streamed as text (chain of thought).
    fn thought_lines(&mut self, thought: &pb::AgentThought) -> Vec<String> {
        let streamed = std::mem::take(&mut self.streamed_since_thought);
        let reasoning = thought.thought.trim();
        if streamed || reasoning.is_empty() || thought.tool_calls.is_empty() {
            return Vec::new();
        }
        vec![self
            .paint
            .dim(&format!("· {}", one_line(reasoning, SHOWN_CHARS)))]
    }

    fn call_line(&self, call: &pb::ToolCall) -> String {
        format!(
            "→ {} {}",
            self.paint.cyan(&tool_name(call)),
            one_line(&call.arguments, SHOWN_CHARS)
        )
    }

    fn result_line(&self, call: &pb::ToolCall) -> String {
        let meta = call.meta.clone().unwrap_or_default();
        let text = format!(
            "{} ({:.2}s)",
            one_line(&call.observation, SHOWN_CHARS),
            meta.time_cost
        );
        if meta.error.is_empty() {
            format!("  ← {text}")
        } else {
            self.paint.red(&format!("  ✗ {text}"))
        }
    }

    fn end_lines(&mut self, event: &pb::RunEvent, end: &pb::MessageEnd) -> Vec<String> {
        let p = self.paint;
        let mut lines = Vec::new();
        if !self.streamed && !end.answer.is_empty() {
            lines.push(end.answer.clone());
        }
        if !end.output_invalid.is_empty() {
            lines.push(p.yellow(&format!(
                "! the answer does not meet the output schema: {}",
                end.output_invalid
            )));
        }
        let finish = json::finish_reason_name(end.finish_reason);
        let head = match pb::FinishReason::try_from(end.finish_reason) {
            Ok(pb::FinishReason::Cancelled) => p.yellow("■ cancelled"),
            Ok(pb::FinishReason::Interrupted) => {
                p.yellow(&format!("■ interrupted by {}", end.interrupted_by))
            }
            Ok(pb::FinishReason::MaxIterations) => {
                p.yellow("✓ completed (the model still wanted tools after the last round)")
            }
            Ok(pb::FinishReason::BudgetExhausted) => p.yellow(&format!(
                "■ stopped: the run's {} budget ran out",
                budget_name(&end.budget_exhausted)
            )),
            Ok(pb::FinishReason::Stop | pb::FinishReason::Unspecified) | Err(_) => {
                p.green(&format!("✓ completed ({finish})"))
            }
        };
        lines.push(format!(
            "{head} {}",
            p.dim(&usage_line(end.iterations, end.usage.as_ref()))
        ));
        lines.push(p.dim(&ids_line(event)));
        lines
    }
}

fn started_line(started: &pb::RunStarted) -> String {
    let mut line = format!(
        "▶ {}/{} · {} · up to {} tool rounds, then an answer",
        started.provider,
        started.model,
        json::strategy_name(started.strategy).replace('_', " "),
        started.max_iteration
    );
    match started.history_turns {
        0 => {}
        1 => line.push_str(" · 1 earlier turn"),
        turns => line.push_str(&format!(" · {turns} earlier turns")),
    }
    line
}

/// `· 2 rounds · tokens 120 in, 30 out · 0.0012 USD · 1.23s`
fn usage_line(iterations: u32, usage: Option<&pb::Usage>) -> String {
    let usage = usage.cloned().unwrap_or_default();
    let mut line = format!(
        "· {iterations} {} · tokens {} in, {} out{}",
        if iterations == 1 { "round" } else { "rounds" },
        usage.prompt_tokens,
        usage.completion_tokens,
        if usage.estimated { " (estimated)" } else { "" }
    );
    if !usage.total_price.is_empty() && !usage.currency.is_empty() {
        line.push_str(&format!(" · {} {}", usage.total_price, usage.currency));
    }
    line.push_str(&format!(" · {:.2}s", usage.latency));
    line
}

fn ids_line(event: &pb::RunEvent) -> String {
    format!(
        "  message {}  conversation {}",
        event.message_id, event.conversation_id
    )
}

/// `provider/name` of a call, or the name alone for a tool no provider has.
pub fn tool_name(call: &pb::ToolCall) -> String {
    if call.provider.is_empty() {
        call.name.clone()
    } else {
        format!("{}/{}", call.provider, call.name)
    }
}

/// `text` on one line, cut to `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() <= max {
        return flat.to_owned();
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}

/// The cursor's column after `text` is written at `column`.
/// A budget's name as a person reads it.
fn budget_name(kind: &str) -> &str {
    match kind {
        "tokens" => "token",
        "wall_clock" => "wall-clock",
        "tool_calls" => "tool-call",
        other => other,
    }
}

fn column_after(column: usize, text: &str) -> usize {
    match text.rsplit_once('\n') {
        Some((_, last)) => last.chars().count(),
        None => column + text.chars().count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event: Event) -> pb::RunEvent {
        pb::RunEvent {
            seq: 1,
            message_id: "m-1".into(),
            conversation_id: "c-1".into(),
            created_at: None,
            event: Some(event),
        }
    }

    #[test]
    fn a_tool_line_follows_answer_text_on_a_line_of_its_own() {
        let mut view = HumanView::new(Paint { colour: false });
        let text = view.render(&event(Event::Delta(pb::MessageDelta {
            text: "Let me look".into(),
        })));
        assert_eq!(text, "Let me look");
        let call = pb::ToolCall {
            id: "c".into(),
            name: "current_time".into(),
            provider: "time".into(),
            arguments: "{\"timezone\":\n\"UTC\"}".into(),
            ..Default::default()
        };
        let line = view.render(&event(Event::ToolStarted(pb::ToolStarted {
            tool_call: Some(call),
            ..Default::default()
        })));
        assert_eq!(line, "\n→ time/current_time {\"timezone\": \"UTC\"}\n");
    }

    #[test]
    fn the_end_says_how_it_went_with_usage_and_ids() {
        let mut view = HumanView::new(Paint { colour: false });
        let text = view.render(&event(Event::End(pb::MessageEnd {
            answer: "42".into(),
            finish_reason: pb::FinishReason::Stop as i32,
            iterations: 2,
            usage: Some(pb::Usage {
                prompt_tokens: 120,
                completion_tokens: 30,
                total_price: "0.0012".into(),
                currency: "USD".into(),
                latency: 1.234,
                ..Default::default()
            }),
            ..Default::default()
        })));
        assert_eq!(
            text,
            "42\n✓ completed (stop) · 2 rounds · tokens 120 in, 30 out · 0.0012 USD · 1.23s\n  \
             message m-1  conversation c-1\n"
        );
    }

    #[test]
    fn a_run_stopped_by_its_budget_says_which() {
        let mut view = HumanView::new(Paint { colour: false });
        let text = view.render(&event(Event::End(pb::MessageEnd {
            answer: "So far: noon.".into(),
            finish_reason: pb::FinishReason::BudgetExhausted as i32,
            budget_exhausted: "tool_calls".into(),
            iterations: 1,
            ..Default::default()
        })));
        assert!(
            text.starts_with(
                "So far: noon.\n■ stopped: the run's tool-call budget ran out · 1 round"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_restarted_round_erases_its_void_text_on_a_terminal() {
        let mut view = HumanView::new(Paint { colour: true });
        let at = |seq: u64, body: Event| pb::RunEvent { seq, ..event(body) };
        let delta = |text: &str| Event::Delta(pb::MessageDelta { text: text.into() });
        let mut screen = String::new();
        screen.push_str(&view.render(&at(3, delta("Hi "))));
        screen.push_str(&view.render(&at(4, delta("the wea\nther is"))));
        let erase = view.render(&at(
            5,
            Event::RoundRestarted(pb::RoundRestarted {
                position: 1,
                discard_from_seq: 4,
                reason: "owner_lost".into(),
            }),
        ));
        // Back to where "the wea…" began: one line up, three columns in, then clear.
        assert_eq!(screen, "Hi the wea\nther is");
        assert_eq!(erase, "\r\x1b[1A\x1b[3C\x1b[J");
        assert_eq!(view.render(&at(6, delta("sunny"))), "sunny");

        let mut plain = HumanView::new(Paint { colour: false });
        plain.render(&at(3, delta("Hi")));
        let note = plain.render(&at(
            4,
            Event::RoundRestarted(pb::RoundRestarted {
                position: 2,
                discard_from_seq: 3,
                reason: "owner_lost".into(),
            }),
        ));
        assert_eq!(
            note,
            "\n(round 2 is made again: the text above from event 3 on is void)\n"
        );
        let nothing_void = plain.render(&at(
            6,
            Event::RoundRestarted(pb::RoundRestarted {
                position: 3,
                discard_from_seq: 6,
                reason: "owner_lost".into(),
            }),
        ));
        assert_eq!(nothing_void, "");
    }

    /// A call forming shows its arguments under the text as they come, on a line of its
    /// own, then its call line; reasoning shows where the text goes.
    #[test]
    fn a_forming_call_and_reasoning_show_under_the_text() {
        let mut view = HumanView::new(Paint { colour: false });
        let forming = |name: &str, text: &str| {
            Event::ToolCallDelta(pb::ToolCallDelta {
                tool_call_id: "c1".into(),
                name: name.into(),
                arguments_delta: text.into(),
                ..Default::default()
            })
        };
        let mut screen = String::new();
        screen.push_str(
            &view.render(&event(Event::ReasoningDelta(pb::ReasoningDelta {
                text: "Tokyo is UTC+9. ".into(),
                ..Default::default()
            }))),
        );
        screen.push_str(&view.render(&event(Event::Delta(pb::MessageDelta {
            text: "Checking.".into(),
        }))));
        screen.push_str(&view.render(&event(forming("current_time", "{\"timezone\": "))));
        screen.push_str(&view.render(&event(forming("", "\"Asia/Tokyo\"}"))));
        screen.push_str(&view.render(&event(Event::ToolStarted(pb::ToolStarted {
            tool_call: Some(pb::ToolCall {
                id: "c1".into(),
                provider: "time".into(),
                name: "current_time".into(),
                arguments: "{\"timezone\": \"Asia/Tokyo\"}".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))));
        let lines: Vec<&str> = screen.lines().collect();
        assert_eq!(lines[0], "Tokyo is UTC+9. Checking.");
        assert_eq!(lines[1], "  ⋯ current_time {\"timezone\": \"Asia/Tokyo\"}");
        assert!(lines[2].starts_with("→ time/current_time"), "{screen}");
    }

    #[test]
    fn long_text_is_cut_on_one_line() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
