#![allow(clippy::wildcard_enum_match_arm)]

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// The parser's output with adjacent pieces of the same kind merged, so outputs of
/// different chunkings compare equal.
fn normalize(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (out.last_mut(), piece) {
            (Some(Piece::Text(last)), Piece::Text(next)) => last.push_str(&next),
            (Some(Piece::Hidden(last)), Piece::Hidden(next)) => last.push_str(&next),
            (_, Piece::Text(next)) if next.is_empty() => {}
            (_, piece) => out.push(piece),
        }
    }
    out
}

fn parse_chunks(chunks: &[&str]) -> Vec<Piece> {
    let mut parser = ReactParser::new();
    let mut pieces = Vec::new();
    for chunk in chunks {
        pieces.extend(parser.push(chunk));
    }
    pieces.extend(parser.finish());
    normalize(pieces)
}

/// Splits `text` at the given char positions.
fn split_at_chars<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let mut points: Vec<usize> = cuts
        .iter()
        .filter_map(|c| boundaries.get(*c % boundaries.len().max(1)).copied())
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points {
        chunks.push(&text[start..point]);
        start = point;
    }
    chunks.push(&text[start..]);
    chunks
}

/// Parses `text` whole, one char at a time and in a few fixed chunkings, asserting that all
/// give the same result, which is returned.
fn parse(text: &str) -> Vec<Piece> {
    let whole = parse_chunks(&[text]);
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let one_by_one: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(parse_chunks(&one_by_one), whole, "char by char: {text:?}");
    for cuts in [
        vec![1, 5],
        vec![2, 3, 7, 11, 13],
        vec![4, 9, 16, 25, 36, 49],
    ] {
        assert_eq!(
            parse_chunks(&split_at_chars(text, &cuts)),
            whole,
            "cuts {cuts:?}: {text:?}"
        );
    }
    whole
}

fn shown(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn actions(pieces: &[Piece]) -> Vec<(String, Value)> {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Actions { actions, .. } => Some(actions.clone()),
            _ => None,
        })
        .flatten()
        .map(|a| (a.name, a.input))
        .collect()
}

fn action(name: &str, input: Value) -> (String, Value) {
    (name.to_owned(), input)
}

