//! The loop against what real model servers send and accept: tool calls nobody offered,
//! servers that refuse `null` content, report no usage or fail after reporting it, longer
//! ReAct fences, and requests the transport cannot take.

use agent_runner::pb;
use prost_types::value::Kind;
use prost_types::{Struct, Value as PbValue};
use tonic::Code;

use crate::support::RunRequestExt;
use crate::support::{
    end_of, final_thoughts, last_error, message, run_request, run_to_end, thoughts, TestServer,
    PLAIN_MODEL,
};
use crate::support::{start, FakeOpenAi, Reply, ScriptedCall};

/// A plain chat agent (no tools) whose model calls a tool anyway is not cut off: the call
/// gets the unknown-tool observation, the model answers in round 2, and the run ends with
/// `STOP`; the call stays on the thought with its observation.
#[tokio::test]
async fn a_tool_call_the_agent_does_not_offer_gets_an_observation_and_the_run_goes_on() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "x1",
                "web_search",
                &["{\"q\": \"news\"}"],
            )],
            (5, 3),
        ),
        Reply::text(&["I cannot search, but here is what I know."], (9, 4)),
    ])
    .await;

    let events = run_to_end(&mut client, run_request("What is new?", &[])).await;

    let end = end_of(&events);
    assert_eq!(end.finish_reason, pb::FinishReason::Stop as i32);
    assert_eq!(end.answer, "I cannot search, but here is what I know.");
    assert_eq!(end.iterations, 2);
    let thoughts = final_thoughts(&events);
    assert_eq!(thoughts.len(), 2);
    let call = &thoughts[0].tool_calls[0];
    assert_eq!(call.name, "web_search");
    assert_eq!(call.observation, "there is not a tool named web_search");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let tool_message = &requests[1]["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_call_id"], "x1");
}

/// The request after a tool call carries the assistant's calls with an empty-string content,
/// which a server that answers 500 to `"content": null` (llama.cpp's) accepts; the run
/// completes in two rounds and a second turn of the conversation works too.
#[tokio::test]
async fn the_follow_up_after_a_tool_call_is_accepted_by_a_server_refusing_null_content() {
    let call = || {
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "c1",
                "eval_expression",
                &["{\"expression\": \"6*7\"}"],
            )],
            (4, 2),
        )
    };
    let llm = FakeOpenAi::start(vec![
        call(),
        Reply::text(&["42"], (8, 1)),
        Reply::text(&["Still 42"], (12, 2)),
    ])
    .await;
    llm.reject_null_content();
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;

    let events = run_to_end(
        &mut client,
        run_request("6*7?", &[("maths", "eval_expression")]),
    )
    .await;
    let end = end_of(&events);
    assert_eq!(end.answer, "42");
    assert_eq!(end.iterations, 2);
    let assistant = &llm.requests()[1]["messages"][2];
    assert_eq!(assistant["content"], "");
    assert_eq!(assistant["tool_calls"][0]["id"], "c1");

    let mut again = run_request("And again?", &[("maths", "eval_expression")]);
    again.conversation_id = events[0].conversation_id.clone();
    let events = run_to_end(&mut client, again).await;
    assert_eq!(end_of(&events).answer, "Still 42");
}

/// A server that sends no usage (llama.cpp, some gateways) no longer leaves the run at zero
/// tokens and zero cost: the counts are taken with the model's tokenizer and marked
/// estimated on the round, on `end` and on the message.
#[tokio::test]
async fn a_server_without_usage_gets_estimated_counts_and_a_price() {
    let (_llm, _server, mut client) = start(vec![Reply::NoUsage {
        text: vec!["The capital of France ", "is Paris."],
        calls: vec![],
    }])
    .await;

    let events = run_to_end(&mut client, run_request("Capital of France?", &[])).await;

    let usage = end_of(&events).usage.unwrap();
    assert!(usage.estimated);
    assert_eq!(usage.completion_tokens, 7, "{usage:?}");
    assert!(usage.prompt_tokens > 10, "{usage:?}");
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    assert_ne!(usage.total_price, "0", "the model has prices: {usage:?}");
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert!(stored.usage.unwrap().estimated);
    let round = final_thoughts(&events)[0].usage.clone().unwrap();
    assert!(round.estimated);
    assert_eq!(round.completion_tokens, 7);
}

/// Counts the provider reports stay measured, not estimated.
#[tokio::test]
async fn reported_usage_is_not_marked_estimated() {
    let (_llm, _server, mut client) = start(vec![Reply::text(&["Paris."], (11, 2))]).await;

    let events = run_to_end(&mut client, run_request("Capital of France?", &[])).await;

    let usage = end_of(&events).usage.unwrap();
    assert!(!usage.estimated);
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (11, 2));
}

