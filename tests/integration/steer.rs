//! A run that arrives with STEER joins the live run of its conversation: its text becomes a
//! user turn of that run before its next model call, and no second message is left. The
//! steering stream answers `steered` naming the live run, then follows it. Should the live
//! run make no further model call, the text runs on its own (as ENQUEUE would): it is never
//! dropped, also when the live run's replica dies. With no live run, the steer is a run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::store::SecretKey;
use axum::routing::get;
use axum::{extract::State, Json, Router};
use serde_json::{json, Value};

use crate::support::conversation::{asking, enqueued, turns};
use crate::support::orders::orders_provider;
use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::{
    calls_order_lookup, nats_bus, on_both_buses, order_lookup, read_until, read_within, replica_on,
    within, Bus, Options, TURN,
};
use crate::support::{
    end_of, message, read_rest, run_request, run_to_end, start, thoughts, Agents, FakeOpenAi,
    Reply, ScriptedCall,
};

const STEER: pb::ConversationPolicy = pb::ConversationPolicy::Steer;
const OSAKA: &str = "Ship it to Osaka instead.";

/// The steering stream's first event: `steered`, naming `live`; returns the steer's id.
fn steered_into(event: &pb::RunEvent, live: &str) -> String {
    match &event.event {
        Some(Event::Steered(steered)) => {
            assert_eq!(steered.message_id, live, "it names the live run");
            assert_eq!(event.message_id, steered.steer_message_id);
            steered.steer_message_id.clone()
        }
        other => panic!("a steer answers `steered` first: {other:?}"),
    }
}

/// Sends `text` into `conversation` with STEER and reads its first event, `steered` naming
/// `live`; returns its stream and the steer's id.
async fn steer_into(
    client: &mut Agents,
    text: &str,
    conversation: &str,
    live: &str,
) -> (tonic::Streaming<pb::RunEvent>, String) {
    let mut stream = client
        .run(asking(text, conversation, STEER))
        .await
        .unwrap()
        .into_inner();
    let opening = stream.message().await.unwrap().expect("an event");
    let steer = steered_into(&opening, live);
    (stream, steer)
}

