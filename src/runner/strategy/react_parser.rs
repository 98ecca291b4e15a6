//! The streaming ReAct output parser: model text in, visible thought text and actions out.
//!
//! It reads one character at a time and keeps all state across chunks, so any chunking of
//! the same text gives the same result. It recognises actions written as a fenced JSON block
//! (a fence of three or more backticks or tildes, with or without a language tag), as bare
//! JSON, or as a list of several actions; strips
//! `Thought:`, `Action:` and `Final Answer:` prefixes at word starts, case-insensitively;
//! removes `<think>…</think>` blocks; and ignores everything after the first action, so a
//! model that ignores its stop word cannot inject a fake observation. Brace matching is
//! string-aware, held-back text is never lost, and no input makes it panic.
//!
//! Every input character ends up in exactly one [`Piece`]: shown, part of an action's source,
//! or hidden (prefixes, reasoning, the discarded tail). Tests rely on that accounting.

use serde_json::{Map, Value};

mod action_input;

pub use action_input::InputPiece;
use action_input::InputScan;

/// An action the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// Tool name, or `Final Answer`.
    pub name: String,
    /// The input as the model wrote it: any JSON value.
    pub input: Value,
}

impl Action {
    /// Whether this action ends the run with an answer rather than calling a tool.
    pub fn is_final_answer(&self) -> bool {
        let normalized: String = self
            .name
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        normalized == "finalanswer"
    }
}

/// A piece of the parser's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text the user may see.
    Text(String),
    /// One JSON blob holding one or more actions, with the text it was read from.
    Actions {
        /// The actions, in order.
        actions: Vec<Action>,
        /// The blob as written (fences included).
        source: String,
    },
    /// Text that is neither shown nor an action: prefixes, reasoning, the discarded tail.
    Hidden(String),
    /// A `Final Answer:` prefix (hidden): the text after it is the answer.
    AnswerMark(String),
}

/// Prefixes removed at word starts; `final answer:` also marks where the answer begins.
const PREFIXES: [&str; 3] = ["thought:", "action:", ANSWER_PREFIX];
const ANSWER_PREFIX: &str = "final answer:";

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Removes `<think>…</think>` blocks (nested ones included) from a character stream.
#[derive(Debug, Default)]
struct ThinkFilter {
    depth: usize,
    /// A possible tag being matched.
    pending: String,
    /// Hidden reasoning not yet reported.
    hidden: String,
}

impl ThinkFilter {
    /// Feeds one char; returns the chars that pass through (possibly released from a
    /// partial tag that turned out not to be one).
    fn push(&mut self, c: char, pass: &mut String) {
        self.pending.push(c);
        let lower = self.pending.to_ascii_lowercase();
        if lower == THINK_OPEN {
            self.depth += 1;
            self.hidden.push_str(&std::mem::take(&mut self.pending));
            return;
        }
        if lower == THINK_CLOSE && self.depth > 0 {
            self.depth -= 1;
            self.hidden.push_str(&std::mem::take(&mut self.pending));
            return;
        }
        if THINK_OPEN.starts_with(&lower) || (self.depth > 0 && THINK_CLOSE.starts_with(&lower)) {
            return;
        }
        // Not a tag: release all but a trailing `<`, which may start one.
        let pending = std::mem::take(&mut self.pending);
        let (release, keep) = match pending.strip_suffix('<') {
            Some(head) if pending.len() > 1 => (head.to_owned(), "<".to_owned()),
            _ => (pending, String::new()),
        };
        self.pending = keep;
        if self.depth > 0 {
            self.hidden.push_str(&release);
        } else {
            pass.push_str(&release);
        }
    }

    /// Releases what is held at the end of the stream; an unclosed block stays hidden.
    fn finish(&mut self, pass: &mut String) {
        let pending = std::mem::take(&mut self.pending);
        if self.depth > 0 {
            self.hidden.push_str(&pending);
        } else {
            pass.push_str(&pending);
        }
    }

    fn take_hidden(&mut self) -> Option<String> {
        (!self.hidden.is_empty()).then(|| std::mem::take(&mut self.hidden))
    }
}

/// Where the parser is.
#[derive(Debug)]
enum Mode {
    /// Ordinary text.
    Text,
    /// Inside a code fence; the buffer holds it from the opening fence on.
    Fence(Fence),
    /// Inside bare JSON; the buffer holds it from its first bracket.
    Json(JsonScan),
    /// Saw `[`; waiting to see whether a JSON object follows.
    MaybeList(String),
    /// An action was read; everything else is ignored.
    Done,
}

