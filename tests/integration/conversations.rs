//! A conversation keeps its turns: later runs send the earlier ones to the model.

use crate::support::open_data_dir;
use agent_runner::api::convert::json_to_struct;
use agent_runner::llm::Tokenizer;
use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use serde_json::{json, Value};
use tonic::Code;

use crate::support::RunRequestExt;
use crate::support::{
    end_of, run_request, run_to_end, TestServer, PLAIN_MODEL, SMALL_WINDOW_MODEL, VISION_MODEL,
};
use crate::support::{start, FakeOpenAi, Reply, ScriptedCall};

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
    let (llm, _server, mut client) = start(vec![
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
        let mut request = run_request(query, &[]).memory_turns(1);
        request.conversation_id = conversation_id.clone();
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
    let (llm, _server, mut client) = start(vec![
        Reply::text(&["Thought: compute\nAction: {\"action\": \"eval_expression\", \"action_input\": {\"expression\": \"3*3\"}}"], (1, 1)),
        Reply::text(&["Final Answer: 9"], (1, 1)),
        Reply::text(&["Final Answer: You asked for 3*3."], (1, 1)),
    ]).await;
    let mut request =
        run_request("3*3?", &[("maths", "eval_expression")]).strategy(pb::Strategy::ChainOfThought);
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

/// A turn of `conversation_id` on `model` that reserves 60 tokens for its answer.
fn limited_turn(query: &str, conversation_id: String, model: &str) -> pb::RunRequest {
    let mut request = run_request(query, &[]).model(model);
    request.conversation_id = conversation_id;
    request.model_mut().parameters = Some(json_to_struct(
        json!({"max_tokens": 60}).as_object().unwrap(),
    ));
    request
}

/// With a small context window the oldest turns are dropped whole: the request the model
/// receives fits `window − max_tokens` as counted by the same tokenizer, it holds the
/// newest turns, and `started` reports what was left out.
#[tokio::test]
async fn the_oldest_turns_are_dropped_to_fit_the_context_window() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(
        &["A fairly short answer to that question."],
        (1, 1),
    ));
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let ask = |query: String, conversation_id: String| {
        limited_turn(&query, conversation_id, SMALL_WINDOW_MODEL)
    };
    let first = run_to_end(
        &mut client,
        ask(
            format!("turn 0: {}", "tell me more ".repeat(12)),
            String::new(),
        ),
    )
    .await;
    let conversation_id = first[0].conversation_id.clone();
    for turn in 1..6 {
        run_to_end(
            &mut client,
            ask(
                format!("turn {turn}: {}", "tell me more ".repeat(12)),
                conversation_id.clone(),
            ),
        )
        .await;
    }
    let last = run_to_end(
        &mut client,
        ask("the final question".into(), conversation_id),
    )
    .await;

    let Some(Event::Started(started)) = &last[0].event else {
        panic!("no started event")
    };
    assert!(started.history_turns_dropped > 0, "{started:?}");
    assert!(started.history_tokens_dropped > 0);
    assert_eq!(started.history_turns + started.history_turns_dropped, 6);
    let request = llm.requests().pop().unwrap();
    let tokens = Tokenizer::Cl100kBase.count_body(&request) as u64;
    assert!(tokens + 60 <= 400, "the request needs {tokens} tokens");
    let users: Vec<String> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users.len() as u32, started.history_turns + 1);
    assert!(
        users[0].starts_with(&format!("turn {}:", started.history_turns_dropped)),
        "{users:?}"
    );
    assert_eq!(users.last().unwrap(), "the final question");
}