/// The `user_turn` events of `events`, as (position, steer, text).
fn user_turns(events: &[pb::RunEvent]) -> Vec<(u32, String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::UserTurn(turn)) => Some((
                turn.position,
                turn.steer_message_id.clone(),
                turn.text.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// The roles of the messages the model was sent in `request`, in order.
fn roles(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The caller's tool result for the `lookup_order` call.
fn looked_up() -> pb::ToolOutput {
    pb::ToolOutput {
        tool_call_id: "cli".into(),
        output: "in transit".into(),
        error: String::new(),
        message_id: String::new(),
    }
}

/// Starts a run that calls the caller's `lookup_order` and reads up to its wait.
async fn waiting_for_lookup(
    client: &mut Agents,
) -> (tonic::Streaming<pb::RunEvent>, String, String) {
    let mut request = run_request("Where is my order?", &[]);
    request.client_tools.push(order_lookup());
    let mut stream = client.run(request).await.unwrap().into_inner();
    let seen = read_until(&mut stream, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());
    (stream, live, conversation)
}

/// Answers the live run's `lookup_order` call.
async fn answer_lookup(client: &mut Agents, live: &str) {
    client
        .submit_tool_outputs(pb::SubmitToolOutputsRequest {
            message_id: live.to_owned(),
            outputs: vec![looked_up()],
        })
        .await
        .unwrap();
}

/// The conversation's messages, by id.
async fn listed(client: &mut Agents, conversation: &str) -> Vec<String> {
    client
        .list_messages(pb::ListMessagesRequest {
            conversation_id: conversation.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .messages
        .into_iter()
        .map(|m| m.id)
        .collect()
}

/// A steer sent while the live run's tool runs (its caller's own, here) joins the run's next
/// model call, after the tool's result, as the user's; the steering stream follows the
/// live run to its end; no second message exists (the steer's id reads NOT_FOUND) and the
/// round's thought records the text. A later run's prompt replays it in the same place.
#[tokio::test]
async fn a_steer_sent_while_a_tool_runs_joins_the_next_model_call() {
    let (llm, _server, mut client) = start(vec![
        calls_order_lookup(),
        Reply::text(&["Shipping to Osaka."], (1, 1)),
        Reply::text(&["You are welcome."], (1, 1)),
    ])
    .await;
    let (mut first, live, conversation) = waiting_for_lookup(&mut client).await;
    let (mut steering, steer) = steer_into(&mut client, OSAKA, &conversation, &live).await;
    answer_lookup(&mut client, &live).await;
    let followed = read_within(&mut steering, Duration::from_secs(20)).await;
    assert!(
        followed.iter().all(|e| e.message_id == live),
        "the steering stream follows the live run: {followed:?}"
    );
    assert_eq!(
        user_turns(&followed),
        [(2, steer.clone(), OSAKA.to_owned())]
    );
    assert_eq!(end_of(&followed).answer, "Shipping to Osaka.");
    assert_eq!(
        end_of(&read_rest(&mut first).await).answer,
        "Shipping to Osaka."
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "one run, two model calls");
    assert_eq!(turns(&requests[1], "user"), ["Where is my order?", OSAKA]);
    assert_eq!(
        roles(&requests[1])[1..],
        ["user", "assistant", "tool", "user"],
        "the text comes after the tool's result"
    );
    assert_eq!(
        listed(&mut client, &conversation).await,
        std::slice::from_ref(&live)
    );
    let gone = client
        .get_message(pb::GetMessageRequest {
            message_id: steer.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound, "no second message");
    let recorded = thoughts(&mut client, live.clone()).await;
    assert_eq!(recorded[1].steered.len(), 1);
    assert_eq!(
        (
            recorded[1].steered[0].message_id.as_str(),
            recorded[1].steered[0].text.as_str()
        ),
        (steer.as_str(), OSAKA)
    );

    run_to_end(&mut client, enqueued("Thanks!", &conversation)).await;
    let later = &llm.requests()[2];
    assert_eq!(
        turns(later, "user"),
        ["Where is my order?", OSAKA, "Thanks!"]
    );
    assert_eq!(
        roles(later)[1..],
        ["user", "assistant", "tool", "user", "assistant", "user"]
    );
}

/// A steer the live run does not take (its model call in flight answers without tools, so
/// it makes no further call) runs on its own once that run ends, as an enqueued run: the
/// steering stream goes on with it, and its prompt holds the first run's question and answer
/// and then its own text. With no live run at all, a steer is a run like any other.
#[tokio::test]
async fn a_steer_the_live_run_does_not_take_runs_on_its_own() {
    let (llm, _server, mut client) = start(vec![
        crate::support::conversation::slow_answer(),
        Reply::text(&["Osaka it is."], (1, 1)),
        Reply::text(&["Alone."], (1, 1)),
    ])
    .await;
    let (mut first, seen) = crate::support::conversation::streaming(
        &mut client,
        run_request("Where is my order?", &[]),
    )
    .await;
    let (live, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());
    let (mut steering, steer) = steer_into(&mut client, OSAKA, &conversation, &live).await;
    let events = read_within(&mut steering, Duration::from_secs(20)).await;
    let (joined, own): (Vec<_>, Vec<_>) = events.iter().partition(|e| e.message_id == live);
    assert!(user_turns(&events).is_empty(), "the live run took nothing");
    assert!(joined
        .last()
        .is_some_and(|e| matches!(e.event, Some(Event::End(_)))));
    assert!(own.iter().all(|e| e.message_id == steer));
    let own: Vec<pb::RunEvent> = own.into_iter().cloned().collect();
    assert_eq!(end_of(&own).answer, "Osaka it is.");
    read_rest(&mut first).await;
    let prompt = &llm.requests()[1];
    assert_eq!(turns(prompt, "user"), ["Where is my order?", OSAKA]);
    assert_eq!(turns(prompt, "assistant"), ["slow answer still going"]);
    assert_eq!(listed(&mut client, &conversation).await, [live, steer]);

    let alone = run_to_end(&mut client, asking("Nobody here?", "", STEER)).await;
    assert!(
        matches!(alone[0].event, Some(Event::Started(_))),
        "{alone:?}"
    );
    assert_eq!(end_of(&alone).answer, "Alone.");
}

on_both_buses!(across_replicas: a_steer_reaches_a_run_on_another_replica_over_nats, a_steer_reaches_a_run_on_another_replica_without_nats);

/// On two replicas sharing PostgreSQL: a steer sent to B joins the run A holds (told through
/// the bus, or the store's own notifications). Then a steer sent to B for a run A holds
/// waiting for its caller, when A is killed (kill -9) before the run goes on: the sweep ends
/// that run, and the steer, never taken, runs on its own on B with the whole history.
async fn across_replicas(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::text(&["Shipping to Osaka."], (1, 1)),
        calls_order_lookup(),
        Reply::text(&["Osaka, on its own."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    // The live run must still wait for its caller when the steer reaches B: under a loaded
    // machine, the tests' 2 s for a client tool ended it first, and the steer ran alone.
    let options = Options {
        bus: bus.clone(),
        client_tool_timeout_secs: Some(10),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;

    let (_on_a, live, conversation) = waiting_for_lookup(&mut client(&a).await).await;
    let (mut steering, steer) =
        steer_into(&mut client(&b).await, OSAKA, &conversation, &live).await;
    answer_lookup(&mut client(&b).await, &live).await;
    let followed = read_within(&mut steering, Duration::from_secs(20)).await;
    assert_eq!(user_turns(&followed), [(2, steer, OSAKA.to_owned())]);
    assert_eq!(end_of(&followed).answer, "Shipping to Osaka.");
    assert_eq!(
        turns(&llm.requests()[1], "user"),
        ["Where is my order?", OSAKA]
    );

    let mut asking_on_a = run_request("And the second order?", &[]);
    asking_on_a.conversation_id = conversation.clone();
    asking_on_a.client_tools.push(order_lookup());
    let mut waiting = client(&a)
        .await
        .run(asking_on_a)
        .await
        .unwrap()
        .into_inner();
    let seen = read_until(&mut waiting, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    let orphan = seen[0].message_id.clone();
    let (mut steering, steer) =
        steer_into(&mut client(&b).await, "Osaka too.", &conversation, &orphan).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let events = read_within(&mut steering, Duration::from_secs(40)).await;
    let own: Vec<pb::RunEvent> = events
        .into_iter()
        .filter(|e| e.message_id == steer)
        .collect();
    assert_eq!(end_of(&own).answer, "Osaka, on its own.", "never dropped");
    let prompt = &llm.requests()[3];
    // The run the sweep ended had neither an answer nor a tool result: no turn of history.
    assert_eq!(
        turns(prompt, "user"),
        ["Where is my order?", OSAKA, "Osaka too."]
    );
    let ended = message(&mut client(&b).await, orphan).await;
    // Its caller never answered: it ended (failed) without a further model call.
    assert_eq!(ended.status, pb::MessageStatus::Failed as i32);
    assert_eq!(llm.requests().len(), 4);
}

/// How often the slow order lookup was made.
#[derive(Default)]
struct Lookups(AtomicUsize);

/// An order API whose `GET /orders/{id}` takes 3 s.
async fn slow_orders() -> (std::net::SocketAddr, Arc<Lookups>) {
    let lookups = Arc::new(Lookups::default());
    async fn show(State(lookups): State<Arc<Lookups>>) -> Json<Value> {
        lookups.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
        Json(json!({"order": 7, "status": "in transit"}))
    }
    let router = Router::new()
        .route("/api/orders/{id}", get(show))
        .with_state(Arc::clone(&lookups));
    let addr = crate::support::serve_at(router).await;
    (addr, lookups)
}

/// A steer that reached the run A holds while its tool runs, when A is killed (kill -9)
/// before the next model call: B takes the run over, makes the (idempotent) call again, and
/// its next model call holds the text exactly once; the run records one user turn, and the
/// steer leaves no message.
#[tokio::test]
async fn a_steer_survives_the_takeover_of_the_run_it_joins() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let (addr, lookups) = slow_orders().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new("o1", "showOrder", &["{\"id\": 7}"])],
            (3, 2),
        ),
        Reply::text(&["Rerouted to Osaka."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options::default();
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    agent_runner::pb::tool_registry_client::ToolRegistryClient::new(
        crate::support::process::channel(&a).await,
    )
    .create_provider(pb::CreateProviderRequest {
        provider: Some(orders_provider(addr)),
    })
    .await
    .unwrap();
    let request = run_request("Where is order 7?", &[("orders", "showOrder")]);
    let mut on_a = client(&a).await.run(request).await.unwrap().into_inner();
    let opened = on_a.message().await.unwrap().unwrap();
    let (live, conversation) = (opened.message_id.clone(), opened.conversation_id.clone());
    within("the lookup goes out", || async {
        lookups.0.load(Ordering::SeqCst) == 1
    })
    .await;
    let (mut steering, steer) =
        steer_into(&mut client(&b).await, OSAKA, &conversation, &live).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let followed = read_within(&mut steering, Duration::from_secs(40)).await;
    assert_eq!(end_of(&followed).answer, "Rerouted to Osaka.");
    assert_eq!(
        lookups.0.load(Ordering::SeqCst),
        2,
        "the lookup is made again"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(turns(&requests[1], "user"), ["Where is order 7?", OSAKA]);
    let recorded = thoughts(&mut client(&b).await, live.clone()).await;
    let steered: Vec<&str> = recorded
        .iter()
        .flat_map(|t| t.steered.iter().map(|s| s.message_id.as_str()))
        .collect();
    let rounds: Vec<(u32, usize)> = recorded
        .iter()
        .map(|t| (t.position, t.steered.len()))
        .collect();
    assert_eq!(steered, [steer.as_str()], "one user turn: {rounds:?}");
    assert_eq!(listed(&mut client(&b).await, &conversation).await, [live]);
}

/// A steer sent to A for the run A holds waiting for its caller, then SIGTERM of A: A hands
/// the run and the steer over; the caller's outputs sent to B finish the run there, its
/// next model call holding the text exactly once, and the steer leaves no message (B
/// adopted it with the run and found it taken).
#[tokio::test]
async fn a_steer_is_handed_over_with_the_run_it_joins() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::text(&["Shipping to Osaka."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    // The run must still be waiting when B has taken it and the outputs arrive.
    let patient = Options {
        client_tool_timeout_secs: Some(10),
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &patient).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &patient).await;
    // B judges its peers gone only once it has held its own lease for a whole lease.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_on_a, live, conversation) = waiting_for_lookup(&mut client(&a).await).await;
    let (_steering, _) = steer_into(&mut client(&a).await, OSAKA, &conversation, &live).await;
    let mut on_b = crate::support::replicas::attach(&b, &live, 0).await;

    crate::support::replicas::signal(&a, "TERM");
    let exited =
        crate::support::process::wait_for_exit(&mut a.child, Duration::from_secs(10)).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    read_until(
        &mut on_b,
        |e| matches!(&e.event, Some(Event::RoundRestarted(r)) if r.reason == "handed_over"),
    )
    .await;
    answer_lookup(&mut client(&b).await, &live).await;
    let rest = read_within(&mut on_b, Duration::from_secs(20)).await;
    assert_eq!(end_of(&rest).answer, "Shipping to Osaka.");
    assert_eq!(user_turns(&rest).len(), 1, "{rest:?}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(turns(&requests[1], "user"), ["Where is my order?", OSAKA]);
    let mut b_client = client(&b).await;
    within("the steer leaves no message", || {
        let (mut b_client, conversation) = (b_client.clone(), conversation.clone());
        async move { listed(&mut b_client, &conversation).await.len() == 1 }
    })
    .await;
    assert_eq!(listed(&mut b_client, &conversation).await, [live]);
}
