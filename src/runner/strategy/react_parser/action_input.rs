//! An action's input as the model writes it: a scan of the action blob, one character at
//! a time, that finds each action's name and the raw text of its input while the blob is
//! still open, so the input can be streamed before the action is whole.
//!
//! It reads the blob's JSON shallowly (keys and values of each action object, strings and
//! brackets matched) and never fails: text it cannot place is passed over, and the blob
//! itself is still read by the parser once complete.

use super::{Action, JsonScan, INPUT_KEYS, NAME_KEYS};

/// A piece of a forming action's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPiece {
    /// The action's place among the blob's tool actions (a `Final Answer` takes none).
    pub index: u32,
    /// The tool's name.
    pub name: String,
    /// Input text following the action's earlier pieces; the first piece holds what was
    /// written before the name was known.
    pub text: String,
}

/// What the scan expects next inside an action object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Key,
    Colon,
    Value,
    Comma,
}

/// Which field a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Input,
    Other,
}

/// The value being read.
#[derive(Debug)]
struct OpenValue {
    field: Field,
    /// A literal (number, `true` …), which ends at a separator rather than a bracket.
    literal: bool,
    text: String,
}

/// One action object.
#[derive(Debug, Default)]
struct Forming {
    name: Option<String>,
    /// A name key the object holds (a `name` key counts only beside an input).
    named_by: Option<String>,
    input: String,
    sent: usize,
}

/// The scan of one blob.
#[derive(Debug, Default)]
pub struct InputScan {
    /// Strings and brackets of the blob so far.
    json: JsonScan,
    /// The depth of action objects: 1 for one object, 2 inside a list; 0 before the blob.
    level: usize,
    expect: Option<Expect>,
    key: String,
    reading_key: bool,
    value: Option<OpenValue>,
    actions: Vec<Forming>,
}

impl InputScan {
    /// Reads one character of the blob.
    pub fn push(&mut self, c: char) {
        let was_in_string = self.json.in_string;
        let before = self.json.depth;
        self.json.push(c);
        if self.level == 0 {
            self.begin(c);
            return;
        }
        if let Some(value) = self.value.as_mut() {
            let ends_literal = value.literal
                && before == self.level
                && (c == ',' || c == '}' || c.is_whitespace());
            if !ends_literal {
                value.text.push(c);
                if let Some(action) = self.actions.last_mut() {
                    if value.field == Field::Input {
                        action.input.push(c);
                    }
                }
                let closed_string =
                    was_in_string && !self.json.in_string && self.json.depth == self.level;
                let closed_bracket = before > self.level && self.json.depth == self.level;
                if !value.literal && (closed_string || closed_bracket) {
                    self.end_value();
                }
                return;
            }
            self.end_value();
        }
        self.structure(c, was_in_string, before);
    }

    /// Before the blob's first bracket: a language tag, spaces.
    fn begin(&mut self, c: char) {
        match c {
            '{' => self.open_object(1),
            '[' => self.level = 2,
            _ => {}
        }
    }

    fn open_object(&mut self, level: usize) {
        self.level = level;
        self.expect = Some(Expect::Key);
        self.actions.push(Forming::default());
    }

    /// A character between an object's keys and values.
    fn structure(&mut self, c: char, was_in_string: bool, before: usize) {
        if self.reading_key {
            if self.json.in_string {
                self.key.push(c);
            } else {
                self.reading_key = false;
                self.expect = Some(Expect::Colon);
            }
            return;
        }
        // Between the objects of a list.
        if before == self.level - 1 {
            if c == '{' && self.level == 2 {
                self.open_object(2);
            }
            return;
        }
        if before != self.level {
            return;
        }
        match (self.expect, c) {
            (_, '}') => self.expect = None,
            (Some(Expect::Key), '"') if !was_in_string => {
                self.key.clear();
                self.reading_key = true;
            }
            (Some(Expect::Colon), ':') => self.expect = Some(Expect::Value),
            (Some(Expect::Comma), ',') => self.expect = Some(Expect::Key),
            (Some(Expect::Value), c) if !c.is_whitespace() => self.open_value(c),
            _ => {}
        }
    }

    fn open_value(&mut self, c: char) {
        let key = self.key.as_str();
        let field = if NAME_KEYS.contains(&key) || key == "name" {
            Field::Name
        } else if INPUT_KEYS.contains(&key) || key.to_lowercase().contains("input") {
            Field::Input
        } else {
            Field::Other
        };
        if field == Field::Input {
            if let Some(action) = self.actions.last_mut() {
                action.input.push(c);
            }
        }
        self.value = Some(OpenValue {
            field,
            literal: !matches!(c, '"' | '{' | '['),
            text: c.to_string(),
        });
    }

