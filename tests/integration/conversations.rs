//! A conversation keeps its turns: later runs send the earlier ones to the model.

use agent_runner::pb;
use serde_json::Value;

use crate::fake_openai::{FakeOpenAi, Reply, ScriptedCall};
use crate::server::{end_of, run_request, run_to_end, TestServer};

fn roles(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

/// The third request of a three-turn conversation carries turns 1 and 2, with turn 1's tool
/// call and its result under the same call id, before the new query.
#[tokio::test]
async fn function_calling_turns_replay_earlier_tool_calls_under_their_ids() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "call_sum",
                "eval_expression",
                &["{\"expression\": \"2+2\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["2+2 is 4."], (1, 1)),
        Reply::text(&["You asked about 2+2."], (1, 1)),
        Reply::text(&["Yes, 4."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let first = run_to_end(
        &mut client,
        run_request("What is 2+2?", &[("maths", "eval_expression")]),
    )
    .await;
    let conversation_id = first[0].conversation_id.clone();
    for query in ["What did I ask?", "Was it 4?"] {
        let mut request = run_request(query, &[("maths", "eval_expression")]);
        request.conversation_id = conversation_id.clone();
        run_to_end(&mut client, request).await;
    }

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let third = &requests[3];
    assert_eq!(
        roles(third),
        vec![
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    let messages = third["messages"].as_array().unwrap();
    assert_eq!(messages[1]["content"], "What is 2+2?");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_sum");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        "{\"expression\": \"2+2\"}"
    );
    assert_eq!(messages[3]["tool_call_id"], "call_sum");
    assert_eq!(messages[3]["content"], "4");
    assert_eq!(messages[4]["content"], "2+2 is 4.");
    assert_eq!(messages[5]["content"], "What did I ask?");
    assert_eq!(messages[6]["content"], "You asked about 2+2.");
    assert_eq!(messages[7]["content"], "Was it 4?");
}

/// `memory.max_turns` keeps only the newest turns.
#[tokio::test]
async fn memory_max_turns_keeps_the_newest_turns() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&["ok"], (1, 1)));
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let first = run_to_end(&mut client, run_request("one", &[])).await;
    let conversation_id = first[0].conversation_id.clone();
    for query in ["two", "three"] {
        let mut request = run_request(query, &[]);
        request.conversation_id = conversation_id.clone();
        request.agent.as_mut().unwrap().memory = Some(pb::MemoryConfig { max_turns: 1 });
        run_to_end(&mut client, request).await;
    }

    let last = &llm.requests()[2];
    let users: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, vec!["two", "three"]);
}

/// A chain-of-thought turn comes back to the model collapsed into one assistant message:
/// its tool rounds as scratchpad text, then its final answer.
#[tokio::test]
async fn react_turns_replay_as_collapsed_scratchpads() {
    let llm = FakeOpenAi::start(vec![
        Reply::text(&["Thought: compute\nAction: {\"action\": \"eval_expression\", \"action_input\": {\"expression\": \"3*3\"}}"], (1, 1)),
        Reply::text(&["Final Answer: 9"], (1, 1)),
        Reply::text(&["Final Answer: You asked for 3*3."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let mut request = run_request("3*3?", &[("maths", "eval_expression")]);
    request.agent.as_mut().unwrap().strategy = pb::Strategy::ChainOfThought as i32;
    let first = run_to_end(&mut client, request.clone()).await;
    assert_eq!(end_of(&first).answer, "9");
    request.conversation_id = first[0].conversation_id.clone();
    request.query = "What did I ask?".into();
    let second = run_to_end(&mut client, request).await;
    assert_eq!(end_of(&second).answer, "You asked for 3*3.");

    let requests = llm.requests();
    let messages = requests[2]["messages"].as_array().unwrap();
    assert_eq!(
        roles(&requests[2]),
        vec!["system", "user", "assistant", "user"]
    );
    assert_eq!(messages[1]["content"], "3*3?");
    let collapsed = messages[2]["content"].as_str().unwrap();
    assert!(
        collapsed
            .starts_with("Thought: compute\nAction:\n```json\n{\"action\":\"eval_expression\""),
        "{collapsed}"
    );
    assert!(
        collapsed.ends_with("Observation: 9\n\nFinal Answer: 9"),
        "{collapsed}"
    );
}
