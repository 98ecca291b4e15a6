//! A failing LLM ends the run with an error event and loses nothing already written.

use agent_runner::pb;

use crate::support::RunRequestExt;
use crate::support::{last_error, message, run_request, run_to_end, thoughts, IMPATIENT_PROVIDER};
use crate::support::{start, Reply, ScriptedCall};

/// An LLM that keeps answering 500 ends the run, after its retries (`max_retries` 2: three
/// requests), with an `error` event carrying the provider's message and the number of
/// attempts; the message is FAILED and its first (empty) thought is kept.
#[tokio::test]
async fn a_server_error_from_the_llm_fails_the_message() {
    let (llm, _server, mut client) = start(vec![]).await;
    llm.repeat(Reply::Error {
        status: 500,
        message: "model overloaded",
    });

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    let error = last_error(&events);
    assert_eq!(error.code, "llm_server_error");
    assert!(
        error.message.contains("model overloaded") && error.message.ends_with("(after 3 attempts)"),
        "{}",
        error.message
    );
    assert_eq!(llm.requests().len(), 3);
    assert!(error.usage.is_some());
    let message_id = events[0].message_id.clone();
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Failed as i32);
    assert_eq!(message.error.unwrap().code, "llm_server_error");
    let thoughts = client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(thoughts.thoughts.len(), 1);
}

/// A connection that drops mid-answer in round 2 ends the run with an error; round 1's
/// thought with its tool result and round 2's partial text are still readable.
#[tokio::test]
async fn a_dropped_stream_keeps_the_thoughts_written_so_far() {
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "m",
                "eval_expression",
                &["{\"expression\": \"7*6\"}"],
            )],
            (3, 3),
        ),
        Reply::DropAfter(vec!["The answer", " is"]),
    ])
    .await;

    let events = run_to_end(
        &mut client,
        run_request("7*6?", &[("maths", "eval_expression")]),
    )
    .await;

    assert_eq!(last_error(&events).code, "llm_stream_error");
    let message_id = events[0].message_id.clone();
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Failed as i32);
    // Round 1 reported 6 tokens; the broken round 2 reported none, so it is counted by us.
    let usage = message.usage.unwrap();
    assert!(usage.estimated && usage.total_tokens > 6, "{usage:?}");
    let thoughts = thoughts(&mut client, message_id).await;
    assert_eq!(thoughts.len(), 2);
    assert_eq!(thoughts[0].tool_calls[0].observation, "42");
    assert_eq!(thoughts[1].answer, "The answer is");
}

/// An LLM server that accepts the request but never sends a byte of the answer runs into
/// the provider's first-byte timeout; the run fails with `llm_timeout` instead of hanging.
#[tokio::test]
async fn a_silent_llm_hits_the_first_byte_timeout() {
    let (_llm, _server, mut client) = start(vec![Reply::Stall(vec![])]).await;
    let request = run_request("hello?", &[]).provider(IMPATIENT_PROVIDER);

    let events = run_to_end(&mut client, request).await;

    let error = last_error(&events);
    assert_eq!(error.code, "llm_timeout");
    assert!(error.message.contains("first byte"), "{}", error.message);
}

/// A provider asking for an absurd wait (`Retry-After: 1e300`, `retry-after-ms: inf`)
/// asks for longer than any retry budget: the call is not retried, the run ends with the
/// provider's failure (never a panic, never a store error) and the message is FAILED.
#[tokio::test]
async fn an_absurd_retry_after_is_longer_than_the_budget() {
    for retry_after in ["1e300", "inf", "99999999999999999999999"] {
        let (llm, _server, mut client) = start(vec![Reply::Throttle {
            status: 429,
            retry_after,
        }])
        .await;
        let events = run_to_end(&mut client, run_request("hi", &[])).await;
        let error = last_error(&events);
        assert_eq!(error.code, "llm_rate_limited", "{retry_after}: {error:?}");
        assert_eq!(llm.requests().len(), 1, "not retried");
        let message = message(&mut client, events[0].message_id.clone()).await;
        assert_eq!(message.status, pb::MessageStatus::Failed as i32);
    }
}

/// An error object inside the stream that a retry cannot cure (OpenRouter's `{"error":
/// {"code": 400, ...}}`) ends the run at once, one billed call, with the usage so far on the
/// `error` event; one that a retry can cure (502) before any text is retried.
#[tokio::test]
async fn only_curable_errors_inside_a_stream_are_retried() {
    let (llm, _server, mut client) = start(vec![Reply::UsageThenError {
        text: vec![],
        usage: (7, 0),
        message: "Token limit reached",
        code: 400,
    }])
    .await;
    let events = run_to_end(&mut client, run_request("hi", &[])).await;
    let error = last_error(&events);
    assert_eq!(error.code, "llm_bad_request");
    assert!(
        error.message.contains("Token limit reached"),
        "{}",
        error.message
    );
    assert_eq!(llm.requests().len(), 1, "not retried");
    assert_eq!(error.usage.unwrap().prompt_tokens, 7);

    let (llm, _server, mut client) = start(vec![
        Reply::UsageThenError {
            text: vec![],
            usage: (7, 0),
            message: "upstream went away",
            code: 502,
        },
        Reply::text(&["Recovered."], (3, 1)),
    ])
    .await;
    let events = run_to_end(&mut client, run_request("hi", &[])).await;
    assert_eq!(crate::support::end_of(&events).answer, "Recovered.");
    assert_eq!(llm.requests().len(), 2);
}