/// Turns written without a context window keep no token counts (as records of earlier
/// versions): a model with a window continuing the conversation still fits its prompt,
/// measuring those turns itself, and keeps the newest. Turns it writes then carry counts,
/// and a later turn fits by them alike.
#[tokio::test]
async fn turns_without_kept_counts_are_measured_and_the_prompt_still_fits() {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(
        &["A fairly short answer to that question."],
        (1, 1),
    ));
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let ask = |query: String, conversation_id: String, model: &str| {
        limited_turn(&query, conversation_id, model)
    };
    let mut conversation_id = String::new();
    for turn in 0..6 {
        let events = run_to_end(
            &mut client,
            ask(
                format!("turn {turn}: {}", "tell me more ".repeat(12)),
                conversation_id.clone(),
                PLAIN_MODEL,
            ),
        )
        .await;
        conversation_id = events[0].conversation_id.clone();
    }
    for question in ["a windowed question", "one more"] {
        let events = run_to_end(
            &mut client,
            ask(question.into(), conversation_id.clone(), SMALL_WINDOW_MODEL),
        )
        .await;
        let Some(Event::Started(started)) = &events[0].event else {
            panic!("no started event")
        };
        assert!(started.history_turns_dropped > 0, "{started:?}");
        assert_eq!(
            (started.history_turns + started.history_turns_dropped) as usize,
            if question == "one more" { 7 } else { 6 }
        );
        let request = llm.requests().pop().unwrap();
        let tokens = Tokenizer::Cl100kBase.count_body(&request) as u64;
        assert!(tokens + 60 <= 400, "the request needs {tokens} tokens");
        let users: Vec<&str> = request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(users.last(), Some(&question));
        assert!(users.len() >= 2, "the newest turns are kept: {users:?}");
    }
}

/// An image reaches a vision model as an image part in round 1 and as `[image]` in round 2;
/// a model without vision gets the query alone.
#[tokio::test]
async fn images_reach_vision_models_and_are_flattened_in_later_rounds() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "v",
                "eval_expression",
                &["{\"expression\": \"1\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["A cat."], (1, 1)),
        Reply::text(&["I cannot see it."], (1, 1)),
    ])
    .await;
    let image = pb::InputFile {
        source: Some(pb::input_file::Source::Data(vec![0x89, b'P', b'N', b'G'])),
        mime_type: "image/png".into(),
        detail: pb::ImageDetail::High as i32,
    };
    let mut request = run_request("What is this?", &[("maths", "eval_expression")]);
    request.files.push(image);
    run_to_end(&mut client, request.clone().model(VISION_MODEL)).await;
    run_to_end(&mut client, request.model(crate::support::STREAMING_MODEL)).await;

    let requests = llm.requests();
    let user = |i: usize| requests[i]["messages"][1]["content"].clone();
    let first = user(0);
    assert_eq!(first[0]["type"], "image_url");
    assert_eq!(
        first[0]["image_url"]["url"],
        "data:image/png;base64,iVBORw=="
    );
    assert_eq!(first[0]["image_url"]["detail"], "high");
    assert_eq!(first[1], json!({"type": "text", "text": "What is this?"}));
    assert_eq!(user(1), json!("[image]\nWhat is this?"));
    assert_eq!(user(2), json!("What is this?"));
}

/// After `DeleteConversation` nothing of the conversation is left in the store, and its ids
/// answer NOT_FOUND.
#[tokio::test]
async fn deleting_a_conversation_leaves_nothing_behind() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "d",
                "eval_expression",
                &["{\"expression\": \"3\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["3"], (1, 1)),
        Reply::text(&["Kept."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut client = server.agents().await;
    let mut doomed = run_request("delete me", &[("maths", "eval_expression")]);
    doomed.idempotency_key = "doomed-key".into();
    let deleted = run_to_end(&mut client, doomed).await;
    let kept = run_to_end(&mut client, run_request("keep me", &[])).await;
    let conversation_id = deleted[0].conversation_id.clone();
    let message_id = deleted[0].message_id.clone();

    client
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: conversation_id.clone(),
        })
        .await
        .unwrap();

    let status = client
        .get_message(pb::GetMessageRequest {
            message_id: message_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .list_messages(pb::ListMessagesRequest {
            conversation_id: conversation_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: conversation_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    server.stop().await;

    let store = open_data_dir(dir.path()).await;
    for id in [&conversation_id, &message_id] {
        let uuid: uuid::Uuid = id.parse().unwrap();
        assert_eq!(
            store.find_bytes(uuid.as_bytes()).await.unwrap(),
            Vec::<String>::new(),
            "bytes of {id}"
        );
        assert_eq!(
            store.find_bytes(id.as_bytes()).await.unwrap(),
            Vec::<String>::new(),
            "text of {id}"
        );
    }
    assert!(store.find_bytes(b"doomed-key").await.unwrap().is_empty());
    let survivor: uuid::Uuid = kept[0].message_id.parse().unwrap();
    assert!(
        !store
            .find_bytes(survivor.as_bytes())
            .await
            .unwrap()
            .is_empty(),
        "other conversations stay"
    );
}
