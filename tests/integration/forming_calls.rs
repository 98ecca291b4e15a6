//! Tool calls as the model writes them: `tool_call_delta` events between a round's text and
//! `tool_started`, gathered at the configured pace, whose joined text is the call's
//! arguments (function calling, on OpenAI-compatible servers and on Anthropic) or the
//! action's input as written (ReAct); stored like every event, so `Attach` replays them.

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::fake_anthropic::{FakeAnthropic, Turn};
use crate::support::fake_openai::ScriptedCall;
use crate::support::{
    end_of, replayed, run_request, run_to_end, start, streamed_text, Agents, FakeOpenAi, Reply,
    RunRequestExt, TestServer,
};

/// `{"expression": "1+1+…+1"}` in 40 pieces: the opening, 38 `1+`, the closing.
fn expression_pieces() -> Vec<&'static str> {
    let mut pieces = vec!["{\"expression\": \""];
    pieces.extend(std::iter::repeat_n("1+", 38));
    pieces.push("1\"}");
    pieces
}

/// The `tool_call_delta`s of `events` before the first `tool_started`, and that event's
/// call.
fn deltas_before_call(events: &[pb::RunEvent]) -> (Vec<pb::ToolCallDelta>, pb::ToolCall) {
    let mut deltas = Vec::new();
    for event in events {
        match &event.event {
            Some(Event::ToolCallDelta(delta)) => deltas.push(delta.clone()),
            Some(Event::ToolStarted(started)) => {
                return (deltas, started.tool_call.clone().unwrap());
            }
            _ => {}
        }
    }
    panic!("no tool_started in {events:?}");
}

/// What every forming call's deltas must say: the final call's id and place, the name on
/// the first only, and within the expected count.
fn assert_forming(deltas: &[pb::ToolCallDelta], call: &pb::ToolCall, expected_name: &str) {
    assert!(
        (5..=39).contains(&deltas.len()),
        "{} deltas for 40 pieces",
        deltas.len()
    );
    assert!(deltas
        .iter()
        .all(|d| d.tool_call_id == call.id && d.index == 0));
    assert_eq!(deltas[0].name, expected_name);
    assert!(deltas[1..].iter().all(|d| d.name.is_empty()));
    assert!(deltas.iter().all(|d| !d.truncated));
}

/// An OpenAI-compatible server that streams one call's arguments in 40 pieces 30 ms apart:
/// the client sees them forming in fewer, larger deltas before `tool_started`, joined
/// exactly the call's arguments, and `Attach` from the start gives the same events.
#[tokio::test]
async fn openai_arguments_stream_as_they_form_and_replay_the_same() {
    let call = ScriptedCall::new("call_sum", "eval_expression", &expression_pieces());
    let (_llm, _server, mut agents) = start(vec![
        Reply::SlowCalls {
            text: vec!["Adding up."],
            calls: vec![call],
            delay_ms: 30,
        },
        Reply::text(&["It is 39."], (5, 5)),
    ])
    .await;
    let events = run_to_end(
        &mut agents,
        run_request("Sum them", &[("maths", "eval_expression")]),
    )
    .await;
    assert_eq!(end_of(&events).answer, "Adding up.\nIt is 39.");
    let (deltas, call) = deltas_before_call(&events);
    assert_forming(&deltas, &call, "eval_expression");
    let joined: String = deltas.iter().map(|d| d.arguments_delta.as_str()).collect();
    assert_eq!(joined, call.arguments);
    assert_eq!(joined, expression_pieces().concat());
    assert_eq!(call.id, "call_sum");

    let replayed = replayed(&mut agents, &events[0].message_id).await;
    assert_eq!(
        replayed, events,
        "Attach from 0 replays the stream as it was"
    );
}

/// Anthropic's `input_json_delta`s, 40 of them 30 ms apart, form the call the same way,
/// under Anthropic's own call id.
#[tokio::test]
async fn anthropic_input_json_deltas_stream_as_they_form() {
    let (_anthropic, _server, mut agents) = claude(vec![
        Turn::Paced {
            events: tool_use_events(&expression_pieces()),
            delay_ms: 30,
        },
        Turn::Stream(crate::support::fake_anthropic::transcripts::ANSWER_AFTER_TOOL),
    ])
    .await;
    let request = run_request("Sum them", &[("maths", "eval_expression")])
        .provider("claude")
        .model(CLAUDE);
    let events = run_to_end(&mut agents, request).await;
    let (deltas, call) = deltas_before_call(&events);
    assert_forming(&deltas, &call, "eval_expression");
    assert_eq!(call.id, "toolu_sum");
    let joined: String = deltas.iter().map(|d| d.arguments_delta.as_str()).collect();
    assert_eq!(joined, expression_pieces().concat());
    assert_eq!(joined, call.arguments);
    assert_eq!(replayed(&mut agents, &events[0].message_id).await, events);
}

