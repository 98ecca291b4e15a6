//! The NATS bus between replicas, tried by another client of the same NATS server: what it
//! publishes on a deployment's subjects never reaches a client, costs no read of the
//! store, and what the replicas publish there cannot be read by it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::domain::{ConversationId, EventEnvelope, MessageId, RunEvent};
use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::store::SecretKey;
use futures::StreamExt as _;

use crate::support::message;
use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::*;
use crate::support::{FakeOpenAi, Reply};

/// A relay as anyone without the deployment's key writes it: plain JSON.
fn plain_notice(message: &str, last_seq: u64, events: &[EventEnvelope]) -> Vec<u8> {
    let notice = serde_json::json!({ "message": message, "last_seq": last_seq, "events": events });
    serde_json::to_vec(&serde_json::json!({ "notices": [notice] })).unwrap()
}

/// A forged answer and end, following the real events a client has seen.
fn forged_ending(after: &pb::RunEvent) -> Vec<EventEnvelope> {
    let envelope = |seq, event| EventEnvelope {
        seq,
        conversation_id: ConversationId(after.conversation_id.parse().unwrap()),
        message_id: MessageId(after.message_id.parse().unwrap()),
        created_at: agent_runner::domain::now(),
        event,
    };
    let text = "FORGED: your balance is 0".to_owned();
    vec![
        envelope(after.seq + 1, RunEvent::AnswerDelta { text: text.clone() }),
        envelope(after.seq + 2, RunEvent::completed(&text)),
    ]
}

/// Another client of the NATS server publishes on the relay subject of a followed run's
/// owner, and of a replica that does not exist, while the run
/// waits for a client tool: a forged answer and end (plain, as an older replica writes), a
/// payload that looks sealed, one the size of a large event, and a hundred empty notices
/// naming the last `seq` possible, plus forged command wake-ups. The follower on the peer
/// hands its client none of it (the stream stays quiet while the run waits), every one is
/// counted as dropped, and the run then ends with its real answer, `seq` gap-free. A
/// listener on every subject of the deployment never reads a run's text in clear.
#[tokio::test]
async fn another_nats_client_can_neither_forge_nor_read_a_runs_events() {
    let _turn = TURN.lock().await;
    let Some(bus) = nats_bus().await else {
        return;
    };
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let Bus::Nats { url, prefix } = bus.clone() else {
        unreachable!("nats_bus gives a NATS bus")
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::text(&["The order has shipped."], (3, 4)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    // The forgeries take a while to send on a loaded machine: the run waits for its tool
    // past them.
    let plain = Options {
        bus,
        client_tool_timeout_secs: Some(30),
        ..Options::default()
    };
    let measured = Options {
        metrics: true,
        ..plain.clone()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &plain).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &measured).await;

    let intruder = async_nats::connect(url.as_str()).await.unwrap();
    let heard: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let mut everything = intruder.subscribe(format!("{prefix}.>")).await.unwrap();
    let listening = Arc::clone(&heard);
    let listener = tokio::spawn(async move {
        while let Some(payload) = everything.next().await {
            listening.lock().unwrap().push(payload.payload.to_vec());
        }
    });

    let (_stream, seen) = started_asking(&a, "Where is my order ZX-41?").await;
    let id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &id, 0).await;
    let followed = read_until(&mut on_peer, |e| {
        matches!(e.event, Some(Event::ToolCallsRequired(_)))
    })
    .await;
    assert_eq!(followed, seen);

    let last = seen.last().unwrap();
    let forged = forged_ending(last);
    let mut payloads = vec![
        plain_notice(&id, last.seq + 2, &forged),
        [
            &[1u8][..],
            &[0; 24],
            &plain_notice(&id, last.seq + 2, &forged),
        ]
        .concat(),
        plain_notice(&id, last.seq + 1, &forged[..1])
            .into_iter()
            .chain(std::iter::repeat_n(b' ', 900 * 1024))
            .collect(),
    ];
    payloads.extend((0..100).map(|_| plain_notice(&id, u64::MAX, &[])));
    let forged_count = payloads.len() * 2;
    for subject in [format!("{prefix}.relay.a"), format!("{prefix}.relay.x")] {
        for payload in &payloads {
            intruder
                .publish(subject.clone(), payload.clone().into())
                .await
                .unwrap();
        }
    }
    for owner in ["a", "b"] {
        intruder
            .publish(format!("{prefix}.commands.{owner}"), Vec::new().into())
            .await
            .unwrap();
    }
    intruder.flush().await.unwrap();

    let quiet = tokio::time::timeout(Duration::from_millis(1500), on_peer.message()).await;
    assert!(
        quiet.is_err(),
        "the peer's client heard something while the run waited: {quiet:?}"
    );

    client(&b)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .unwrap();
    let rest = read_within(&mut on_peer, Duration::from_secs(20)).await;
    let all: Vec<pb::RunEvent> = followed.into_iter().chain(rest).collect();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>(), "no gap");
    assert!(
        !format!("{all:?}").contains("FORGED"),
        "a forged event reached the client"
    );
    let Some(Event::End(end)) = &all.last().unwrap().event else {
        panic!("the run ends with its own end: {all:?}");
    };
    assert_eq!(end.answer, "The order has shipped.");
    assert_eq!(
        message(&mut client(&a).await, id.clone()).await.answer,
        "The order has shipped."
    );

    let (rejected, text) = counter(b.metrics.unwrap(), "agent_runner_bus_rejected").await;
    assert!(
        rejected >= (forged_count + 1) as f64,
        "{rejected} of {forged_count} forged notices and a wake-up counted: {text}"
    );

    listener.abort();
    let heard = heard.lock().unwrap();
    let from_replicas = heard.len() - forged_count - 2;
    assert!(
        from_replicas >= 2,
        "the replicas spoke on the bus: {}",
        heard.len()
    );
    for payload in heard.iter() {
        let text = String::from_utf8_lossy(payload);
        for secret in ["ZX-41", "has shipped"] {
            assert!(
                !text.contains(secret),
                "a replica's payload read in clear: {text}"
            );
        }
    }
}