/// A provider that sends usage and then an error chunk in the same stream (OpenRouter does)
/// keeps that usage on the `error` event and the message, and `iterations` counts the
/// failed round: round 1 called a tool, round 2 failed, so two LLM calls were made.
#[tokio::test]
async fn usage_sent_before_a_stream_error_is_kept_and_iterations_count_the_failed_call() {
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "c1",
                "eval_expression",
                &["{\"expression\": \"1+1\"}"],
            )],
            (10, 5),
        ),
        Reply::UsageThenError {
            text: vec!["The answer"],
            usage: (20, 3),
            message: "upstream provider went away",
            code: 502,
        },
    ])
    .await;

    let events = run_to_end(
        &mut client,
        run_request("1+1?", &[("maths", "eval_expression")]),
    )
    .await;

    let error = last_error(&events);
    // The error object's code 502 says the upstream server failed.
    assert_eq!(error.code, "llm_server_error");
    assert!(error.message.contains("upstream provider went away"));
    assert_eq!(error.iterations, 2);
    let usage = error.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (30, 8));
    assert!(!usage.estimated);
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert_eq!(stored.iterations, 2);
    assert_eq!(stored.usage.unwrap().total_tokens, 38);
    assert_eq!(stored.error.unwrap().iterations, 2);
    let rounds = thoughts(&mut client, events[0].message_id.clone()).await;
    assert_eq!(rounds[1].usage.clone().unwrap().total_tokens, 23);
}

/// A chain-of-thought model that fences its action with four backticks (common when the
/// input quotes code) has its tool run, instead of the action showing as answer text.
#[tokio::test]
async fn a_react_action_in_a_four_backtick_fence_runs_the_tool() {
    let (_llm, _server, mut client) = start(vec![
        Reply::text(
            &[
                "Thought: compute it\nAction:\n``",
                "``json\n{\"action\": \"eval_expression\", \"action_input\": {\"expression\": \"6*7\"}}\n`",
                "```",
            ],
            (10, 10),
        ),
        Reply::text(
            &["Action:\n````json\n{\"action\": \"Final Answer\", \"action_input\": \"42\"}\n````"],
            (10, 10),
        ),
    ]).await;
    let request = run_request("6*7?", &[("maths", "eval_expression")]).model(PLAIN_MODEL);

    let events = run_to_end(&mut client, request).await;

    let end = end_of(&events);
    assert_eq!(end.answer, "42");
    let thoughts = final_thoughts(&events);
    assert_eq!(thoughts[0].tool_calls[0].name, "eval_expression");
    assert_eq!(thoughts[0].tool_calls[0].observation, "42");
}

/// A request above `server.max_request_bytes` (4 MiB by default) is refused with
/// `RESOURCE_EXHAUSTED` naming the limit, as the gRPC status code guide has it.
#[tokio::test]
async fn an_oversized_request_is_resource_exhausted_naming_the_limit() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let channel = server.channel().await;
    let mut client = pb::agent_service_client::AgentServiceClient::new(channel)
        .max_encoding_message_size(16 * 1024 * 1024);

    let query = "x".repeat(5 * 1024 * 1024);
    let status = client
        .run(run_request(&query, &[]))
        .await
        .expect_err("a 5 MiB request must be refused");

    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status
            .message()
            .contains("server.max_request_bytes (4194304)"),
        "{}",
        status.message()
    );
    assert!(llm.requests().is_empty());
}

/// Model parameters nested deeper than the Protobuf decoder allows are `INVALID_ARGUMENT`
/// naming the field, not `INTERNAL`.
#[tokio::test]
async fn a_struct_nested_too_deeply_is_invalid_argument_naming_the_field() {
    let (_llm, _server, mut client) = start(vec![]).await;
    let mut nested = PbValue {
        kind: Some(Kind::StringValue("deep".into())),
    };
    for _ in 0..120 {
        nested = PbValue {
            kind: Some(Kind::StructValue(Struct {
                fields: [("a".to_owned(), nested)].into_iter().collect(),
            })),
        };
    }
    let mut request = run_request("hi", &[]);
    request.model_mut().parameters = Some(Struct {
        fields: [("x".to_owned(), nested)].into_iter().collect(),
    });

    let status = client.run(request).await.expect_err("too deep");

    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("agent.model.parameters is nested too deeply"),
        "{}",
        status.message()
    );
}
