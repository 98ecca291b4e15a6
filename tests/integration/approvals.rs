//! Tool calls that wait for a person: the message waits as WAITING_APPROVAL with an
//! `approval_required` event, `ApproveToolCalls` lets approved calls run and tells the
//! model why the others did not, and the wait ends on time.

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use tonic::Code;

use crate::support::{
    end_of, final_thoughts, last_error, message, read_rest, run_request, start, thoughts, Agents,
    FakeOpenAi, Reply, RunRequestExt, ScriptedCall, TestServer,
};

/// Reads `stream` until its `approval_required` event; returns the events so far and it.
async fn until_approval(
    stream: &mut tonic::Streaming<pb::RunEvent>,
) -> (Vec<pb::RunEvent>, pb::ApprovalRequired) {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let required = match &event.event {
            Some(Event::ApprovalRequired(required)) => Some(required.clone()),
            _ => None,
        };
        events.push(event);
        if let Some(required) = required {
            return (events, required);
        }
    }
    panic!("the stream ended without approval_required: {events:?}");
}

fn decide(message_id: &str, decisions: &[(&str, bool, &str)]) -> pb::ApproveToolCallsRequest {
    pb::ApproveToolCallsRequest {
        message_id: message_id.into(),
        decisions: decisions
            .iter()
            .map(|(id, approve, reason)| pb::ToolCallDecision {
                tool_call_id: (*id).into(),
                approve: *approve,
                reason: (*reason).into(),
                message_id: String::new(),
            })
            .collect(),
    }
}

fn maths_call(id: &'static str, arguments: &'static str) -> ScriptedCall {
    ScriptedCall::new(id, "eval_expression", &[arguments])
}

fn gated_maths(query: &str) -> pb::RunRequest {
    run_request(
        query,
        &[("maths", "eval_expression"), ("time", "current_time")],
    )
    .needs_approval("eval_expression")
}

async fn status(agents: &mut Agents, id: &str) -> i32 {
    message(agents, id.to_owned()).await.status
}

/// A tool call that needs approval waits, runs only once approved through
/// `ApproveToolCalls`, and the run then completes.
#[tokio::test]
async fn an_approved_call_runs_after_the_wait_and_the_run_completes() {
    let (llm, _server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![maths_call("call_a", r#"{"expression": "6*7"}"#)],
            (5, 5),
        ),
        Reply::text(&["It is 42."], (5, 5)),
    ])
    .await;
    let mut stream = agents.run(gated_maths("6*7?")).await.unwrap().into_inner();
    let (events, required) = until_approval(&mut stream).await;
    let id = events[0].message_id.clone();
    assert_eq!(required.tool_calls.len(), 1);
    assert_eq!(required.tool_calls[0].id, "call_a");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, Some(Event::ToolStarted(_)))),
        "nothing runs before the decision"
    );
    assert_eq!(
        status(&mut agents, &id).await,
        pb::MessageStatus::WaitingApproval as i32
    );
    // The thought with the call is stored while the run waits.
    let stored = thoughts(&mut agents, id.clone()).await;
    assert_eq!(stored[0].tool_calls[0].id, "call_a");
    assert_eq!(llm.requests().len(), 1);

    agents
        .approve_tool_calls(decide(&id, &[("call_a", true, "")]))
        .await
        .unwrap();
    let rest = read_rest(&mut stream).await;
    let end = end_of(&rest);
    assert_eq!(end.answer, "It is 42.");
    let call = &final_thoughts(&rest)[0].tool_calls[0];
    assert_eq!(call.observation, "42");
    assert_eq!(
        status(&mut agents, &id).await,
        pb::MessageStatus::Completed as i32
    );
}

