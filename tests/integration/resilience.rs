//! Faults real providers throw every day: rate limits, server errors, broken streams, a
//! provider that is down or full. Retries with backoff, fallbacks and concurrency limits.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::{
    end_of, final_thoughts, kinds, last_error, message, read_rest, read_until_delta, run_request,
    run_to_end, start, streamed_text, FakeOpenAi, Reply, RunRequestExt, TestServer, DOWN_PROVIDER,
    NARROW_PROVIDER, PATIENT_PROVIDER, PROVIDER, STREAMING_MODEL,
};

fn retries(events: &[pb::RunEvent]) -> Vec<pb::LlmRetry> {
    kinds(events)
        .into_iter()
        .filter_map(|e| match e {
            Event::Retry(retry) => Some(retry.clone()),
            _ => None,
        })
        .collect()
}

fn with_fallback(request: pb::RunRequest, provider: &str, name: &str) -> pb::RunRequest {
    let mut request = request;
    request.model_mut().fallbacks.push(pb::ModelRef {
        provider: provider.to_owned(),
        name: name.to_owned(),
    });
    request
}

/// A 429 asking for one second (`Retry-After: 1`) is waited out and retried: the run
/// completes, the server saw two requests at least a second apart, and the client saw one
/// `retry` event saying why and for how long, stored like every event.
#[tokio::test]
async fn a_rate_limit_with_retry_after_is_waited_out_and_retried() {
    let (llm, _server, mut client) = start(vec![
        Reply::Throttle {
            status: 429,
            retry_after: "1",
        },
        Reply::text(&["Done."], (3, 1)),
    ])
    .await;

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    assert_eq!(end_of(&events).answer, "Done.");
    let arrivals = llm.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(arrivals[1] - arrivals[0] >= Duration::from_secs(1));
    let retries = retries(&events);
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].attempt, 2);
    assert_eq!(retries[0].delay, 1.0);
    assert_eq!(retries[0].code, "llm_rate_limited");
    assert_eq!(
        (retries[0].provider.as_str(), retries[0].model.as_str()),
        (PROVIDER, STREAMING_MODEL)
    );
    let replayed = client
        .attach(pb::AttachRequest {
            message_id: events[0].message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let replayed = read_rest_of(replayed).await;
    assert_eq!(replayed, events, "the retry event is stored with the rest");
    assert_eq!(
        end_of(&events).iterations,
        1,
        "a retry is not another iteration"
    );
}

async fn read_rest_of(mut stream: tonic::Streaming<pb::RunEvent>) -> Vec<pb::RunEvent> {
    read_rest(&mut stream).await
}

/// One 500 is retried after a short backoff and the run completes.
#[tokio::test]
async fn a_server_error_once_is_retried() {
    let (llm, _server, mut client) = start(vec![
        Reply::Error {
            status: 500,
            message: "hiccup",
        },
        Reply::text(&["Recovered."], (3, 1)),
    ])
    .await;

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    assert_eq!(end_of(&events).answer, "Recovered.");
    assert_eq!(llm.requests().len(), 2);
    let retries = retries(&events);
    assert_eq!(retries.len(), 1);
    assert!(retries[0].message.contains("hiccup"), "{:?}", retries[0]);
}

/// A 503 that never ends fails the run after `max_retries + 1` requests; the error names
/// the number of attempts and every retry was announced.
#[tokio::test]
async fn a_provider_that_stays_down_fails_after_its_retries() {
    let (llm, _server, mut client) = start(vec![]).await;
    llm.repeat(Reply::Error {
        status: 503,
        message: "unavailable",
    });

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    let error = last_error(&events);
    assert_eq!(error.code, "llm_server_error");
    assert!(
        error.message.ends_with("(after 3 attempts)"),
        "{}",
        error.message
    );
    assert_eq!(llm.requests().len(), 3);
    let attempts: Vec<u32> = retries(&events).iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, vec![2, 3]);
}

/// A 400 (here a context-length error) is never retried.
#[tokio::test]
async fn a_rejected_request_is_not_retried() {
    let (llm, _server, mut client) = start(vec![Reply::Error {
        status: 400,
        message: "This model's maximum context length is 8192 tokens",
    }])
    .await;

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    assert_eq!(last_error(&events).code, "llm_bad_request");
    assert_eq!(llm.requests().len(), 1);
    assert!(retries(&events).is_empty());
}

/// The rule for a connection cut after answer text was streamed: the text the user saw is
/// never taken back or shown twice, so the call is not retried; the run ends with the
/// error, keeps the partial answer, and the deltas add up to it.
#[tokio::test]
async fn a_stream_cut_after_answer_text_is_not_retried() {
    let (llm, _server, mut client) = start(vec![
        Reply::DropAfter(vec!["The answer", " is"]),
        Reply::text(&["never sent"], (1, 1)),
    ])
    .await;

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    assert_eq!(last_error(&events).code, "llm_stream_error");
    assert_eq!(llm.requests().len(), 1);
    assert!(retries(&events).is_empty());
    let stored = message(&mut client, events[0].message_id.clone()).await;
    assert_eq!(stored.answer, "The answer is");
    assert_eq!(streamed_text(&events), stored.answer);
}

/// A stream cut before any text reached the user is retried: nothing has to be taken back.
#[tokio::test]
async fn a_stream_cut_before_any_text_is_retried() {
    let (llm, _server, mut client) = start(vec![
        Reply::DropAfter(vec![]),
        Reply::text(&["Whole answer."], (2, 2)),
    ])
    .await;

    let events = run_to_end(&mut client, run_request("hi", &[])).await;

    assert_eq!(end_of(&events).answer, "Whole answer.");
    assert_eq!(streamed_text(&events), "Whole answer.");
    assert_eq!(llm.requests().len(), 2);
}

