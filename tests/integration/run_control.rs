//! Run control: cancel, re-attach after a dropped connection, idempotent retries, deadlines.

use std::time::Duration;

use agent_runner::pb;
use tonic::Code;

use crate::support::{
    end_of, message, read_rest, read_until_delta, run_request, run_to_end, settled_status,
};
use crate::support::{start, Reply, ScriptedCall};

/// Cancel during a stalled LLM stream: the stream ends promptly with `end{CANCELLED}`, the
/// LLM server sees its connection closed, and the usage of the finished round is kept.
/// Cancelling again is FAILED_PRECONDITION; an unknown message is NOT_FOUND.
#[tokio::test]
async fn cancel_stops_a_stalled_llm_stream_and_keeps_what_was_done() {
    let (llm, _server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "m",
                "eval_expression",
                &["{\"expression\": \"1+1\"}"],
            )],
            (3, 3),
        ),
        Reply::Stall(vec!["Partial"]),
    ])
    .await;
    let mut stream = client
        .run(run_request("slow", &[("maths", "eval_expression")]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;
    let message_id = seen[0].message_id.clone();

    let cancelled = client
        .cancel(pb::CancelRequest {
            message_id: message_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let rest = tokio::time::timeout(Duration::from_secs(1), read_rest(&mut stream))
        .await
        .expect("the stream ends within a second");

    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    assert_eq!(
        end_of(&rest).finish_reason,
        pb::FinishReason::Cancelled as i32
    );
    for _ in 0..50 {
        if llm.closed_stalls() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(llm.closed_stalls(), 1, "the LLM connection was closed");
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Cancelled as i32);
    // Round 1 reported 6 tokens; the cancelled round reported none, so it is counted by us.
    let usage = message.usage.unwrap();
    assert!(usage.estimated && usage.total_tokens > 6, "{usage:?}");
    assert_eq!(message.answer, "Partial");

    let again = client
        .cancel(pb::CancelRequest { message_id })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition);
    let unknown = client
        .cancel(pb::CancelRequest {
            message_id: "0190e7a5-0000-7000-8000-000000000009".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

/// A client that drops its stream mid-run does not stop the run; attaching after the last
/// event it saw delivers exactly the remaining events, each once.
#[tokio::test]
async fn a_dropped_client_reattaches_after_the_last_event_it_saw() {
    let (_llm, _server, mut client) = start(vec![Reply::Slow {
        text: vec!["one ", "two ", "three ", "four ", "five"],
        delay_ms: 40,
    }])
    .await;
    let mut stream = client
        .run(run_request("count", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;
    drop(stream);
    let last_seen = seen.last().unwrap().seq;

    let mut attached = client
        .attach(pb::AttachRequest {
            message_id: seen[0].message_id.clone(),
            after_seq: last_seen,
        })
        .await
        .unwrap()
        .into_inner();
    let rest = read_rest(&mut attached).await;

    let seqs: Vec<u64> = rest.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (last_seen + 1..=last_seen + rest.len() as u64).collect();
    assert_eq!(seqs, expected);
    let end = end_of(&rest);
    assert_eq!(end.answer, "one two three four five");
    assert_eq!(end.finish_reason, pb::FinishReason::Stop as i32);
}

/// A finished three-round message replays identically from the start.
#[tokio::test]
async fn a_finished_message_replays_identically() {
    let call = |id| {
        vec![ScriptedCall::new(
            id,
            "eval_expression",
            &["{\"expression\": \"2*2\"}"],
        )]
    };
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(&["a"], call("x1"), (1, 1)),
        Reply::calls(&["b"], call("x2"), (1, 1)),
        Reply::text(&["c"], (1, 1)),
    ])
    .await;
    let live = run_to_end(
        &mut client,
        run_request("three rounds", &[("maths", "eval_expression")]),
    )
    .await;
    assert_eq!(end_of(&live).iterations, 3);

    let mut replay = client
        .attach(pb::AttachRequest {
            message_id: live[0].message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let replayed = read_rest(&mut replay).await;

    assert_eq!(replayed, live);
    let missing = client
        .attach(pb::AttachRequest {
            message_id: "0190e7a5-0000-7000-8000-00000000000a".into(),
            after_seq: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

/// A retry with the same idempotency key and request follows the first run (same message,
/// same events) and calls no LLM again; the key with a different request is ALREADY_EXISTS.
#[tokio::test]
async fn idempotent_retries_do_not_run_the_agent_twice() {
    let (llm, _server, mut client) = start(vec![Reply::text(&["Once."], (2, 1))]).await;
    let mut request = run_request("only once", &[]);
    request.idempotency_key = "order-42".into();

    let first = run_to_end(&mut client, request.clone()).await;
    let retry = run_to_end(&mut client, request.clone()).await;

    assert_eq!(retry[0].message_id, first[0].message_id);
    assert_eq!(retry, first);
    assert_eq!(llm.requests().len(), 1);
    request.query = "something else".into();
    let reused = client.run(request).await.unwrap_err();
    assert_eq!(reused.code(), Code::AlreadyExists);
    assert!(
        reused.message().contains("idempotency_key"),
        "{}",
        reused.message()
    );
}

/// A client deadline that passes cancels the run like `Cancel` does.
#[tokio::test]
async fn a_passed_deadline_cancels_the_run() {
    let (_llm, _server, mut client) = start(vec![Reply::Stall(vec!["Thinking"])]).await;
    let mut request = tonic::Request::new(run_request("too slow", &[]));
    // Long enough for the start to answer on a loaded machine (on PostgreSQL 300 ms once
    // ran out before the first event), short beside a run that never ends.
    request.set_timeout(Duration::from_millis(1500));

    let mut stream = client.run(request).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    // The stream ends either way: the server ends it with `end{CANCELLED}` at the deadline,
    // or the client gives up with DEADLINE_EXCEEDED.
    loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(status) => {
                assert_eq!(status.code(), Code::DeadlineExceeded);
                break;
            }
        }
    }

    let status = settled_status(&mut client, &first.message_id).await;
    assert_eq!(status, pb::MessageStatus::Cancelled as i32);
}

/// With `cancel_on_disconnect`, dropping the stream cancels the run.
#[tokio::test]
async fn cancel_on_disconnect_stops_the_run_when_the_client_leaves() {
    let (_llm, _server, mut client) = start(vec![Reply::Stall(vec!["Working"])]).await;
    let mut request = run_request("leave early", &[]);
    request.cancel_on_disconnect = true;
    let mut stream = client.run(request).await.unwrap().into_inner();
    let seen = read_until_delta(&mut stream).await;
    drop(stream);

    let status = settled_status(&mut client, &seen[0].message_id).await;
    assert_eq!(status, pb::MessageStatus::Cancelled as i32);
}

/// Once an ended message's events are retired, Attach sends its end alone (the answer
/// whole), and the message and its thoughts read as before.
#[tokio::test]
async fn attach_after_retirement_sends_the_end_alone() {
    let (_llm, server, mut client) = start(vec![Reply::text(&["Kept ", "whole."], (1, 1))]).await;
    let events = run_to_end(&mut client, run_request("retire me", &[])).await;
    let id = events[0].message_id.clone();
    let before = message(&mut client, id.clone()).await;
    let later = agent_runner::domain::now() + chrono::Duration::seconds(5);
    assert_eq!(server.store.retire_events(later, 100).await.unwrap(), 1);

    let mut replay = client
        .attach(pb::AttachRequest {
            message_id: id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let replayed = read_rest(&mut replay).await;
    assert_eq!(replayed, vec![events.last().unwrap().clone()]);
    assert_eq!(end_of(&replayed).answer, "Kept whole.");
    assert_eq!(message(&mut client, id).await, before);
}
