//! A run that arrives with INTERRUPT or ROLLBACK stops the live runs of its conversation
//! and starts after them: a model call in flight stops at once keeping the text shown so
//! far, a wait ends at once, a call that may be repeated is stopped and one that must not
//! repeat is let finish. The stopped run ends FINISH_REASON_INTERRUPTED naming the new run;
//! ROLLBACK also leaves it out of every later prompt. Across replicas the interruption is a
//! command kept for the run's owner, so it holds when the owner dies too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::store::SecretKey;
use axum::routing::{get, post};
use axum::{extract::State, Json, Router};
use serde_json::{json, Value};

use crate::support::conversation::{asking, enqueued, streaming, turns};
use crate::support::orders::orders_provider;
use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::{
    attach, nats_bus, on_both_buses, read_until, read_within, replica_on, Bus, Options, TURN,
};
use crate::support::{
    end_of, message, read_rest, run_request, run_to_end, start, FakeOpenAi, Reply, ScriptedCall,
};

const INTERRUPT: pb::ConversationPolicy = pb::ConversationPolicy::Interrupt;
const ROLLBACK: pb::ConversationPolicy = pb::ConversationPolicy::Rollback;

/// Asserts that `events` (a stopped run's) end FINISH_REASON_INTERRUPTED naming `by`, with
/// `answer` as what it had shown.
fn ends_interrupted_by(events: &[pb::RunEvent], by: &str, answer: &str) {
    let end = end_of(events);
    assert_eq!(
        end.finish_reason,
        pb::FinishReason::Interrupted as i32,
        "{events:?}"
    );
    assert_eq!(end.interrupted_by, by);
    assert_eq!(end.answer, answer);
}

/// The first event of a new run that stops the live ones: `queued` behind `live`.
fn waits_behind(events: &[pb::RunEvent], live: &str) {
    match &events[0].event {
        Some(Event::Queued(queued)) => assert_eq!(queued.message_id, live),
        other => panic!("the new run waits for the stopped one: {other:?}"),
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, Some(Event::Started(_)))),
        "then it starts"
    );
}