/// A ReAct action's input streams as the model writes it, once the action is named (input
/// written before the name comes with the first delta), joined exactly the raw text; the
/// call that runs has the same id; a `Final Answer` streams as answer text only.
#[tokio::test]
async fn react_action_input_streams_as_written_and_a_final_answer_as_text() {
    for (name_first, expected_first) in [(true, None), (false, Some("\"expression\""))] {
        let mut input = vec!["{\"expression\": \""];
        input.extend(std::iter::repeat_n("1+", 28));
        input.push("1\"}");
        let raw_input = input.concat();
        let mut text = vec!["Thought: I will add.\nAction:\n```json\n{"];
        if name_first {
            text.push("\"action\": \"eval_expression\", \"action_input\": ");
            text.extend(input.iter().copied());
        } else {
            text.push("\"action_input\": ");
            text.extend(input.iter().copied());
            text.push(", \"action\": \"eval_expression\"");
        }
        text.push("}\n```");
        let (_llm, _server, mut agents) = start(vec![
            Reply::Slow {
                text: text.clone(),
                delay_ms: 30,
            },
            Reply::text(
                &["Action:\n```json\n{\"action\": \"Final Answer\", \"action_input\": \"It is 29.\"}\n```"],
                (5, 5),
            ),
        ])
        .await;
        let request = run_request("Sum them", &[("maths", "eval_expression")])
            .strategy(pb::Strategy::ChainOfThought);
        let events = run_to_end(&mut agents, request).await;
        let (deltas, call) = deltas_before_call(&events);
        assert!(
            (1..=29).contains(&deltas.len()),
            "{} deltas for 30 pieces",
            deltas.len()
        );
        if name_first {
            assert!(deltas.len() >= 5, "{} deltas", deltas.len());
        }
        assert!(deltas
            .iter()
            .all(|d| d.tool_call_id == call.id && d.index == 0));
        assert_eq!(deltas[0].name, "eval_expression");
        if let Some(start) = expected_first {
            assert!(
                deltas[0].arguments_delta.starts_with(&format!("{{{start}")),
                "the input written before the name leads: {:?}",
                deltas[0].arguments_delta
            );
        }
        let joined: String = deltas.iter().map(|d| d.arguments_delta.as_str()).collect();
        assert_eq!(joined, raw_input, "joined, the input as written");
        assert_eq!(call.name, "eval_expression");
        let after_call = events
            .iter()
            .skip_while(|e| !matches!(e.event, Some(Event::ToolStarted(_))));
        assert!(
            !after_call
                .clone()
                .any(|e| matches!(e.event, Some(Event::ToolCallDelta(_)))),
            "the Final Answer is no call"
        );
        assert!(streamed_text(&events).ends_with("It is 29."));
        assert!(end_of(&events).answer.ends_with("It is 29."));
    }
}

/// The Anthropic model served beside the scripted OpenAI one.
const CLAUDE: &str = "claude-sonnet-4-5";

/// The service with provider `claude` pointed at a scripted Anthropic server.
async fn claude(turns: Vec<Turn>) -> (FakeAnthropic, TestServer, Agents) {
    let anthropic = FakeAnthropic::start(turns).await;
    let unused = FakeOpenAi::start(vec![]).await;
    let base_url = anthropic.base_url();
    let server = TestServer::start_edited(&unused.base_url(), |config| {
        let provider = agent_runner::config::Config::from_toml(&format!(
            "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{base_url}\"\napi_key = \"k\"\n\n[[providers.claude.models]]\nname = \"{CLAUDE}\"\n"
        ))
        .unwrap();
        config.providers.extend(provider.providers);
    })
    .await;
    let agents = server.agents().await;
    (anthropic, server, agents)
}

/// A Messages event stream that calls `eval_expression` with `input` in these pieces.
fn tool_use_events(input: &[&str]) -> String {
    let mut events = vec![
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":40,"output_tokens":1},"content":[],"stop_reason":null}}"#.to_owned(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_sum","name":"eval_expression","input":{}}}"#.to_owned(),
    ];
    for piece in input {
        let delta = serde_json::json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": piece}});
        events.push(delta.to_string());
    }
    events.push(r#"{"type":"content_block_stop","index":0}"#.to_owned());
    events.push(r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":60}}"#.to_owned());
    events.push(r#"{"type":"message_stop"}"#.to_owned());
    events
        .into_iter()
        .map(|data| {
            let kind = serde_json::from_str::<serde_json::Value>(&data).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned();
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect()
}