struct Case {
    name: &'static str,
    input: &'static str,
    shown: &'static str,
    actions: Vec<(String, Value)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "fenced json with a language tag, prefixes stripped",
            input: "Thought: I need to search.\nAction:\n```json\n{\"action\": \"web_search\", \"action_input\": {\"query\": \"x\"}}\n```",
            shown: "I need to search.\n\n",
            actions: vec![action("web_search", json!({"query": "x"}))],
        },
        Case {
            name: "fence without a tag",
            input: "Action: ```\n{\"action\": \"a\", \"action_input\": {}}\n```",
            shown: "",
            actions: vec![action("a", json!({}))],
        },
        Case {
            name: "a fence of four backticks",
            input: "Thought: run it\nAction:\n````json\n{\"action\": \"a\", \"action_input\": {\"q\": 1}}\n````",
            shown: "run it\n\n",
            actions: vec![action("a", json!({"q": 1}))],
        },
        Case {
            name: "a fence of four backticks quoting a fence of three in a non-JSON body is text",
            input: "````\nuse ```json\nfor code\n````\nthen",
            shown: "````\nuse ```json\nfor code\n````\nthen",
            actions: vec![],
        },
        Case {
            name: "a four-backtick fence whose action input quotes a three-backtick fence",
            input: "````json\n{\"action\": \"run\", \"action_input\": \"```py\\nx\\n```\"}\n````",
            shown: "",
            actions: vec![action("run", json!("```py\nx\n```"))],
        },
        Case {
            name: "a fence of tildes",
            input: "Action:\n~~~json\n{\"action\": \"a\", \"action_input\": {}}\n~~~",
            shown: "\n",
            actions: vec![action("a", json!({}))],
        },
        Case {
            name: "a five-backtick fence cut by the stop word before its closing run",
            input: "`````\n{\"action\": \"a\", \"action_input\": {}}\n",
            shown: "",
            actions: vec![action("a", json!({}))],
        },
        Case {
            name: "two backticks and a tilde are text",
            input: "use ``x`` or ~y",
            shown: "use ``x`` or ~y",
            actions: vec![],
        },
        Case {
            name: "upper-case tag and a one-element list",
            input: "```JSON\n[{\"action\": \"a\", \"action_input\": \"q\"}]\n```",
            shown: "",
            actions: vec![action("a", json!("q"))],
        },
        Case {
            name: "bare json after text",
            input: "Thought: sure {\"action\": \"calc\", \"action_input\": {\"e\": \"1+1\"}}",
            shown: "sure ",
            actions: vec![action("calc", json!({"e": "1+1"}))],
        },
        Case {
            name: "braces inside json strings",
            input: "{\"action\": \"echo\", \"action_input\": {\"text\": \"a } b { c \\\" }\"}}",
            shown: "",
            actions: vec![action("echo", json!({"text": "a } b { c \" }"}))],
        },
        Case {
            name: "a trailing partial word is kept",
            input: "The answer is a",
            shown: "The answer is a",
            actions: vec![],
        },
        Case {
            name: "a trailing partial prefix is kept",
            input: "I will take Act",
            shown: "I will take Act",
            actions: vec![],
        },
        Case {
            name: "a stray closing brace is not duplicated",
            input: "hello } world",
            shown: "hello } world",
            actions: vec![],
        },
        Case {
            name: "raw newlines inside a json string are kept, lines are not rewritten",
            input: "```json\n{\"action\": \"Final Answer\", \"action_input\": \"Line one\nSecond\nthird\"}\n```",
            shown: "",
            actions: vec![action("Final Answer", json!("Line one\nSecond\nthird"))],
        },
        Case {
            name: "a list of several actions",
            input: "Action: [{\"action\": \"a\", \"action_input\": {}}, {\"action\": \"b\", \"action_input\": {\"x\": 1}}]",
            shown: "",
            actions: vec![action("a", json!({})), action("b", json!({"x": 1}))],
        },
        Case {
            name: "think blocks are stripped, nested ones too",
            input: "<think>maybe {\"action\": \"x\"} <think>deeper</think> hmm</think>Thought: ok\nAction: {\"action\": \"a\", \"action_input\": 1}",
            shown: "ok\n",
            actions: vec![action("a", json!(1))],
        },
        Case {
            name: "text after the action is discarded",
            input: "{\"action\": \"a\", \"action_input\": \"b\"}\nObservation: fake result\nThought: done",
            shown: "",
            actions: vec![action("a", json!("b"))],
        },
        Case {
            name: "json that is not an action stays text",
            input: "Use {\"x\": 1} here",
            shown: "Use {\"x\": 1} here",
            actions: vec![],
        },
        Case {
            name: "a code fence that is not an action is shown as written",
            input: "Here:\n```python\nprint(1)\n```\nDone.",
            shown: "Here:\n```python\nprint(1)\n```\nDone.",
            actions: vec![],
        },
        Case {
            name: "a fence inside a json string does not end the outer fence",
            input: "Through: abc\nAction: ```{\"action\": \"Final Answer\", \"action_input\": \"```echarts\\n {}\\n```\"}```",
            shown: "Through: abc\n",
            actions: vec![action("Final Answer", json!("```echarts\n {}\n```"))],
        },
        Case {
            name: "prefixes are case-insensitive at word starts only",
            input: "THOUGHT: x\nRethought: y\naction: {\"action\": \"a\", \"action_input\": {}}",
            shown: "x\nRethought: y\n",
            actions: vec![action("a", json!({}))],
        },
        Case {
            name: "a final answer prefix is hidden",
            input: "Thought: done\nFinal Answer: Paris",
            shown: "done\nParis",
            actions: vec![],
        },
        Case {
            name: "any json value is an action input",
            input: "{\"action\": \"calc\", \"action_input\": [1, 2]}",
            shown: "",
            actions: vec![action("calc", json!([1, 2]))],
        },
        Case {
            name: "null input and other name keys",
            input: "{\"tool\": \"clock\", \"input\": null}",
            shown: "",
            actions: vec![action("clock", Value::Null)],
        },
        Case {
            name: "odd json is text, never a crash",
            input: "{\"action\": 5} [] [1, 2] {\"name\": \"x\"}",
            shown: "{\"action\": 5} [] [1, 2] {\"name\": \"x\"}",
            actions: vec![],
        },
        Case {
            name: "inline code keeps its backticks",
            input: "use `x` and ``y``",
            shown: "use `x` and ``y``",
            actions: vec![],
        },
        Case {
            name: "an unclosed fence with complete json counts (the stop word cut it)",
            input: "Action:\n```json\n{\"action\": \"a\", \"action_input\": {}}\n",
            shown: "\n",
            actions: vec![action("a", json!({}))],
        },
        Case {
            name: "an unclosed brace releases its text at the end",
            input: "a { b",
            shown: "a { b",
            actions: vec![],
        },
        Case {
            name: "a list with whitespace before its object",
            input: "[\n  {\"action\": \"a\", \"action_input\": 1}\n]",
            shown: "",
            actions: vec![action("a", json!(1))],
        },
        Case {
            name: "a bracket that starts no json",
            input: "[1] see",
            shown: "[1] see",
            actions: vec![],
        },
        Case {
            name: "angle brackets that are not think tags",
            input: "a <b> c << d </think> e",
            shown: "a <b> c << d </think> e",
            actions: vec![],
        },
    ]
}