    fn end_value(&mut self) {
        self.expect = Some(Expect::Comma);
        let Some(value) = self.value.take() else {
            return;
        };
        let Some(action) = self.actions.last_mut() else {
            return;
        };
        if value.field != Field::Name {
            return;
        }
        let Ok(name) = serde_json::from_str::<String>(&value.text) else {
            return;
        };
        let name = name.trim().to_owned();
        // The parser's rule: a name key wins over `name`, which counts beside an input.
        let by_name_key = NAME_KEYS.contains(&self.key.as_str());
        let replaces = match action.named_by.as_deref() {
            None => true,
            Some("name") => by_name_key,
            Some(_) => false,
        };
        if !name.is_empty() && replaces {
            action.name = Some(name);
            action.named_by = Some(self.key.clone());
        }
    }

    /// The input written since the last call, of every tool action whose name is known.
    pub fn take(&mut self) -> Vec<InputPiece> {
        let mut pieces = Vec::new();
        let mut index = 0;
        for action in &mut self.actions {
            let Some(name) = &action.name else {
                // Later actions cannot be numbered before this one is named.
                break;
            };
            let final_answer = Action {
                name: name.clone(),
                input: serde_json::Value::Null,
            }
            .is_final_answer();
            if final_answer {
                continue;
            }
            if action.sent < action.input.len() {
                pieces.push(InputPiece {
                    index,
                    name: name.clone(),
                    text: action.input[action.sent..].to_owned(),
                });
                action.sent = action.input.len();
            }
            index += 1;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunking of the blob gives the same input, and joined it is the raw text.
    fn inputs(blob: &str, chunk: usize) -> Vec<(u32, String, String)> {
        let mut scan = InputScan::default();
        let mut joined: Vec<(u32, String, String)> = Vec::new();
        let chars: Vec<char> = blob.chars().collect();
        for piece in chars.chunks(chunk) {
            piece.iter().for_each(|c| scan.push(*c));
            for p in scan.take() {
                match joined.iter_mut().find(|(i, _, _)| *i == p.index) {
                    Some((_, _, text)) => text.push_str(&p.text),
                    None => joined.push((p.index, p.name, p.text)),
                }
            }
        }
        joined
    }

    #[test]
    fn an_input_streams_once_its_action_is_named() {
        let blob = r#"{"action": "search", "action_input": {"q": "rust \"sled\"", "n": [1, 2]}}"#;
        for chunk in [1, 3, 7, 100] {
            assert_eq!(
                inputs(blob, chunk),
                vec![(
                    0,
                    "search".to_owned(),
                    r#"{"q": "rust \"sled\"", "n": [1, 2]}"#.to_owned()
                )],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn input_written_before_the_name_comes_with_the_first_piece() {
        let blob = "json\n{\"action_input\": \"Paris weather\",\n \"action\": \"weather\"}";
        let mut scan = InputScan::default();
        for c in blob.chars().take(blob.find(",\n").unwrap()) {
            scan.push(c);
        }
        assert!(scan.take().is_empty(), "nothing before the name");
        for c in blob.chars().skip(blob.find(",\n").unwrap()) {
            scan.push(c);
        }
        let pieces = scan.take();
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].text, "\"Paris weather\"");
        assert_eq!(pieces[0].name, "weather");
    }

    #[test]
    fn a_final_answer_is_not_a_call_and_lists_number_the_calls() {
        assert!(inputs(r#"{"action": "Final Answer", "action_input": "hi"}"#, 2).is_empty());
        let list = r#"[{"action": "a", "action_input": 1}, {"action": "Final Answer", "action_input": "x"}, {"action": "b", "action_input": {"k": true}}]"#;
        assert_eq!(
            inputs(list, 4),
            vec![
                (0, "a".to_owned(), "1".to_owned()),
                (1, "b".to_owned(), "{\"k\": true}".to_owned())
            ]
        );
    }

    #[test]
    fn text_that_is_no_action_gives_nothing_and_never_panics() {
        for blob in [
            "{",
            "{\"action\"",
            "[[[",
            "{\"a\": }}}}",
            "\"\\",
            "{\"action\": 5}",
        ] {
            assert!(inputs(blob, 1).is_empty(), "{blob}");
        }
    }
}