/// An open code fence: per CommonMark, a run of three or more backticks (or tildes) opens
/// it and a run of the same character, at least as long, closes it, so a fence of four
/// backticks may quote a fence of three.
#[derive(Debug)]
struct Fence {
    /// The fence from its opening run on.
    buffer: String,
    /// `` ` `` or `~`.
    marker: char,
    /// Length of the opening run.
    width: usize,
}

impl Fence {
    fn open(marker: char, width: usize) -> Self {
        Self {
            buffer: marker.to_string().repeat(width),
            marker,
            width,
        }
    }

    /// The text between the opening run and a closing run of the same width; `None`
    /// until both are there.
    fn inner(&self) -> Option<&str> {
        let end = self.buffer.len().checked_sub(self.width)?;
        self.buffer.get(self.width..end)
    }

    /// Whether the buffer ends with a run that closes the fence: for a JSON body only once
    /// the JSON is complete (a fence inside a JSON string does not end it), otherwise at once.
    fn is_closed(&self) -> bool {
        let closing = self.marker.to_string().repeat(self.width);
        if self.buffer.len() < 2 * self.width || !self.buffer.ends_with(&closing) {
            return false;
        }
        let Some(inner) = self.inner() else {
            return false;
        };
        let body = strip_language_tag(inner).trim_start();
        if body.starts_with('{') || body.starts_with('[') {
            let scan = JsonScan::of(body);
            scan.depth == 0 && !scan.in_string
        } else {
            true
        }
    }

    /// The actions of a closed fence.
    fn actions(&self) -> Option<Vec<Action>> {
        parse_actions(strip_language_tag(self.inner()?))
    }

    /// The actions of a fence the stream ended in (the stop word may have cut the closing
    /// run): everything after the opening run is the body.
    fn actions_at_end(&self) -> Option<Vec<Action>> {
        parse_actions(strip_language_tag(self.buffer.get(self.width..)?))
    }
}

