//! Runs that outlive their replica: three replica processes on one PostgreSQL database and
//! one NATS server; the owner of many runs is killed mid-answer and its peers take every
//! run over and finish it, with nothing a client saw changed and no gap in `seq`. The tests
//! take turns with the other replica tests ([`TURN`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::pb::tool_registry_client::ToolRegistryClient;
use agent_runner::store::SecretKey;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::support::orders::orders_provider;
use crate::support::postgres::TestDatabase;
use crate::support::process::{channel, client};
use crate::support::replicas::*;
use crate::support::{message, run_request, FakeOpenAi, Reply, RunRequestExt, ScriptedCall};

/// `kill -9` of the owner of 12 runs mid-answer: each run, attached on a peer from `seq`
/// 0, shows every event its owner's client saw, then `round_restarted` voiding the cut
/// text within 15 s of the kill, then the round made again and `end`, `seq` 1..n without
/// gap or repeat; none is left running, and the tenant's tokens are the runs' usage, once.
#[tokio::test]
async fn the_runs_of_a_killed_owner_all_finish_on_its_peers() {
    const RUNS: usize = 12;
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let mut replies = vec![Reply::Stall(vec!["Half an "]); RUNS];
    replies.extend(vec![
        Reply::calls(&["Whole ", "answer"], Vec::new(), (4, 2));
        RUNS
    ]);
    let llm = FakeOpenAi::start(replies).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus,
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let c = replica_on(dir.path(), &llm, &database, &key, "c", &options).await;

    let mut runs = Vec::new();
    for index in 0..RUNS {
        let (owner_stream, seen) = started(&a, "answer").await;
        let peer = if index % 2 == 0 { &b } else { &c };
        let followed = attach(peer, &seen[0].message_id, 0).await;
        runs.push((owner_stream, seen, followed));
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();

    let finished = runs
        .into_iter()
        .map(|(_owner, seen, mut followed)| async move {
            let mut events = Vec::new();
            let mut went_on = None;
            loop {
                let next = tokio::time::timeout(Duration::from_secs(40), followed.message()).await;
                let Some(event) = next.expect("the run finishes in time").unwrap() else {
                    break;
                };
                if matches!(event.event, Some(Event::RoundRestarted(_))) {
                    went_on.get_or_insert(killed.elapsed());
                }
                events.push(event);
            }
            (seen, events, went_on)
        });
    let mut ids = Vec::new();
    let mut tokens = 0;
    for (seen, events, went_on) in futures::future::join_all(finished).await {
        assert_eq!(
            &events[..seen.len()],
            &seen[..],
            "what the client saw stays"
        );
        let Some(Event::RoundRestarted(restarted)) = &events[seen.len()].event else {
            panic!("the new owner's first event: {events:?}");
        };
        assert_eq!(restarted.position, 1);
        assert_eq!(restarted.discard_from_seq, seen.last().unwrap().seq);
        let went_on = went_on.unwrap();
        assert!(
            went_on < Duration::from_secs(15),
            "went on {went_on:?} after the kill"
        );
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
        let Some(Event::End(end)) = &events.last().unwrap().event else {
            panic!("the run ends normally: {events:?}");
        };
        assert_eq!(end.answer, "Whole answer");
        tokens += end.usage.as_ref().map_or(0, |usage| usage.total_tokens);
        ids.push(seen[0].message_id.clone());
    }
    let counted = database
        .number("SELECT COALESCE(sum(tokens), 0)::bigint FROM tenant_usage")
        .await;
    assert!(tokens > 0);
    assert_eq!(
        counted, tokens as i64,
        "tenant tokens equal the runs' usage"
    );
    for id in ids {
        let read = message(&mut client(&b).await, id).await;
        assert_eq!(read.status, pb::MessageStatus::Completed as i32);
        assert_eq!(read.answer, "Whole answer");
    }
    assert_eq!(database.count("messages WHERE running").await, 0);
    assert_eq!(
        llm.requests().len(),
        2 * RUNS,
        "each cut call made again once"
    );
}

/// What the order API was sent.
#[derive(Default)]
struct Orders {
    /// `POST /orders` calls.
    placed: AtomicUsize,
    /// The `Idempotency-Key` of each `GET /orders/{id}` call.
    shown: Mutex<Vec<String>>,
}

/// An order API: `POST /orders` counts its calls and holds each open; `GET /orders/{id}`
/// keeps each call's `Idempotency-Key` and holds the first open.
async fn order_service() -> (std::net::SocketAddr, Arc<Orders>) {
    let orders = Arc::new(Orders::default());
    async fn place(State(orders): State<Arc<Orders>>) -> Json<Value> {
        orders.placed.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Json(json!({"order": "placed"}))
    }
    async fn show(State(orders): State<Arc<Orders>>, headers: HeaderMap) -> Json<Value> {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let first = {
            let mut shown = orders.shown.lock().unwrap();
            shown.push(key);
            shown.len() == 1
        };
        if first {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Json(json!({"order": 7, "status": "shipped"}))
    }
    let router = Router::new()
        .route("/api/orders", post(place))
        .route("/api/orders/{id}", get(show))
        .with_state(Arc::clone(&orders));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, orders)
}

/// Two calls in flight when their owner dies: the one that is not idempotent (`POST`) is
/// not made again (the peer that takes the run over gives it the observation that its
/// outcome is unknown, `tool_outcome_unknown`); the idempotent one (`GET`) is made again
/// with the same `Idempotency-Key`; the model goes on from there and the run ends.
#[tokio::test]
async fn a_call_in_flight_when_its_owner_dies_is_never_made_twice() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let (addr, orders) = order_service().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("o1", "placeOrder", &["{\"item\": \"tea\"}"]),
                ScriptedCall::new("o2", "showOrder", &["{\"id\": 7}"]),
            ],
            (3, 2),
        ),
        Reply::calls(&["I could not confirm the order."], Vec::new(), (5, 3)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    ToolRegistryClient::new(channel(&a).await)
        .create_provider(pb::CreateProviderRequest {
            provider: Some(orders_provider(addr)),
        })
        .await
        .unwrap();
    let request = run_request(
        "order tea",
        &[("orders", "placeOrder"), ("orders", "showOrder")],
    );
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let id = first.message_id.clone();
    within("both calls go out", || async {
        orders.placed.load(Ordering::SeqCst) == 1 && orders.shown.lock().unwrap().len() == 1
    })
    .await;
    let mut on_peer = attach(&b, &id, 0).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let followed = read_within(&mut on_peer, Duration::from_secs(20)).await;
    let finished: Vec<pb::ToolCall> = followed
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::ToolFinished(finished)) => finished.tool_call.clone(),
            _ => None,
        })
        .collect();
    let placed = finished.iter().find(|c| c.name == "placeOrder").unwrap();
    assert!(
        placed.observation.contains("tool_outcome_unknown"),
        "{placed:?}"
    );
    let shown = finished.iter().find(|c| c.name == "showOrder").unwrap();
    assert!(shown.observation.contains("shipped"), "{shown:?}");
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(end.answer, "I could not confirm the order.");
    // Time for a call made twice by mistake to reach the order service before it counts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(orders.placed.load(Ordering::SeqCst), 1, "never made twice");
    let keys = orders.shown.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "the idempotent call is made again");
    assert!(!keys[0].is_empty());
    assert_eq!(keys[0], keys[1], "with the same Idempotency-Key");
    let prompt = llm.requests()[1].to_string();
    assert!(prompt.contains("tool_outcome_unknown"), "{prompt}");
}