/// Transactions the test database committed so far.
async fn committed(database: &TestDatabase) -> i64 {
    use sqlx::Connection as _;
    let mut db = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    let (count,): (i64,) = sqlx::query_as(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    count
}

/// Transactions the test database committed per second, over `span`.
async fn transactions_per_second(database: &TestDatabase, span: Duration) -> f64 {
    // The statistics are flushed about once a second: read past a flush at each end.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = committed(database).await;
    tokio::time::sleep(span).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = committed(database).await;
    (after - before) as f64 / (span + Duration::from_millis(1100)).as_secs_f64()
}

/// Waits, up to 20 s, until the database commits fewer than `rate` transactions a second:
/// the burst of reads that starting something causes is over.
async fn settled_below(database: &TestDatabase, rate: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        if transactions_per_second(database, Duration::from_secs(1)).await < rate {
            return;
        }
    }
}

/// A quiet run followed by 200 streams on a peer costs the database about what it costs
/// with none: the followers of a message share one read a second on their replica, instead
/// of each reading every second (≈ 400 transactions a second here before). The followers
/// still see the run go on, and end, when it does.
#[tokio::test]
async fn quiet_followers_on_a_peer_share_one_read_of_the_database() {
    const FOLLOWERS: usize = 200;
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        calls_order_lookup(),
        Reply::text(&["The order has shipped."], (3, 4)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let patient = Options {
        client_tool_timeout_secs: Some(60),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &patient).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &patient).await;
    let (_stream, seen) = started_asking(&a, "Where is my order?").await;
    let id = seen[0].message_id.clone();

    let quiet = transactions_per_second(&database, Duration::from_secs(3)).await;
    let peer = crate::support::process::channel(&b).await;
    let mut streams = Vec::new();
    for _ in 0..FOLLOWERS {
        let mut attach = pb::agent_service_client::AgentServiceClient::new(peer.clone());
        let stream = attach
            .attach(pb::AttachRequest {
                message_id: id.clone(),
                after_seq: seen.len() as u64,
            })
            .await
            .unwrap()
            .into_inner();
        streams.push(stream);
    }
    // Each follower reads the message and its events once as it attaches; on a loaded
    // machine those reads run on past the attach calls. They are not what is measured.
    settled_below(&database, quiet + 25.0).await;
    let followed = transactions_per_second(&database, Duration::from_secs(3)).await;
    assert!(
        followed - quiet < 25.0,
        "{FOLLOWERS} quiet followers took {followed:.0} transactions/s against {quiet:.0} without"
    );

    client(&a)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .unwrap();
    for mut stream in streams {
        let rest = read_within(&mut stream, Duration::from_secs(20)).await;
        assert!(
            matches!(
                rest.last().and_then(|e| e.event.as_ref()),
                Some(Event::End(_))
            ),
            "{rest:?}"
        );
    }
}

/// 100 followers on a peer of a run that streams, on the database's notifications (which
/// carry no events): past each follower's first reads, each commit is read once on the peer
/// for all of them, instead of once by each (≈ 100 reads a commit before). Every follower
/// still gets every event, in order.
#[tokio::test]
async fn followers_on_a_peer_share_one_read_per_commit() {
    const FOLLOWERS: usize = 100;
    const PIECES: usize = 30;
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![calls_order_lookup(), slow(PIECES, 60)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let patient = Options {
        client_tool_timeout_secs: Some(60),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &patient).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &patient).await;
    let (_stream, seen) = started_asking(&a, "Where is my order?").await;
    let id = seen[0].message_id.clone();
    let peer = crate::support::process::channel(&b).await;
    // The statistics are flushed about once a second: read past a flush at each end.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = committed(&database).await;
    // Attached just before the answer streams, so no quiet second passes first.
    let mut streams = Vec::new();
    for _ in 0..FOLLOWERS {
        let mut attach = pb::agent_service_client::AgentServiceClient::new(peer.clone());
        let request = pb::AttachRequest {
            message_id: id.clone(),
            after_seq: seen.len() as u64,
        };
        streams.push(attach.attach(request).await.unwrap().into_inner());
    }
    client(&a)
        .await
        .submit_tool_outputs(shipped(&id, "cli"))
        .await
        .unwrap();
    let mut carried = Vec::new();
    for mut stream in streams {
        let rest = read_within(&mut stream, Duration::from_secs(30)).await;
        carried.push(rest.iter().map(|e| e.seq).collect::<Vec<_>>());
    }
    // The statistics are flushed about once a second: read past a flush.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let spent = committed(&database).await - before;
    let first = seen.len() as u64 + 1;
    let last = *carried[0].last().unwrap();
    assert!(
        last >= first + PIECES as u64 / 2,
        "the answer streamed in pieces: {carried:?}"
    );
    for seqs in &carried {
        assert_eq!(
            *seqs,
            (first..=last).collect::<Vec<_>>(),
            "every event, in order"
        );
    }
    let commits = last - first + 1;
    println!("{FOLLOWERS} followers, {commits} events: {spent} transactions");
    // Each follower's own first reads, then the run's commits and one read of each.
    assert!(
        spent < 3 * FOLLOWERS as i64 + 6 * commits as i64 + 40,
        "{FOLLOWERS} followers of {commits} events took {spent} transactions"
    );
}