/// INTERRUPT while the first run's model call streams (and would never end): the call
/// stops at once, the first run ends INTERRUPTED naming the second with the text it had
/// shown, and the second run's prompt holds the first run's question and that partial
/// answer. The stopped message reads INTERRUPTED, not rolled back.
#[tokio::test]
async fn interrupt_stops_a_model_call_in_flight_keeping_what_it_showed() {
    let (llm, _server, mut client) = start(vec![
        Reply::Stall(vec!["Half an"]),
        Reply::text(&["Second answer."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = streaming(&mut client, run_request("First question?", &[])).await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());

    let second = run_to_end(
        &mut client,
        asking("Second question?", &conversation, INTERRUPT),
    )
    .await;
    waits_behind(&second, &live);
    assert_eq!(end_of(&second).answer, "Second answer.");
    let stopped = read_rest(&mut first).await;
    ends_interrupted_by(&stopped, &second[0].message_id, "Half an");

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        turns(&requests[1], "user"),
        ["First question?", "Second question?"]
    );
    assert_eq!(turns(&requests[1], "assistant"), ["Half an"]);
    let read = message(&mut client, live).await;
    assert_eq!(read.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(read.finish_reason, pb::FinishReason::Interrupted as i32);
    assert_eq!(read.interrupted_by, second[0].message_id);
    assert!(!read.rolled_back);
    assert!(read.error.is_none(), "an interruption is no failure");
}

/// ROLLBACK: the stopped run is left out of the new run's prompt and of every later one
/// (an earlier answered turn stays), while its record stays readable, marked rolled back.
#[tokio::test]
async fn rollback_leaves_the_stopped_run_out_of_every_later_prompt() {
    let (llm, _server, mut client) = start(vec![
        Reply::text(&["Paris."], (1, 1)),
        Reply::Stall(vec!["Wrong way"]),
        Reply::text(&["Second answer."], (1, 1)),
        Reply::text(&["Third answer."], (1, 1)),
    ])
    .await;
    let opening = run_to_end(&mut client, run_request("Capital of France?", &[])).await;
    let conversation = opening[0].conversation_id.clone();
    let (mut first, seen) =
        streaming(&mut client, enqueued("Go the wrong way?", &conversation)).await;
    let live = seen[0].message_id.clone();

    let second = run_to_end(
        &mut client,
        asking("Second question?", &conversation, ROLLBACK),
    )
    .await;
    waits_behind(&second, &live);
    ends_interrupted_by(
        &read_rest(&mut first).await,
        &second[0].message_id,
        "Wrong way",
    );
    run_to_end(&mut client, enqueued("Third question?", &conversation)).await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        turns(&requests[2], "user"),
        ["Capital of France?", "Second question?"]
    );
    assert_eq!(turns(&requests[2], "assistant"), ["Paris."]);
    assert_eq!(
        turns(&requests[3], "user"),
        ["Capital of France?", "Second question?", "Third question?"]
    );
    assert_eq!(
        turns(&requests[3], "assistant"),
        ["Paris.", "Second answer."]
    );
    let read = message(&mut client, live).await;
    assert!(read.rolled_back);
    assert_eq!(read.answer, "Wrong way", "the record stays readable");
}

/// A run waiting for its caller's tool output is live: INTERRUPT ends the wait at once,
/// the unanswered call is answered "interrupted" for the model, and the new run's prompt
/// holds the call with that answer.
#[tokio::test]
async fn interrupt_ends_a_wait_and_answers_its_calls_interrupted() {
    let (llm, _server, mut client) = start(vec![
        crate::support::replicas::calls_order_lookup(),
        Reply::text(&["Asked again."], (1, 1)),
    ])
    .await;
    let mut request = run_request("Where is my order?", &[]);
    request
        .client_tools
        .push(crate::support::replicas::order_lookup());
    let mut first = client.run(request).await.unwrap().into_inner();
    let seen = read_until(&mut first, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());

    let second = run_to_end(
        &mut client,
        asking("Never mind, cancel it.", &conversation, INTERRUPT),
    )
    .await;
    let stopped = read_rest(&mut first).await;
    ends_interrupted_by(&stopped, &second[0].message_id, "");
    let finished: Vec<&pb::ToolCall> = stopped
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::ToolFinished(finished)) => finished.tool_call.as_ref(),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1, "its followers see the call answered");
    assert!(finished[0].observation.starts_with("interrupted"));
    let prompt = &llm.requests()[1];
    let answered: Vec<&Value> = prompt["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(answered.len(), 1, "{prompt}");
    assert_eq!(answered[0]["tool_call_id"], "cli");
    assert!(
        answered[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{prompt}"
    );
    assert_eq!(
        message(&mut client, live).await.status,
        pb::MessageStatus::Interrupted as i32
    );
}

/// Two calls in flight when INTERRUPT arrives: the idempotent one (`GET`) is stopped at once
/// and answered "interrupted"; the one that must not repeat (`POST`) is let finish and its
/// result kept; only then does the run end and the new one start, its prompt holding both.
#[tokio::test]
async fn interrupt_lets_a_call_that_must_not_repeat_finish() {
    let (addr, orders) = order_service().await;
    let (llm, server, mut client) = start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("o1", "placeOrder", &["{\"item\": \"tea\"}"]),
                ScriptedCall::new("o2", "showOrder", &["{\"id\": 7}"]),
            ],
            (3, 2),
        ),
        Reply::text(&["Your tea is ordered."], (1, 1)),
    ])
    .await;
    server
        .tools()
        .await
        .create_provider(pb::CreateProviderRequest {
            provider: Some(orders_provider(addr)),
        })
        .await
        .unwrap();
    let request = run_request(
        "order tea",
        &[("orders", "placeOrder"), ("orders", "showOrder")],
    );
    let mut first = client.run(request).await.unwrap().into_inner();
    let opened = first.message().await.unwrap().unwrap();
    let (live, conversation) = (opened.message_id.clone(), opened.conversation_id.clone());
    crate::support::replicas::within("both calls go out", || async {
        orders.placed.load(Ordering::SeqCst) == 1 && orders.shown.load(Ordering::SeqCst) == 1
    })
    .await;

    let second = run_to_end(&mut client, asking("And milk?", &conversation, INTERRUPT)).await;
    let stopped = read_rest(&mut first).await;
    ends_interrupted_by(&stopped, &second[0].message_id, "");
    let prompt = llm.requests()[1].to_string();
    assert!(
        prompt.contains("placed"),
        "the POST's result is kept: {prompt}"
    );
    assert!(
        prompt.contains("interrupted: a newer message"),
        "the GET is answered interrupted: {prompt}"
    );
    assert_eq!(orders.placed.load(Ordering::SeqCst), 1, "made once");
    let read = message(&mut client, live).await;
    assert_eq!(read.status, pb::MessageStatus::Interrupted as i32);
}