/// SIGTERM of an owner mid-answer: it stops taking runs, cuts the step still going after
/// its grace period and exits cleanly; its client's stream ends `UNAVAILABLE` with no
/// `error` event; a peer goes on with the run (told as a hand-over), and a follower there
/// sees it finish with no `error` event.
#[tokio::test]
async fn a_stopping_owner_hands_its_run_to_a_peer() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half"]),
        Reply::calls(&["Finished on the peer."], Vec::new(), (4, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let (mut owner_stream, seen) = started(&a, "answer").await;
    let id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &id, 0).await;

    signal(&a, "TERM");
    let cut = loop {
        match owner_stream.message().await {
            Ok(Some(event)) => assert!(!matches!(event.event, Some(Event::Error(_)))),
            Ok(None) => panic!("the owner's stream ends with UNAVAILABLE"),
            Err(status) => break status,
        }
    };
    assert_eq!(cut.code(), tonic::Code::Unavailable, "{cut:?}");
    let exited =
        crate::support::process::wait_for_exit(&mut a.child, Duration::from_secs(10)).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");

    let followed = read_within(&mut on_peer, Duration::from_secs(20)).await;
    assert_eq!(&followed[..seen.len()], &seen[..]);
    assert!(!followed
        .iter()
        .any(|e| matches!(e.event, Some(Event::Error(_)))));
    let restarted = followed.iter().find_map(|e| match &e.event {
        Some(Event::RoundRestarted(restarted)) => Some(restarted.clone()),
        _ => None,
    });
    assert_eq!(restarted.unwrap().reason, "handed_over");
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(end.answer, "Finished on the peer.");
    assert_eq!(
        database
            .count("messages WHERE record LIKE '%\"takeovers\"%'")
            .await,
        0,
        "a hand-over is not a takeover"
    );
}