/// String-aware bracket matching over a JSON text.
#[derive(Debug, Default)]
struct JsonScan {
    text: String,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl JsonScan {
    fn push(&mut self, c: char) {
        self.text.push(c);
        if self.in_string {
            match (self.escaped, c) {
                (true, _) => self.escaped = false,
                (false, '\\') => self.escaped = true,
                (false, '"') => self.in_string = false,
                (false, _) => {}
            }
            return;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    fn is_complete(&self) -> bool {
        self.depth == 0 && !self.in_string && !self.text.is_empty()
    }

    /// Scans a whole text.
    fn of(text: &str) -> Self {
        let mut scan = Self::default();
        text.chars().for_each(|c| scan.push(c));
        scan
    }
}

/// The streaming parser. Feed it with [`ReactParser::push`], end with [`ReactParser::finish`].
#[derive(Debug)]
pub struct ReactParser {
    think: ThinkFilter,
    mode: Mode,
    /// A run of backticks or tildes seen in text mode, not yet decided on: the character and
    /// how many.
    fence_run: Option<(char, usize)>,
    /// A possible prefix being matched, as written.
    prefix: String,
    /// Spaces after a stripped prefix are dropped.
    after_prefix: bool,
    /// The last character handled in text mode, for the word-start test.
    last: Option<char>,
    /// Text to show, not yet handed out.
    text: String,
    out: Vec<Piece>,
    /// The actions' inputs as they are written, read from the blob being scanned.
    inputs: InputScan,
}

impl Default for ReactParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ReactParser {
    /// A parser at the start of a model turn.
    pub fn new() -> Self {
        Self {
            think: ThinkFilter::default(),
            mode: Mode::Text,
            fence_run: None,
            prefix: String::new(),
            after_prefix: false,
            last: None,
            text: String::new(),
            out: Vec::new(),
            inputs: InputScan::default(),
        }
    }

    /// The input written since the last call, of each action being written whose name is
    /// known (the action itself comes whole as [`Piece::Actions`]).
    pub fn forming(&mut self) -> Vec<InputPiece> {
        self.inputs.take()
    }

    /// Feeds a chunk of model text and returns what it settles.
    pub fn push(&mut self, chunk: &str) -> Vec<Piece> {
        let mut passed = String::new();
        for c in chunk.chars() {
            passed.clear();
            self.think.push(c, &mut passed);
            if let Some(hidden) = self.think.take_hidden() {
                self.hide(hidden);
            }
            for c in passed.chars() {
                self.step(c);
            }
        }
        self.drain()
    }

    /// Ends the turn: releases whatever is still held back.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut passed = String::new();
        self.think.finish(&mut passed);
        if let Some(hidden) = self.think.take_hidden() {
            self.hide(hidden);
        }
        passed.chars().for_each(|c| self.step(c));
        self.flush_fence_run();
        let prefix = std::mem::take(&mut self.prefix);
        self.text.push_str(&prefix);
        match std::mem::replace(&mut self.mode, Mode::Text) {
            Mode::Fence(fence) => self.close_fence_at_end(fence),
            Mode::Json(scan) => self.settle_blob(scan.text),
            Mode::MaybeList(buffer) => self.text.push_str(&buffer),
            Mode::Text => {}
            Mode::Done => self.mode = Mode::Done,
        }
        self.drain()
    }

    fn drain(&mut self) -> Vec<Piece> {
        self.flush_text();
        std::mem::take(&mut self.out)
    }

    fn flush_text(&mut self) {
        if !self.text.is_empty() {
            self.out.push(Piece::Text(std::mem::take(&mut self.text)));
        }
    }

    fn hide(&mut self, text: String) {
        self.flush_text();
        match self.out.last_mut() {
            Some(Piece::Hidden(last)) => last.push_str(&text),
            _ => self.out.push(Piece::Hidden(text)),
        }
    }

    fn step(&mut self, c: char) {
        match &mut self.mode {
            Mode::Done => self.hide(c.to_string()),
            Mode::Text => self.step_text(c),
            Mode::Fence(fence) => {
                fence.buffer.push(c);
                self.inputs.push(c);
                if fence.is_closed() {
                    if let Mode::Fence(fence) = std::mem::replace(&mut self.mode, Mode::Text) {
                        self.settle_fence(fence);
                    }
                }
            }
            Mode::Json(scan) => {
                scan.push(c);
                self.inputs.push(c);
                if scan.is_complete() {
                    let text = std::mem::take(&mut scan.text);
                    self.mode = Mode::Text;
                    self.settle_blob(text);
                }
            }
            Mode::MaybeList(buffer) => {
                if c.is_whitespace() {
                    buffer.push(c);
                } else if c == '{' {
                    let text = format!("{buffer}{c}");
                    text.chars().for_each(|c| self.inputs.push(c));
                    self.mode = Mode::Json(JsonScan::of(&text));
                } else {
                    let buffer = std::mem::take(buffer);
                    self.mode = Mode::Text;
                    self.text.push_str(&buffer);
                    self.last = buffer.chars().last();
                    self.step_text(c);
                }
            }
        }
    }

    fn step_text(&mut self, c: char) {
        if !self.prefix.is_empty() && self.continue_prefix(c) {
            return;
        }
        if self.after_prefix && (c == ' ' || c == '\t') {
            self.hide(c.to_string());
            return;
        }
        self.after_prefix = false;
        if c == '`' || c == '~' {
            match &mut self.fence_run {
                Some((marker, count)) if *marker == c => *count += 1,
                _ => {
                    self.flush_fence_run();
                    self.fence_run = Some((c, 1));
                }
            }
            return;
        }
        if let Some((marker, width @ 3..)) = self.fence_run {
            self.fence_run = None;
            self.mode = Mode::Fence(Fence::open(marker, width));
            self.step(c);
            return;
        }
        self.flush_fence_run();
        match c {
            '{' => {
                self.inputs.push('{');
                self.mode = Mode::Json(JsonScan::of("{"));
            }
            '[' => self.mode = Mode::MaybeList("[".to_owned()),
            _ if self.at_word_start() && starts_prefix(c) => self.prefix.push(c),
            _ => self.show(c),
        }
    }

    fn show(&mut self, c: char) {
        self.text.push(c);
        self.last = Some(c);
    }

    fn at_word_start(&self) -> bool {
        self.last.is_none_or(char::is_whitespace)
    }

    /// Shows a run of fence characters that did not open a fence.
    fn flush_fence_run(&mut self) {
        if let Some((marker, count)) = self.fence_run.take() {
            for _ in 0..count {
                self.show(marker);
            }
        }
    }

    /// Extends a pending prefix match with `c`; returns whether `c` was used.
    fn continue_prefix(&mut self, c: char) -> bool {
        let candidate = format!("{}{}", self.prefix, c).to_lowercase();
        if PREFIXES.contains(&candidate.as_str()) {
            let mut matched = std::mem::take(&mut self.prefix);
            matched.push(c);
            if candidate == ANSWER_PREFIX {
                self.flush_text();
                self.out.push(Piece::AnswerMark(matched));
            } else {
                self.hide(matched);
            }
            self.last = Some(':');
            self.after_prefix = true;
            return true;
        }
        if PREFIXES.iter().any(|p| p.starts_with(&candidate)) {
            self.prefix.push(c);
            return true;
        }
        let released = std::mem::take(&mut self.prefix);
        released.chars().for_each(|r| self.show(r));
        false
    }

    fn settle_fence(&mut self, fence: Fence) {
        match fence.actions() {
            Some(actions) => self.emit_actions(actions, fence.buffer),
            None => {
                self.text.push_str(&fence.buffer);
                self.last = Some(fence.marker);
                self.inputs = InputScan::default();
            }
        }
    }

    /// At the end of the stream, a fence whose JSON is complete still counts (the stop word
    /// may have cut the closing run); anything else is shown as written.
    fn close_fence_at_end(&mut self, fence: Fence) {
        match fence.actions_at_end() {
            Some(actions) => self.emit_actions(actions, fence.buffer),
            None => self.text.push_str(&fence.buffer),
        }
    }

    fn settle_blob(&mut self, text: String) {
        match parse_actions(&text) {
            Some(actions) => self.emit_actions(actions, text),
            None => {
                self.last = text.chars().last();
                self.text.push_str(&text);
                self.inputs = InputScan::default();
            }
        }
    }

    fn emit_actions(&mut self, actions: Vec<Action>, source: String) {
        self.flush_text();
        self.out.push(Piece::Actions { actions, source });
        self.mode = Mode::Done;
    }
}

fn starts_prefix(c: char) -> bool {
    let lower = c.to_ascii_lowercase();
    PREFIXES.iter().any(|p| p.starts_with(lower))
}

/// The body of a fence without its language tag (`json`, `JSON`, …) line.
fn strip_language_tag(inner: &str) -> &str {
    let first_line_end = inner.find('\n').unwrap_or(inner.len());
    let tag = &inner[..first_line_end];
    if !tag.is_empty()
        && tag
            .trim()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        &inner[first_line_end..]
    } else {
        inner
    }
}

/// Reads one or more actions from JSON text; `None` when it is not an action.
pub fn parse_actions(text: &str) -> Option<Vec<Action>> {
    let value = parse_lenient(text.trim())?;
    match value {
        Value::Object(map) => action_from(map).map(|action| vec![action]),
        Value::Array(items) if !items.is_empty() => items
            .into_iter()
            .map(|item| match item {
                Value::Object(map) => action_from(map),
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Array(_) => None,
            })
            .collect(),
        Value::Array(_) | Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            None
        }
    }
}

