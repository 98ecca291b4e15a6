//! A run that arrives while its conversation has a live run follows its conversation
//! policy: REJECT refuses it naming the live run, PARALLEL runs it beside the live one from
//! the same history (ENQUEUE, the default, has tests of its own). The rule is the store's, so it holds across replicas.

use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use tonic::Code;
use tonic_types::StatusExt;

use crate::support::conversation::{asking, slow_answer, streaming, turns};
use crate::support::postgres::TestDatabase;
use crate::support::process::{client, Service};
use crate::support::replicas::{nats_bus, on_both_buses, replica_on, Bus, Options, TURN};
use crate::support::{end_of, read_until_delta, run_request, run_to_end, start, Reply};

/// Asserts that `status` is REJECT's refusal naming `live`, with a time to retry after.
fn says_busy(status: &tonic::Status, live: &str) {
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(
        status.message().contains("conversation_policy"),
        "{status:?}"
    );
    let info = status.get_details_error_info().expect("an ErrorInfo");
    assert_eq!(info.reason, "CONVERSATION_BUSY");
    assert_eq!(info.domain, "agent-runner");
    assert_eq!(
        info.metadata.get("message_id").map(String::as_str),
        Some(live)
    );
    let retry = status.get_details_retry_info().expect("a RetryInfo");
    assert!(retry.retry_delay.is_some_and(|d| d > Duration::ZERO));
}

