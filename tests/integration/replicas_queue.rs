//! Queued runs (ENQUEUE) across replicas on one PostgreSQL database: the queue is the
//! store's, so runs sent to different replicas at once line up in one order, a queued run
//! starts soon after the run ahead ends wherever that ran, and a queued run outlives the
//! replicas that held it (killed, paused or stopping) or the run ahead of it. The tests
//! take turns with the other replica tests ([`TURN`]).

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::store::SecretKey;

use crate::support::conversation::{enqueued, turns};
use crate::support::postgres::TestDatabase;
use crate::support::process::{client, Service};
use crate::support::replicas::*;
use crate::support::{end_of, message, run_request, run_to_end, FakeOpenAi, Reply};

/// A run `service` starts: its stream and first event.
async fn opened(
    service: &Service,
    request: pb::RunRequest,
) -> (tonic::Streaming<pb::RunEvent>, pb::RunEvent) {
    let mut stream = client(service)
        .await
        .run(request)
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().expect("a first event");
    (stream, first)
}

/// Every event left on `stream`, each with when it arrived.
async fn timed_rest(stream: &mut tonic::Streaming<pb::RunEvent>) -> Vec<(pb::RunEvent, Instant)> {
    let mut events = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), stream.message()).await;
        match next.expect("the run goes on in time").unwrap() {
            Some(event) => events.push((event, Instant::now())),
            None => return events,
        }
    }
}

/// Every event left on `stream`.
async fn rest(stream: &mut tonic::Streaming<pb::RunEvent>) -> Vec<pb::RunEvent> {
    timed_rest(stream)
        .await
        .into_iter()
        .map(|(e, _)| e)
        .collect()
}

/// A first run on `a` and a second in its conversation sent to `b`, which queues it: both
/// streams (to keep open) and the queued run's first event.
async fn queued_on_b_behind_a(
    a: &Service,
    b: &Service,
) -> (
    tonic::Streaming<pb::RunEvent>,
    tonic::Streaming<pb::RunEvent>,
    pb::RunEvent,
) {
    let (first_stream, seen) = started(a, "First?").await;
    let conversation = seen[0].conversation_id.clone();
    let (held_by_b, queued) = opened(b, enqueued("Second?", &conversation)).await;
    assert!(matches!(queued.event, Some(Event::Queued(_))), "{queued:?}");
    (first_stream, held_by_b, queued)
}

on_both_buses!(lined_up: enqueued_runs_on_two_replicas_line_up_over_nats, enqueued_runs_on_two_replicas_line_up_without_nats);

/// Two ENQUEUE runs sent to two replicas at the same moment: one runs, the other is
/// queued behind it (whichever replica holds which), starts within a second of its end,
/// and its prompt holds the first run's question and answer.
async fn lined_up(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::text(&["Paris."], (1, 1))]).await;
    llm.repeat(slow(4, 150));
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
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

    let ((on_a, first_a), (on_b, first_b)) = tokio::join!(
        opened(&a, enqueued("From A?", &conversation)),
        opened(&b, enqueued("From B?", &conversation)),
    );
    let a_waits = matches!(first_a.event, Some(Event::Queued(_)));
    let b_waits = matches!(first_b.event, Some(Event::Queued(_)));
    assert!(
        a_waits != b_waits,
        "exactly one waits: {first_a:?} {first_b:?}"
    );
    let ((mut ahead, ahead_first, ahead_query), (mut behind, behind_first, behind_query)) =
        if a_waits {
            ((on_b, first_b, "From B?"), (on_a, first_a, "From A?"))
        } else {
            ((on_a, first_a, "From A?"), (on_b, first_b, "From B?"))
        };
    let Some(Event::Queued(queued)) = &behind_first.event else {
        unreachable!()
    };
    assert_eq!(queued.ahead, 1);
    assert_eq!(
        queued.message_id, ahead_first.message_id,
        "it names the run ahead"
    );

    let (ahead_rest, behind_rest) = tokio::join!(timed_rest(&mut ahead), timed_rest(&mut behind));
    let (_, ahead_ended) = ahead_rest.last().expect("the first run ends");
    let (_, started) = behind_rest
        .iter()
        .find(|(event, _)| matches!(event.event, Some(Event::Started(_))))
        .expect("the queued run starts");
    let after = started.saturating_duration_since(*ahead_ended);
    assert!(
        after < Duration::from_secs(1),
        "started {after:?} after the end"
    );
    let events: Vec<pb::RunEvent> = behind_rest.into_iter().map(|(e, _)| e).collect();
    assert_eq!(end_of(&events).answer, "tick tick tick tick ");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        turns(&requests[2], "user"),
        ["Capital of France?", ahead_query, behind_query],
    );
    assert_eq!(database.count("messages WHERE running").await, 0);
}