/// A declined call is not run and the model reads why; a decision that leaves a pending
/// call undecided is refused, so no call is left waiting by mistake.
#[tokio::test]
async fn a_declined_call_tells_the_model_why_and_partial_decisions_are_refused() {
    let (llm, _server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![
                maths_call("call_a", r#"{"expression": "1+1"}"#),
                ScriptedCall::new("call_t", "current_time", &["{}"]),
                maths_call("call_b", r#"{"expression": "2+2"}"#),
            ],
            (5, 5),
        ),
        Reply::text(&["One was declined."], (5, 5)),
    ])
    .await;
    let mut stream = agents.run(gated_maths("sums")).await.unwrap().into_inner();
    let (events, required) = until_approval(&mut stream).await;
    let id = events[0].message_id.clone();
    let waited: Vec<&str> = required.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        waited,
        ["call_a", "call_b"],
        "the ungated call needs no decision"
    );

    let partial = agents
        .approve_tool_calls(decide(&id, &[("call_a", true, "")]))
        .await
        .unwrap_err();
    assert_eq!(partial.code(), Code::InvalidArgument);
    assert_eq!(
        partial.message(),
        "decisions has no decision for tool_call_id \"call_b\""
    );
    let outputs = agents
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id: id.clone(),
            outputs: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(outputs.code(), Code::FailedPrecondition);
    assert_eq!(
        outputs.message(),
        "the message is not waiting for tool outputs"
    );

    agents
        .approve_tool_calls(decide(
            &id,
            &[("call_b", false, "too risky"), ("call_a", true, "")],
        ))
        .await
        .unwrap();
    let rest = read_rest(&mut stream).await;
    end_of(&rest);
    let calls = &final_thoughts(&rest)[0].tool_calls;
    assert_eq!(calls[0].observation, "2");
    assert!(!calls[1].observation.is_empty(), "the ungated call ran");
    assert_eq!(
        calls[2].observation,
        "the user declined this call: too risky"
    );
    assert_eq!(
        calls[2].meta.as_ref().unwrap().error,
        "the user declined this call: too risky"
    );
    // The model reads the reason as the call's result.
    let second = &llm.requests()[1];
    let results: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        results.contains(&"the user declined this call: too risky"),
        "{results:?}"
    );

    // The message is done: a late decision is refused, an unknown message not found.
    let late = agents
        .approve_tool_calls(decide(&id, &[("call_a", true, "")]))
        .await
        .unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition);
    let unknown = agents
        .approve_tool_calls(decide(
            "00000000-0000-0000-0000-000000000000",
            &[("call_a", true, "")],
        ))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

/// A run whose approvals are not decided within the approval timeout ends with
/// `approval_timeout` instead of holding its slot forever.
#[tokio::test]
async fn no_decision_in_time_ends_the_run_with_approval_timeout() {
    let llm = FakeOpenAi::start(vec![Reply::calls(
        &[],
        vec![maths_call("call_a", r#"{"expression": "6*7"}"#)],
        (5, 5),
    )])
    .await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.approval_timeout_secs = 1;
    })
    .await;
    let mut agents = server.agents().await;
    let mut stream = agents.run(gated_maths("6*7?")).await.unwrap().into_inner();
    let (events, _) = until_approval(&mut stream).await;
    let rest = read_rest(&mut stream).await;
    let error = last_error(&rest);
    assert_eq!(error.code, "approval_timeout");
    assert!(error.message.contains("within 1s"), "{}", error.message);
    assert_eq!(
        status(&mut agents, &events[0].message_id).await,
        pb::MessageStatus::Failed as i32
    );
    assert_eq!(llm.requests().len(), 1, "the call never ran");
}

/// A client that attaches while a run waits for approval sees what it waits for, and then
/// the rest of the run.
#[tokio::test]
async fn attach_during_the_wait_shows_the_pending_approval_and_follows_the_rest() {
    let (_llm, _server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![maths_call("call_a", r#"{"expression": "6*7"}"#)],
            (5, 5),
        ),
        Reply::text(&["It is 42."], (5, 5)),
    ])
    .await;
    let mut first = agents.run(gated_maths("6*7?")).await.unwrap().into_inner();
    let (events, _) = until_approval(&mut first).await;
    let id = events[0].message_id.clone();
    drop(first);

    let mut attached = agents
        .attach(pb::AttachRequest {
            message_id: id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let (replayed, required) = until_approval(&mut attached).await;
    assert_eq!(required.tool_calls[0].id, "call_a");
    assert_eq!(replayed.len(), events.len(), "the same events, replayed");
    agents
        .approve_tool_calls(decide(&id, &[("call_a", true, "")]))
        .await
        .unwrap();
    let rest = read_rest(&mut attached).await;
    assert_eq!(end_of(&rest).answer, "It is 42.");
}

/// A client tool that needs approval is only handed to the caller once approved.
#[tokio::test]
async fn a_client_tool_that_needs_approval_is_decided_before_it_goes_to_the_caller() {
    let (_llm, _server, mut agents) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new("call_c", "refund", &["{}"])],
            (5, 5),
        ),
        Reply::text(&["Refund declined."], (5, 5)),
    ])
    .await;
    let mut request = run_request("refund me", &[]);
    request.client_tools.push(pb::ClientTool {
        name: "refund".into(),
        description: "Refunds the order".into(),
        parameters_schema: None,
        require_approval: true,
    });
    let mut stream = agents.run(request).await.unwrap().into_inner();
    let (events, _) = until_approval(&mut stream).await;
    let id = events[0].message_id.clone();
    agents
        .approve_tool_calls(decide(&id, &[("call_c", false, "")]))
        .await
        .unwrap();
    let rest = read_rest(&mut stream).await;
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e.event, Some(Event::ToolCallsRequired(_)))),
        "a declined client call is never handed to the caller"
    );
    let call = &final_thoughts(&rest)[0].tool_calls[0];
    assert_eq!(call.observation, "the user declined this call");
    assert_eq!(end_of(&rest).answer, "Refund declined.");
}
