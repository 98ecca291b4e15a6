//! Tools the caller runs: the stream asks for them, the message waits, and
//! `SubmitToolOutputs` resumes the run.

use agent_runner::api::convert::json_to_struct;
use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use serde_json::json;
use tonic::Code;

use crate::support::{end_of, final_thoughts, message, run_request, TestServer};
use crate::support::{start, FakeOpenAi, Reply, ScriptedCall};

fn order_lookup() -> pb::ClientTool {
    pb::ClientTool {
        name: "lookup_order".into(),
        description: "Look up an order in the caller's system".into(),
        parameters_schema: Some(json_to_struct(
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
                .as_object()
                .unwrap(),
        )),
        require_approval: false,
    }
}

/// A round that calls a server tool and a client tool: the stream sends
/// `tool_calls_required`, the message waits as WAITING_TOOL_OUTPUTS, an unknown call id is
/// refused, and the right outputs resume the run to COMPLETED with both results recorded.
#[tokio::test]
async fn a_client_tool_round_trip_resumes_the_run() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("srv", "eval_expression", &["{\"expression\": \"2*3\"}"]),
                ScriptedCall::new("cli", "lookup_order", &["{\"order_id\": \"A1\"}"]),
                ScriptedCall::new("bad", "lookup_order", &["{\"id\": 1}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["Order A1 has shipped."], (1, 1)),
    ])
    .await;
    let mut request = run_request("Where is order A1?", &[("maths", "eval_expression")]);
    request.client_tools.push(order_lookup());
    let mut stream = client.run(request).await.unwrap().into_inner();
    let mut events = Vec::new();
    let required = loop {
        let event = stream
            .message()
            .await
            .unwrap()
            .expect("tool_calls_required before the end");
        let required = match &event.event {
            Some(Event::ToolCallsRequired(required)) => Some(required.clone()),
            _ => None,
        };
        events.push(event);
        if let Some(required) = required {
            break required;
        }
    };
    let message_id = events[0].message_id.clone();
    assert_eq!(
        required.tool_calls.len(),
        1,
        "only the valid client call goes to the caller"
    );
    assert_eq!(required.tool_calls[0].id, "cli");
    assert_eq!(required.tool_calls[0].arguments, "{\"order_id\": \"A1\"}");
    assert_eq!(
        message(&mut client, message_id.clone()).await.status,
        pb::MessageStatus::WaitingToolOutputs as i32
    );

    let output = |id: &str| pb::ToolOutput {
        tool_call_id: id.into(),
        output: "shipped".into(),
        error: String::new(),
        message_id: String::new(),
    };
    let unknown = client
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id: message_id.clone(),
            outputs: vec![output("nope")],
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::InvalidArgument);
    assert_eq!(
        unknown.message(),
        "outputs[0].tool_call_id \"nope\" is not a call the run is waiting for"
    );
    let missing = client
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id: message_id.clone(),
            outputs: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument);
    client
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id: message_id.clone(),
            outputs: vec![output("cli")],
        })
        .await
        .unwrap();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }

    assert_eq!(end_of(&events).answer, "Order A1 has shipped.");
    assert_eq!(
        message(&mut client, message_id.clone()).await.status,
        pb::MessageStatus::Completed as i32
    );
    let calls = &final_thoughts(&events)[0].tool_calls;
    let observation = |id: &str| {
        calls
            .iter()
            .find(|c| c.id == id)
            .unwrap()
            .observation
            .clone()
    };
    assert_eq!(observation("srv"), "6");
    assert_eq!(observation("cli"), "shipped");
    assert!(
        observation("bad").contains("\"order_id\" is a required property"),
        "{}",
        observation("bad")
    );
    let requests = llm.requests();
    let tool_results: Vec<&str> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_results.len(), 3);
    assert!(tool_results.contains(&"shipped"));
    let late = client
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id,
            outputs: vec![output("cli")],
        })
        .await
        .unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition);
}

/// A caller that never submits ends the run with an error once the wait times out.
#[tokio::test]
async fn an_unanswered_client_tool_times_out() {
    let (_llm, _server, mut client) = start(vec![Reply::calls(
        &[],
        vec![ScriptedCall::new(
            "cli",
            "lookup_order",
            &["{\"order_id\": \"B2\"}"],
        )],
        (1, 1),
    )])
    .await;
    let mut request = run_request("Where is order B2?", &[]);
    request.client_tools.push(order_lookup());

    let events = crate::support::run_to_end(&mut client, request).await;

    match events.last().and_then(|e| e.event.clone()) {
        Some(Event::Error(error)) => assert_eq!(error.code, "client_tool_timeout"),
        other => panic!("expected a timeout error, got {other:?}"),
    }
    assert_eq!(
        message(&mut client, events[0].message_id.clone())
            .await
            .status,
        pb::MessageStatus::Failed as i32
    );
}

/// A client tool may not take the name of one of the run's server tools.
#[tokio::test]
async fn client_tool_names_must_be_free() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut request = run_request("x", &[("maths", "eval_expression")]);
    let mut clash = order_lookup();
    clash.name = "eval_expression".into();
    request.client_tools.push(clash);

    let status = server.agents().await.run(request).await.unwrap_err();

    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "client_tools[0].name: tool name \"eval_expression\" is already used by another tool of the run"
    );
}