/// When the primary's provider is down (nothing listens), its retry runs out and the
/// fallback serves the round: the thought names the model that answered, and the usage is
/// priced at the fallback's prices (the scripted model's 1 and 2 per million), not the
/// primary's.
#[tokio::test]
async fn a_fallback_serves_when_the_primary_is_down() {
    let (llm, _server, mut client) =
        start(vec![Reply::text(&["From the fallback."], (1_000_000, 0))]).await;
    let request = with_fallback(
        run_request("hi", &[]).provider(DOWN_PROVIDER),
        PROVIDER,
        STREAMING_MODEL,
    );

    let events = run_to_end(&mut client, request).await;

    let end = end_of(&events);
    assert_eq!(end.answer, "From the fallback.");
    assert_eq!(end.usage.unwrap().total_price, "1");
    let thought = &final_thoughts(&events)[0];
    assert_eq!(
        (thought.provider.as_str(), thought.model.as_str()),
        (PROVIDER, STREAMING_MODEL)
    );
    let retries = retries(&events);
    assert_eq!(
        retries.len(),
        2,
        "one retry on the primary, then the fallback"
    );
    assert_eq!(retries[0].code, "llm_connect_error");
    assert_eq!(retries[0].provider, DOWN_PROVIDER);
    assert_eq!(retries[1].provider, PROVIDER);
    assert_eq!(retries[1].delay, 0.0);
    assert_eq!(llm.requests().len(), 1);
    assert_eq!(llm.requests()[0]["model"], STREAMING_MODEL);
}

/// A fallback naming a provider that does not exist is refused before the run starts.
#[tokio::test]
async fn an_unknown_fallback_is_invalid_argument() {
    let (_llm, _server, mut client) = start(vec![]).await;
    let request = with_fallback(run_request("hi", &[]), "nope", "m");

    let status = client.run(request).await.unwrap_err();

    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("agent.model.fallbacks[0].provider: unknown provider \"nope\""),
        "{}",
        status.message()
    );
}

/// `Cancel` during a backoff (the provider asked for ten seconds) ends the run at once,
/// without the second request.
#[tokio::test]
async fn a_cancel_during_backoff_ends_the_run_at_once() {
    let (llm, _server, mut client) = start(vec![Reply::Throttle {
        status: 429,
        retry_after: "10",
    }])
    .await;
    let mut stream = client
        .run(run_request("hi", &[]).provider(PATIENT_PROVIDER))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let retry = matches!(event.event, Some(Event::Retry(_)));
        seen.push(event);
        if retry {
            break;
        }
    }

    let asked = Instant::now();
    client
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap();
    let rest = read_rest(&mut stream).await;
    let took = asked.elapsed();

    assert_eq!(
        end_of(&rest).finish_reason,
        pb::FinishReason::Cancelled as i32
    );
    assert!(
        took < Duration::from_secs(2),
        "took {took:?} of a 10 s backoff"
    );
    assert_eq!(llm.requests().len(), 1);
}

/// With one call in flight allowed, a second run's round waits for the first one's slot
/// and the wait shows in its round's timing (`queue_time`, inside `latency`). The first
/// answer goes on for 0.6 s after its first delta (within the provider's 1 s queue
/// timeout), so the wait passes 0.2 s even when a loaded machine shows that delta late.
#[tokio::test]
async fn a_provider_limit_queues_calls_and_the_wait_is_reported() {
    let (llm, server, mut client) = start(vec![
        Reply::Slow {
            text: vec!["slow ", "first ", "answer"],
            delay_ms: 100,
        },
        Reply::text(&["second"], (1, 1)),
    ])
    .await;
    let mut first = client
        .run(run_request("one", &[]).provider(NARROW_PROVIDER))
        .await
        .unwrap()
        .into_inner();
    read_until_delta(&mut first).await;
    let mut other = server.agents().await;

    let second = run_to_end(
        &mut other,
        run_request("two", &[]).provider(NARROW_PROVIDER),
    )
    .await;
    read_rest(&mut first).await;

    assert_eq!(end_of(&second).answer, "second");
    let usage = final_thoughts(&second)[0].usage.clone().unwrap();
    assert!(usage.queue_time >= 0.2, "{usage:?}");
    assert!(usage.latency >= usage.queue_time);
    assert_eq!(llm.requests().len(), 2);
}

/// A call that finds its provider full for the whole queue timeout counts as a retryable
/// failure: it goes to the fallback instead of waiting on.
#[tokio::test]
async fn a_full_provider_hands_the_call_to_the_fallback() {
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["holding the slot"]),
        Reply::text(&["from the fallback"], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let mut holder = client
        .run(run_request("one", &[]).provider(NARROW_PROVIDER))
        .await
        .unwrap()
        .into_inner();
    let held = read_until_delta(&mut holder).await;
    let mut other = server.agents().await;
    let request = with_fallback(
        run_request("two", &[]).provider(NARROW_PROVIDER),
        PROVIDER,
        STREAMING_MODEL,
    );

    let events = run_to_end(&mut other, request).await;

    assert_eq!(end_of(&events).answer, "from the fallback");
    let retries = retries(&events);
    assert_eq!(retries[0].code, "llm_provider_busy");
    client
        .cancel(pb::CancelRequest {
            message_id: held[0].message_id.clone(),
        })
        .await
        .unwrap();
}