/// JSON as models write it: raw newlines and tabs inside strings are accepted.
fn parse_lenient(text: &str) -> Option<Value> {
    serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&escape_raw_controls(text)).ok())
}

fn escape_raw_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut scan = JsonScan::default();
    for c in text.chars() {
        let in_string = scan.in_string;
        scan.push(c);
        match c {
            '\n' if in_string => out.push_str("\\n"),
            '\r' if in_string => out.push_str("\\r"),
            '\t' if in_string => out.push_str("\\t"),
            _ => out.push(c),
        }
    }
    out
}

const NAME_KEYS: [&str; 4] = ["action", "action_name", "tool", "tool_name"];
const INPUT_KEYS: [&str; 6] = [
    "action_input",
    "input",
    "tool_input",
    "arguments",
    "args",
    "parameters",
];

/// An action from an object: a name under `action` (or a similar key, or `name` beside an
/// input), and an input under `action_input` (or a similar key; absent means none).
fn action_from(mut map: Map<String, Value>) -> Option<Action> {
    let input_key = INPUT_KEYS
        .iter()
        .find(|k| map.contains_key(**k))
        .map(|k| (*k).to_owned())
        .or_else(|| {
            map.keys()
                .find(|k| k.to_lowercase().contains("input"))
                .cloned()
        });
    let name_key = NAME_KEYS
        .iter()
        .find(|k| map.get(**k).is_some_and(Value::is_string))
        .copied()
        .or_else(|| {
            (input_key.is_some() && map.get("name").is_some_and(Value::is_string)).then_some("name")
        })?;
    let name = map.remove(name_key)?.as_str()?.trim().to_owned();
    if name.is_empty() {
        return None;
    }
    let input = input_key
        .and_then(|k| map.remove(&k))
        .unwrap_or(Value::Null);
    Some(Action { name, input })
}

#[cfg(test)]
mod tests;