/// `kill -9` of the replica running the first run and of the replica holding a queued run
/// behind it: the survivor takes the first run over and finishes it, adopts the queued run
/// and starts it after that, then the run queued behind it; each prompt holds every
/// earlier question, in arrival order, and no run is left live.
#[tokio::test]
async fn queued_runs_outlive_the_replicas_that_held_them() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Some(bus) = nats_bus().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Half an "]),
        Reply::text(&["First, whole."], (1, 1)),
        Reply::text(&["Second."], (1, 1)),
        Reply::text(&["Third."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus,
        ..Options::default()
    };
    let mut a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let mut b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let c = replica_on(dir.path(), &llm, &database, &key, "c", &options).await;
    let (_first_stream, seen) = started(&a, "First?").await;
    let (first, conversation) = (seen[0].message_id.clone(), seen[0].conversation_id.clone());
    let (_held_by_b, second) = opened(&b, enqueued("Second?", &conversation)).await;
    let (mut on_c, third) = opened(&c, enqueued("Third?", &conversation)).await;
    assert!(matches!(second.event, Some(Event::Queued(_))), "{second:?}");
    assert!(matches!(third.event, Some(Event::Queued(_))), "{third:?}");

    for replica in [&mut a, &mut b] {
        replica.child.kill().unwrap();
        replica.child.wait().unwrap();
    }
    let mut second_on_c = attach(&c, &second.message_id, 0).await;
    let mut first_on_c = attach(&c, &first, 0).await;
    let first_events = rest(&mut first_on_c).await;
    assert_eq!(end_of(&first_events).answer, "First, whole.");
    let second_events: Vec<pb::RunEvent> = rest(&mut second_on_c).await;
    assert!(matches!(second_events[0].event, Some(Event::Queued(_))));
    assert_eq!(end_of(&second_events).answer, "Second.");
    let seqs: Vec<u64> = second_events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    let third_events: Vec<pb::RunEvent> = rest(&mut on_c).await;
    assert_eq!(end_of(&third_events).answer, "Third.");

    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        4,
        "the cut call made again once, each queued run once"
    );
    assert_eq!(turns(&requests[2], "user"), ["First?", "Second?"]);
    assert_eq!(turns(&requests[3], "user"), ["First?", "Second?", "Third?"]);
    let read = message(&mut client(&c).await, second.message_id.clone()).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
    assert_eq!(database.count("messages WHERE running").await, 0);
}