/// What the order API was sent.
#[derive(Default)]
struct Orders {
    placed: AtomicUsize,
    shown: AtomicUsize,
}

/// An order API whose `POST /orders` takes 1.5 s and whose `GET /orders/{id}` never answers
/// in a test's time.
async fn order_service() -> (std::net::SocketAddr, Arc<Orders>) {
    let orders = Arc::new(Orders::default());
    async fn place(State(orders): State<Arc<Orders>>) -> Json<Value> {
        orders.placed.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Json(json!({"order": "placed"}))
    }
    async fn show(State(orders): State<Arc<Orders>>) -> Json<Value> {
        orders.shown.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Json(json!({"order": 7}))
    }
    let router = Router::new()
        .route("/api/orders", post(place))
        .route("/api/orders/{id}", get(show))
        .with_state(Arc::clone(&orders));
    let addr = crate::support::serve_at(router).await;
    (addr, orders)
}

on_both_buses!(across_replicas: interrupt_and_rollback_hold_across_replicas_over_nats, interrupt_and_rollback_hold_across_replicas_without_nats);

/// The live run on replica A, the INTERRUPT sent to replica B: A's run stops at once and
/// ends naming B's; B's prompt holds its partial answer. Then a ROLLBACK sent to A stops a
/// run B holds waiting for its caller, and the prompt after leaves it out. Then a run whose
/// owner was killed (kill -9) is interrupted while it has no owner: the peer that takes it
/// over ends it INTERRUPTED without calling the model again (the cut call's text void, as
/// any takeover voids it), and the new run goes on.
async fn across_replicas(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half on A"]),
        Reply::text(&["From B."], (1, 1)),
        crate::support::replicas::calls_order_lookup(),
        Reply::text(&["Rolled back."], (1, 1)),
        Reply::Stall(vec!["Dies with A"]),
        Reply::text(&["After the takeover."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;

    let (mut on_a, seen) = streaming(&mut client(&a).await, run_request("On A?", &[])).await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());
    let second = run_to_end(
        &mut client(&b).await,
        asking("On B?", &conversation, INTERRUPT),
    )
    .await;
    waits_behind(&second, &live);
    ends_interrupted_by(
        &read_within(&mut on_a, Duration::from_secs(20)).await,
        &second[0].message_id,
        "Half on A",
    );
    let prompt = &llm.requests()[1];
    assert_eq!(turns(prompt, "user"), ["On A?", "On B?"]);
    assert_eq!(turns(prompt, "assistant"), ["Half on A"]);

    let mut asking_on_b = run_request("Look it up?", &[]);
    asking_on_b.conversation_id = conversation.clone();
    asking_on_b
        .client_tools
        .push(crate::support::replicas::order_lookup());
    let mut waiting = client(&b)
        .await
        .run(asking_on_b)
        .await
        .unwrap()
        .into_inner();
    let seen = read_until(&mut waiting, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    let rolled = run_to_end(
        &mut client(&a).await,
        asking("Start over?", &conversation, ROLLBACK),
    )
    .await;
    ends_interrupted_by(
        &read_within(&mut waiting, Duration::from_secs(20)).await,
        &rolled[0].message_id,
        "",
    );
    let prompt = &llm.requests()[3];
    assert_eq!(turns(prompt, "user"), ["On A?", "On B?", "Start over?"]);
    let read = message(&mut client(&a).await, seen[0].message_id.clone()).await;
    assert!(read.rolled_back);

    let (_dying, seen) = streaming(
        &mut client(&a).await,
        enqueued("Dies with A?", &conversation),
    )
    .await;
    let orphan = seen[0].message_id.clone();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let mut after = client(&b)
        .await
        .run(asking("After A?", &conversation, INTERRUPT))
        .await
        .unwrap()
        .into_inner();
    let events = read_within(&mut after, Duration::from_secs(30)).await;
    assert_eq!(end_of(&events).answer, "After the takeover.");
    let ended = read_within(&mut attach(&b, &orphan, 0).await, Duration::from_secs(5)).await;
    // The model call its owner died in is void, as a takeover voids it: no text of it stays.
    ends_interrupted_by(&ended, &events[0].message_id, "");
    assert_eq!(llm.requests().len(), 6, "the stopped run is not made again");
}