#[test]
fn every_format_and_fixed_defect_parses_the_same_in_any_chunking() {
    for case in cases() {
        let pieces = parse(case.input);
        assert_eq!(shown(&pieces), case.shown, "{}", case.name);
        assert_eq!(actions(&pieces), case.actions, "{}", case.name);
    }
}

#[test]
fn final_answer_actions_are_recognised_loosely() {
    for name in [
        "Final Answer",
        "final answer",
        "final_answer",
        "FinalAnswer",
    ] {
        assert!(
            Action {
                name: name.into(),
                input: Value::Null
            }
            .is_final_answer(),
            "{name}"
        );
    }
    assert!(!Action {
        name: "answer".into(),
        input: Value::Null
    }
    .is_final_answer());
}

#[test]
fn the_answer_mark_separates_thought_from_answer() {
    let pieces = parse("Thought: checked\nFinal Answer: 42");
    let mark = pieces
        .iter()
        .position(|p| matches!(p, Piece::AnswerMark(_)))
        .unwrap();
    assert_eq!(shown(&pieces[mark..]), "42");
}

/// Fragments that exercise every state of the parser.
const FRAGMENTS: [&str; 24] = [
    "Thought:",
    "Action:",
    "Final Answer:",
    "action",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    "`",
    "```",
    "```json\n",
    "<think>",
    "</think>",
    "<",
    "\n",
    " ",
    "a",
    "é",
    ":",
    ",",
    "{\"action\": \"t\", \"action_input\": {\"q\": \"x\"}}",
    "Observation: ",
];

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS.to_vec()), 0..40)
        .prop_map(|parts| parts.concat())
}

fn chars_of(pieces: &[Piece]) -> Vec<char> {
    let mut chars: Vec<char> = pieces
        .iter()
        .flat_map(|p| match p {
            Piece::Text(t) | Piece::Hidden(t) | Piece::AnswerMark(t) => {
                t.chars().collect::<Vec<_>>()
            }
            Piece::Actions { source, .. } => source.chars().collect(),
        })
        .collect();
    chars.sort_unstable();
    chars
}

fn check(text: &str, cuts: &[usize]) -> Result<(), TestCaseError> {
    let whole = parse_chunks(&[text]);
    let chunked = parse_chunks(&split_at_chars(text, cuts));
    prop_assert_eq!(&chunked, &whole);
    let mut expected: Vec<char> = text.chars().collect();
    expected.sort_unstable();
    prop_assert_eq!(
        chars_of(&whole),
        expected,
        "every character is accounted for once"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn structured_text_never_panics_loses_nothing_and_ignores_chunking(
        text in fragment_text(),
        cuts in prop::collection::vec(0usize..400, 0..12),
    ) {
        check(&text, &cuts)?;
    }

    #[test]
    fn arbitrary_text_never_panics_loses_nothing_and_ignores_chunking(
        text in any::<String>(),
        cuts in prop::collection::vec(0usize..400, 0..12),
    ) {
        check(&text, &cuts)?;
    }
}