/// A cancel sent while the run's owner is dead is kept, and wins: the peer that takes the
/// run over ends it `CANCELLED` without calling the model again, and `Cancel` says so.
#[tokio::test]
async fn a_cancel_sent_while_the_owner_is_dead_wins_over_resuming() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half"]),
        Reply::calls(&["Never asked."], Vec::new(), (4, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let (_owner_stream, seen) = started(&a, "answer").await;
    let id = seen[0].message_id.clone();
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let cancelled = client(&b)
        .await
        .cancel(pb::CancelRequest {
            message_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    let read = message(&mut client(&b).await, id.clone()).await;
    assert_eq!(read.status, pb::MessageStatus::Cancelled as i32);
    let events = read_within(&mut attach(&b, &id, 0).await, Duration::from_secs(5)).await;
    let Some(Event::End(end)) = &events.last().unwrap().event else {
        panic!("the run ends cancelled: {events:?}");
    };
    assert_eq!(end.finish_reason, pb::FinishReason::Cancelled as i32);
    assert_eq!(llm.requests().len(), 1, "the model is not asked again");
}

/// A run waiting for its caller's tool outputs when its owner dies: the caller answers on
/// a third replica while the run has no owner; the replica that takes the run over goes on
/// with those outputs, and the run ends with them in its thought.
#[tokio::test]
async fn a_waiting_run_whose_owner_died_takes_the_outputs_sent_to_a_third_replica() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::calls(&["Order A1 has shipped."], Vec::new(), (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let c = replica(dir.path(), &llm, &database, &key, "c").await;
    let (_stream, seen) = started_asking(&a, "Where is order A1?").await;
    let id = seen[0].message_id.clone();
    let mut on_b = attach(&b, &id, 0).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    client(&c)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .unwrap();
    let followed = read_within(&mut on_b, Duration::from_secs(20)).await;
    assert_eq!(&followed[..seen.len()], &seen[..]);
    let seqs: Vec<u64> = followed.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(end.answer, "Order A1 has shipped.");
    let answered = followed.iter().find_map(|event| match &event.event {
        Some(Event::ToolFinished(finished)) => finished.tool_call.clone(),
        _ => None,
    });
    assert_eq!(answered.unwrap().observation, "shipped");
    let prompt = llm.requests()[1].to_string();
    assert!(prompt.contains("shipped"), "{prompt}");
}

/// A run waiting for approval when its owner dies: the decision sent to a peer while the
/// run has no owner answers the wait of the replica that takes it over, and the approved
/// call runs there.
#[tokio::test]
async fn an_approval_sent_while_the_owner_is_dead_reaches_the_run_taken_over() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "gated",
                "eval_expression",
                &["{\"expression\": \"6*7\"}"],
            )],
            (1, 1),
        ),
        Reply::calls(&["It is 42."], Vec::new(), (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let request =
        run_request("6*7?", &[("maths", "eval_expression")]).needs_approval("eval_expression");
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let seen = read_until(&mut stream, |e| {
        matches!(e.event, Some(Event::ApprovalRequired(_)))
    })
    .await;
    let id = seen[0].message_id.clone();
    let mut on_b = attach(&b, &id, 0).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    client(&b)
        .await
        .approve_tool_calls(approved(&id, "gated"))
        .await
        .unwrap();
    let followed = read_within(&mut on_b, Duration::from_secs(20)).await;
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(end.answer, "It is 42.");
    let ran = followed.iter().find_map(|event| match &event.event {
        Some(Event::ToolFinished(finished)) => finished.tool_call.clone(),
        _ => None,
    });
    assert_eq!(ran.unwrap().observation, "42");
}

/// SIGTERM of an owner whose run waits for its caller: a wait is the end of a step, so
/// the owner hands the run over at once and exits well within its grace period; the peer
/// that goes on with it waits again, and the caller's outputs sent there finish the run.
#[tokio::test]
async fn a_stopping_owner_hands_a_waiting_run_over_at_once() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::calls(&["Order A1 has shipped."], Vec::new(), (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    // The run must still be waiting when b has taken it and the outputs arrive: a wait of
    // 10 s leaves room for a loaded machine, where the stop, the sweep and the restart of
    // the round took more than the tests' usual 2 s.
    let patient = Options {
        client_tool_timeout_secs: Some(10),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &patient).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &patient).await;
    // A replica judges its peers gone only once it has held its own lease for a whole
    // lease (2 s here): b is given that, so it takes the run at its next sweep.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_stream, seen) = started_asking(&a, "Where is order A1?").await;
    let id = seen[0].message_id.clone();
    let mut on_b = attach(&b, &id, 0).await;

    let stopping = Instant::now();
    signal(&a, "TERM");
    let exited =
        crate::support::process::wait_for_exit(&mut a.child, Duration::from_secs(10)).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "stopped after {took:?} (grace 5 s)"
    );
    read_until(
        &mut on_b,
        |e| matches!(&e.event, Some(Event::RoundRestarted(r)) if r.reason == "handed_over"),
    )
    .await;

    client(&b)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .unwrap();
    let rest = read_within(&mut on_b, Duration::from_secs(20)).await;
    let Some(Event::End(end)) = &rest.last().unwrap().event else {
        panic!("the run ends normally: {rest:?}");
    };
    assert_eq!(end.answer, "Order A1 has shipped.");
}

/// Outputs a caller sends while the run's owner is stopping (SIGTERM; it keeps serving
/// while another of its runs drains): answered OK, they are never taken by the stopping
/// process, which no longer runs the waiting run, but kept for the peer that goes on with
/// it, which finishes the run with them and asks nothing again.
#[tokio::test]
async fn outputs_sent_while_the_owner_stops_reach_the_peer_that_goes_on() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        slow(30, 100),
        Reply::calls(&["Order A1 has shipped."], Vec::new(), (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let patient = Options {
        client_tool_timeout_secs: Some(30),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &patient).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &patient).await;
    // As above: b holds its own lease for a whole lease before it judges a peer gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_waiting, seen) = started_asking(&a, "Where is order A1?").await;
    let id = seen[0].message_id.clone();
    let (_draining, _) = started(&a, "count").await;
    let mut on_b = attach(&b, &id, 0).await;
    let followed = read_until(&mut on_b, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    assert_eq!(followed.len(), seen.len());

    signal(&a, "TERM");
    // Once the run is handed over, and while its owner still drains the other run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    client(&b)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .expect("the answer is kept");
    let answered = Instant::now();
    let rest = read_within(&mut on_b, Duration::from_secs(20)).await;
    let Some(Event::End(end)) = &rest.last().unwrap().event else {
        panic!("the run ends normally: {rest:?}");
    };
    assert_eq!(end.answer, "Order A1 has shipped.");
    assert!(
        answered.elapsed() < Duration::from_secs(15),
        "finished {:?} after the answer: it waited for another",
        answered.elapsed()
    );
    let asked_again = rest
        .iter()
        .filter(|e| matches!(e.event, Some(Event::ToolCallsRequired(_))))
        .count();
    assert_eq!(asked_again, 0, "no second ask: {rest:?}");
    let exited =
        crate::support::process::wait_for_exit(&mut a.child, Duration::from_secs(10)).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
}

/// A run started with `cancel_on_disconnect` whose owner dies lost its client's stream
/// with it: the peer that takes it over ends it `CANCELLED` without calling the model.
#[tokio::test]
async fn a_run_cancelled_on_disconnect_ends_cancelled_when_its_owner_dies() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half"]),
        Reply::calls(&["Never asked."], Vec::new(), (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let mut request = run_request("answer", &[]);
    request.cancel_on_disconnect = true;
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let seen = read_until(&mut stream, |e| matches!(e.event, Some(Event::Delta(_)))).await;
    let id = seen[0].message_id.clone();
    let mut on_b = attach(&b, &id, 0).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let followed = read_within(&mut on_b, Duration::from_secs(20)).await;
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends cancelled: {followed:?}");
    };
    assert_eq!(end.finish_reason, pb::FinishReason::Cancelled as i32);
    let read = message(&mut client(&b).await, id).await;
    assert_eq!(read.status, pb::MessageStatus::Cancelled as i32);
    assert_eq!(llm.requests().len(), 1, "the model is not asked again");
}