/// SIGTERM of the replica holding a queued run hands it over: a peer goes on waiting with
/// it and starts it once the run ahead ends.
#[tokio::test]
async fn a_stopping_replica_hands_its_queued_run_over() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        slow(10, 200),
        Reply::text(&["Handed over, then run."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let a = replica(dir.path(), &llm, &database, &key, "a").await;
    let mut b = replica(dir.path(), &llm, &database, &key, "b").await;
    let (_first_stream, _held_by_b, queued) = queued_on_b_behind_a(&a, &b).await;
    signal(&b, "TERM");
    let exited =
        crate::support::process::wait_for_exit(&mut b.child, Duration::from_secs(10)).await;
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
    let mut on_a = attach(&a, &queued.message_id, 0).await;
    let events: Vec<pb::RunEvent> = rest(&mut on_a).await;
    assert_eq!(end_of(&events).answer, "Handed over, then run.");
    assert_eq!(turns(&llm.requests()[1], "user"), ["First?", "Second?"]);
}

/// A paused replica (SIGSTOP) holding a queued run loses it to a peer, which adopts it and
/// starts it once the run ahead ends; woken (SIGCONT), the paused one adds not one event to
/// it, and the run has one end, made by one model call.
#[tokio::test]
async fn a_queued_run_on_a_paused_replica_is_adopted_and_run_once() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        slow(30, 200),
        Reply::text(&["Adopted, then run."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let (_first_stream, _held_by_b, queued) = queued_on_b_behind_a(&a, &b).await;
    signal(&b, "STOP");
    let mut on_a = attach(&a, &queued.message_id, 0).await;
    let events: Vec<pb::RunEvent> = rest(&mut on_a).await;
    assert_eq!(end_of(&events).answer, "Adopted, then run.");
    let stored = database.events_stored().await;

    signal(&b, "CONT");
    // Time for the woken replica to try whatever it was about to write.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(database.events_stored().await, stored, "not one event more");
    let replay = read_within(
        &mut attach(&a, &queued.message_id, 0).await,
        Duration::from_secs(5),
    )
    .await;
    let ends = replay
        .iter()
        .filter(|e| matches!(e.event, Some(Event::End(_) | Event::Error(_))))
        .count();
    assert_eq!(ends, 1, "one end: {replay:?}");
    let requests = llm.requests();
    let asked: Vec<Vec<String>> = requests.iter().map(|r| turns(r, "user")).collect();
    assert_eq!(
        requests.len(),
        2,
        "the queued run's model called once: {asked:?}"
    );
    assert_eq!(turns(&requests[1], "user"), ["First?", "Second?"]);
    let read = message(&mut client(&a).await, queued.message_id.clone()).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
    assert_eq!(database.count("messages WHERE running").await, 0);
}

on_both_buses!(a_hundred_across_replicas: a_hundred_queued_runs_on_two_replicas_run_in_order_across_a_kill_over_nats, a_hundred_queued_runs_on_two_replicas_run_in_order_across_a_kill_without_nats);

/// 100 ENQUEUE runs sent at once by 10 clients, half to each of two replicas, into one
/// conversation, across a `kill -9` of the replica running one of them: the other adopts
/// the run it held (taken over) and the runs queued on it, and none is lost; they ran one
/// at a time in the order the store placed them, each prompt holding every earlier question
/// and answer.
async fn a_hundred_across_replicas(bus: &Bus) {
    use crate::support::hundred::{
        all_completed, answer_each_query, answered, queue_a_hundred, ran_one_at_a_time_in_order,
        send_a_hundred,
    };
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(Vec::new()).await;
    answer_each_query(&llm);
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        edit: Some(queue_a_hundred),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let opening = run_to_end(&mut client(&a).await, run_request("Q0", &[])).await;
    let conversation = opening[0].conversation_id.clone();
    send_a_hundred(&[a.addr, b.addr], &conversation).await;
    answered(&llm, 30).await;
    // Sender `s` went to `[a, b][s % 2]`: the replica that accepted the running run runs it.
    let running = running_query(&mut client(&a).await, &conversation).await;
    let sender: usize = running[1..2].parse().expect("a sender's digit");
    let (mut doomed, survivor) = match sender % 2 {
        0 => (a, b),
        _ => (b, a),
    };
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    assert!(
        llm.requests().len() < 80,
        "runs were still queued at the kill"
    );

    let messages = all_completed(&mut client(&survivor).await, &conversation).await;
    ran_one_at_a_time_in_order(&messages, &llm);
}

/// The query of the conversation's running run, once one runs.
async fn running_query(client: &mut crate::support::Agents, conversation: &str) -> String {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let messages = crate::support::hundred::messages_of(client, conversation).await;
            let running = pb::MessageStatus::Running as i32;
            if let Some(run) = messages.iter().find(|m| m.status == running) {
                return run.query.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("a run is running")
}