/// REJECT on one node: a second run while the first streams is refused naming the first,
/// costs no model call and writes no message; once the first has ended a run is admitted,
/// and its prompt holds the first run's question and answer. An agent's own policy applies
/// when the request leaves it unset, and the request's wins over it.
#[tokio::test]
async fn reject_refuses_a_run_while_another_is_live_naming_it() {
    let (llm, _server, mut client) = start(vec![
        slow_answer(),
        Reply::text(&["Second answer."], (1, 1)),
        slow_answer(),
        Reply::text(&["Beside it."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = streaming(&mut client, run_request("First question?", &[])).await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());

    let refused = client
        .run(asking(
            "Second question?",
            &conversation,
            pb::ConversationPolicy::Reject,
        ))
        .await
        .expect_err("REJECT refuses while a run is live");
    says_busy(&refused, &live);
    let mut by_agent = asking(
        "Agent says no?",
        &conversation,
        pb::ConversationPolicy::Unspecified,
    );
    by_agent.agent.as_mut().unwrap().conversation_policy = pb::ConversationPolicy::Reject.into();
    says_busy(
        &client.run(by_agent).await.expect_err("the agent's REJECT"),
        &live,
    );

    while first.message().await.unwrap().is_some() {}
    let events = run_to_end(
        &mut client,
        asking(
            "Second question?",
            &conversation,
            pb::ConversationPolicy::Reject,
        ),
    )
    .await;
    assert_eq!(end_of(&events).answer, "Second answer.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "the refused runs called no model");
    assert_eq!(
        turns(&requests[1], "user"),
        ["First question?", "Second question?"]
    );
    assert_eq!(
        turns(&requests[1], "assistant"),
        ["slow answer still going"]
    );
    let messages = client
        .list_messages(pb::ListMessagesRequest {
            conversation_id: conversation.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .messages;
    assert_eq!(messages.len(), 2, "a refused run wrote no message");

    // The request's PARALLEL wins over the agent's REJECT.
    let (_third, seen) = streaming(&mut client, run_request("Third?", &[])).await;
    let mut beside = asking(
        "Beside?",
        &seen[0].conversation_id,
        pb::ConversationPolicy::Parallel,
    );
    beside.agent.as_mut().unwrap().conversation_policy = pb::ConversationPolicy::Reject.into();
    let events = run_to_end(&mut client, beside).await;
    assert_eq!(end_of(&events).answer, "Beside it.");
}

/// PARALLEL (the request's, or the agent's when the request sets none): a second run
/// starts while the first streams, and both prompts hold the same history, neither the
/// other's question.
#[tokio::test]
async fn parallel_runs_answer_from_the_same_history() {
    let (llm, _server, mut client) = start(vec![
        Reply::text(&["Paris."], (1, 1)),
        slow_answer(),
        Reply::text(&["Beside."], (1, 1)),
        slow_answer(),
        Reply::text(&["Also beside."], (1, 1)),
    ])
    .await;
    let opening = run_to_end(&mut client, run_request("Capital of France?", &[])).await;
    let conversation = opening[0].conversation_id.clone();
    for by_agent in [false, true] {
        let parallel = |query: &str| {
            let mut request = asking(query, &conversation, pb::ConversationPolicy::Parallel);
            if by_agent {
                request.conversation_policy = pb::ConversationPolicy::Unspecified.into();
                request.agent.as_mut().unwrap().conversation_policy =
                    pb::ConversationPolicy::Parallel.into();
            }
            request
        };
        let mut first = client.run(parallel("First?")).await.unwrap().into_inner();
        read_until_delta(&mut first).await;
        let second = run_to_end(&mut client, parallel("Second?")).await;
        assert!(matches!(
            second.last().and_then(|e| e.event.clone()),
            Some(Event::End(_))
        ));
        while first.message().await.unwrap().is_some() {}
    }
    let requests = llm.requests();
    assert_eq!(requests.len(), 5);
    for pair in [[1, 2], [3, 4]] {
        let [a, b] = pair.map(|i| turns(&requests[i], "user"));
        assert_eq!(a[..a.len() - 1], b[..b.len() - 1], "the same history");
        assert_eq!(a.last().unwrap(), "First?");
        assert_eq!(b.last().unwrap(), "Second?");
    }
}

/// An unknown policy is refused naming its field, in the request and in the agent.
#[tokio::test]
async fn an_unknown_policy_is_refused_naming_its_field() {
    let (_llm, _server, mut client) = start(vec![]).await;
    let mut request = run_request("Hi", &[]);
    request.conversation_policy = 99;
    let refused = client.run(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("conversation_policy"),
        "{refused:?}"
    );
    let mut request = run_request("Hi", &[]);
    request.agent.as_mut().unwrap().conversation_policy = -1;
    let refused = client.run(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().starts_with("agent.conversation_policy"),
        "{refused:?}"
    );
}

on_both_buses!(across_replicas: reject_and_parallel_hold_across_replicas_over_nats, reject_and_parallel_hold_across_replicas_without_nats);

/// Two REJECT runs sent to two replicas at the same moment on one conversation: exactly
/// one runs and the other is refused naming it. Two PARALLEL runs sent the same way both
/// run, from the same history.
async fn across_replicas(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = crate::support::FakeOpenAi::start(vec![Reply::text(&["Paris."], (1, 1))]).await;
    llm.repeat(slow_answer());
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let opening = run_to_end(
        &mut client(&a).await,
        run_request("Capital of France?", &[]),
    )
    .await;
    let conversation = opening[0].conversation_id.clone();

    let (on_a, on_b) = tokio::join!(
        first_event(
            &a,
            asking("From A?", &conversation, pb::ConversationPolicy::Reject)
        ),
        first_event(
            &b,
            asking("From B?", &conversation, pb::ConversationPolicy::Reject)
        ),
    );
    let (winner, refused) = match (on_a, on_b) {
        (Ok(winner), Err(refused)) | (Err(refused), Ok(winner)) => (winner, refused),
        other => panic!("exactly one of two REJECT runs runs: {other:?}"),
    };
    says_busy(&refused, &winner.message_id);
    within_a_while(&a, &winner.message_id).await;
    assert_eq!(llm.requests().len(), 2, "the refused run called no model");

    let (on_a, on_b) = tokio::join!(
        first_event(
            &a,
            asking("Beside A?", &conversation, pb::ConversationPolicy::Parallel)
        ),
        first_event(
            &b,
            asking("Beside B?", &conversation, pb::ConversationPolicy::Parallel)
        ),
    );
    let (on_a, on_b) = (on_a.expect("A runs"), on_b.expect("B runs"));
    within_a_while(&a, &on_a.message_id).await;
    within_a_while(&a, &on_b.message_id).await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let [x, y] = [2, 3].map(|i| turns(&requests[i], "user"));
    assert_eq!(x[..x.len() - 1], y[..y.len() - 1], "the same history");
    assert!(x[..x.len() - 1].iter().all(|q| !q.starts_with("Beside")));
}

/// The first event of a run `service` starts, or the status it was refused with.
async fn first_event(
    service: &Service,
    request: pb::RunRequest,
) -> Result<pb::RunEvent, tonic::Status> {
    let mut stream = client(service).await.run(request).await?.into_inner();
    Ok(stream.message().await?.expect("a first event"))
}

/// Waits until the run of `message_id` has ended, following it on `service`.
async fn within_a_while(service: &Service, message_id: &str) {
    let mut stream = crate::support::replicas::attach(service, message_id, 0).await;
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while stream.message().await.unwrap().is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the run of {message_id} ended");
}
