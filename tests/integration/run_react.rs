//! Chain-of-thought (ReAct) runs end to end, in chat and completion modes.

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use serde_json::Value;

use crate::support::RunRequestExt;
use crate::support::{
    end_of, kinds, message, run_request, run_to_end, streamed_text, thoughts, PLAIN_MODEL,
};
use crate::support::{start, Reply};

fn react_script() -> Vec<Reply> {
    vec![
        Reply::text(
            &[
                "Thought: I should ",
                "calculate.\nAction:\n``",
                "`json\n{\"action\": \"eval_expression\", \"action_input\": {\"expres",
                "sion\": \"6*7\"}}\n```",
            ],
            (30, 20),
        ),
        Reply::text(
            &[
                "Thought: I know it.\nAction:\n```json\n{\"action\": \"Final Answer\", ",
                "\"action_input\": \"It is 42.\"}\n```",
            ],
            (50, 10),
        ),
    ]
}

fn react_request(mode: pb::ModelMode) -> pb::RunRequest {
    run_request("What is 6 times 7?", &[("maths", "eval_expression")])
        .strategy(pb::Strategy::ChainOfThought)
        .mode(mode)
}

fn assert_no_tools_and_observation_stop(request: &Value) {
    assert!(
        request.get("tools").is_none(),
        "ReAct offers no native tools"
    );
    let stop: Vec<&str> = request["stop"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(stop.contains(&"Observation"), "{stop:?}");
}

/// In chat mode the user sees the model's thoughts stream without the action JSON, the tool
/// runs, its observation reaches round 2 as scratchpad text followed by `continue`, and the
/// Final Answer action's input is the answer; the thoughts read back with their actions.
#[tokio::test]
async fn a_chat_mode_react_run_uses_the_tool_and_answers() {
    let (llm, _server, mut client) = start(react_script()).await;

    let events = run_to_end(&mut client, react_request(pb::ModelMode::Chat)).await;

    assert!(
        matches!(kinds(&events)[0], Event::Started(s) if s.strategy == pb::Strategy::ChainOfThought as i32)
    );
    let shown = streamed_text(&events);
    assert_eq!(shown, "I should calculate.\n\nI know it.\n\nIt is 42.");
    assert!(!shown.contains("eval_expression") && !shown.contains('{'));
    let end = end_of(&events);
    assert_eq!(end.answer, "It is 42.");
    assert_eq!(end.usage.unwrap().total_tokens, 110);

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    requests
        .iter()
        .for_each(assert_no_tools_and_observation_stop);
    let first = requests[0]["messages"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    assert!(first[0]["content"]
        .as_str()
        .unwrap()
        .contains("\"name\":\"eval_expression\""));
    let second = requests[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 4);
    assert_eq!(second[2]["role"], "assistant");
    let scratchpad = second[2]["content"].as_str().unwrap();
    assert!(
        scratchpad.starts_with("Thought: I should calculate.\nAction:\n```json\n"),
        "{scratchpad}"
    );
    assert!(scratchpad.ends_with("Observation: 42\n\n"), "{scratchpad}");
    assert_eq!(second[3]["content"], "continue");

    let message_id = events[0].message_id.clone();
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.answer, "It is 42.");
    assert_eq!(message.strategy, pb::Strategy::ChainOfThought as i32);
    let thoughts = thoughts(&mut client, message_id).await;
    assert_eq!(thoughts.len(), 2);
    assert_eq!(thoughts[0].thought, "I should calculate.");
    assert_eq!(thoughts[0].tool_calls.len(), 1);
    assert_eq!(thoughts[0].tool_calls[0].name, "eval_expression");
    assert_eq!(
        thoughts[0].tool_calls[0].arguments,
        "{\"expression\":\"6*7\"}"
    );
    assert_eq!(thoughts[0].tool_calls[0].observation, "42");
    assert_eq!(thoughts[1].thought, "I know it.");
    assert_eq!(thoughts[1].answer, "It is 42.");
    assert!(thoughts[1].tool_calls.is_empty());
}

/// In completion mode every round is one prompt holding the query once and the scratchpad
/// with the observation, ending where the model continues.
#[tokio::test]
async fn a_completion_mode_react_run_renders_one_prompt_per_round() {
    let (llm, _server, mut client) = start(react_script()).await;

    let events = run_to_end(&mut client, react_request(pb::ModelMode::Completion)).await;

    assert_eq!(end_of(&events).answer, "It is 42.");
    let requests = llm.requests();
    requests
        .iter()
        .for_each(assert_no_tools_and_observation_stop);
    let prompts: Vec<&str> = requests
        .iter()
        .map(|r| {
            let messages = r["messages"].as_array().unwrap();
            assert_eq!(messages.len(), 1);
            messages[0]["content"].as_str().unwrap()
        })
        .collect();
    assert!(
        prompts[0].ends_with("Question: What is 6 times 7?\nThought:"),
        "{}",
        prompts[0]
    );
    assert!(!prompts[0].contains("Question: Question:"));
    assert!(
        prompts[1].contains("Observation: 42\n\nThought:"),
        "{}",
        prompts[1]
    );
}

/// A model configured without tool-call features runs ReAct when the request leaves the
/// strategy open; a reply with no action at all is the message's answer.
#[tokio::test]
async fn models_without_tool_calls_run_react_and_a_plain_reply_is_the_answer() {
    let (llm, _server, mut client) =
        start(vec![Reply::text(&["Paris is the ", "capital."], (5, 4))]).await;
    let request =
        run_request("Capital of France?", &[("maths", "eval_expression")]).model(PLAIN_MODEL);

    let events = run_to_end(&mut client, request).await;

    assert!(
        matches!(kinds(&events)[0], Event::Started(s) if s.strategy == pb::Strategy::ChainOfThought as i32)
    );
    assert_eq!(end_of(&events).answer, "Paris is the capital.");
    assert!(llm.requests()[0].get("tools").is_none());
    let message = message(&mut client, events[0].message_id.clone()).await;
    assert_eq!(message.answer, "Paris is the capital.");
    assert_eq!(message.strategy, pb::Strategy::ChainOfThought as i32);
}
