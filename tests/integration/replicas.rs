//! Several replica processes on one PostgreSQL database: a run is followed from any of
//! them (over NATS, over the database's notifications, and with NATS stopped mid-run), a
//! dead or paused replica's runs go on on its peers (and the paused one, woken, adds
//! nothing), a restart leaves its peers' runs alone, and two live processes never share a
//! replica id. The tests take turns ([`TURN`]): each starts several processes on two cores.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::store::SecretKey;

use crate::support::postgres::{on_postgres, TestDatabase};
use crate::support::process::{agent_runner, client};
use crate::support::replicas::*;
use crate::support::{config_toml, message};
use crate::support::{FakeOpenAi, Reply};

on_both_buses!(followed_identically: a_run_is_followed_identically_from_another_replica_over_nats, a_run_is_followed_identically_from_another_replica_without_nats);

/// Runs at once on one replica, each attached on a second from `seq` 0 and on a third from
/// the middle of its stream, give the same events, byte for byte, with no gap; the peers
/// read the finished messages too.
async fn followed_identically(bus: &Bus) {
    const RUNS: usize = 24;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![slow(30, 40); RUNS]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let plain = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let measured = Options {
        metrics: true,
        ..plain.clone()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &plain).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &measured).await;
    let c = replica_on(dir.path(), &llm, &database, &key, "c", &plain).await;

    let followed = (0..RUNS).map(|_| async {
        let (mut stream, mut seen) = started(&a, "count").await;
        let id = seen[0].message_id.clone();
        let middle = seen.last().unwrap().seq;
        let mut from_start = attach(&b, &id, 0).await;
        let mut from_middle = attach(&c, &id, middle).await;
        seen.extend(read_within(&mut stream, Duration::from_secs(30)).await);
        let whole = read_within(&mut from_start, Duration::from_secs(30)).await;
        let rest = read_within(&mut from_middle, Duration::from_secs(30)).await;
        (id, middle, seen, whole, rest)
    });
    for (id, middle, seen, whole, rest) in futures::future::join_all(followed).await {
        assert_eq!(whole, seen, "from seq 0 on a peer: every event, in order");
        let after: Vec<_> = seen.iter().filter(|e| e.seq > middle).cloned().collect();
        assert_eq!(rest, after, "from the middle on another peer: the rest");
        let seqs: Vec<u64> = whole.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
        let read = message(&mut client(&c).await, id).await;
        assert_eq!(read.status, pb::MessageStatus::Completed as i32);
        assert_eq!(read.answer, "tick ".repeat(30));
    }

    // Over NATS the peer's followers were handed the events by notices, not reads.
    let (relayed, text) = counter(b.metrics.unwrap(), "agent_runner_relayed_events").await;
    match bus {
        Bus::Nats { .. } => assert!(relayed >= 20.0 * 24.0, "relayed {relayed}: {text}"),
        Bus::Database => assert_eq!(relayed, 0.0, "notifications carry no events"),
    }
}

/// A replica killed mid-answer: once its lease lapses, a peer takes its run over and goes
/// on with it, so a client attached on the peer sees every event it had seen, then
/// `round_restarted` voiding the cut text, the round made again and the run's end, `seq`
/// gap-free; a replica that restarts leaves its peer's running run alone. Every log line
/// names its replica.
#[tokio::test]
async fn a_dead_replicas_run_goes_on_on_its_peer_and_a_restart_leaves_peers_alone() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Almost"]),
        slow(40, 50),
        Reply::calls(&["Taken ", "over"], Vec::new(), (4, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;

    let (_doomed, seen) = started(&a, "stall").await;
    let doomed_id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &doomed_id, 0).await;
    let (mut surviving, surviving_seen) = started(&b, "count").await;

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    let mut followed = Vec::new();
    while followed.len() <= seen.len() {
        let next = tokio::time::timeout(Duration::from_secs(15), on_peer.message()).await;
        followed.push(next.expect("the peer goes on in time").unwrap().unwrap());
    }
    let lapse = killed.elapsed();
    followed.extend(read_within(&mut on_peer, Duration::from_secs(15)).await);
    assert_eq!(&followed[..seen.len()], &seen[..], "every announced event");
    let void = seen.last().unwrap();
    match &followed[seen.len()].event {
        Some(pb::run_event::Event::RoundRestarted(restarted)) => {
            assert_eq!(
                (restarted.position, restarted.discard_from_seq),
                (1, void.seq)
            );
        }
        other => panic!("the new owner's first event: {other:?}"),
    }
    assert!(
        lapse < Duration::from_secs(6),
        "the peer went on {lapse:?} after the kill"
    );
    let seqs: Vec<u64> = followed.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=followed.len() as u64).collect::<Vec<_>>());
    let Some(pb::run_event::Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(
        end.answer, "Taken over",
        "the void text is not in the answer"
    );
    let read = message(&mut client(&b).await, doomed_id).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
    assert_eq!(read.answer, "Taken over");

    // A restart of the dead replica, under its id, touches only what was its own.
    let _a = replica(dir.path(), &llm, &database, &key, "a").await;
    let rest = read_within(&mut surviving, Duration::from_secs(20)).await;
    let surviving_end = rest.last().unwrap();
    assert!(
        matches!(surviving_end.event, Some(pb::run_event::Event::End(_))),
        "the peer's run completes: {surviving_end:?}"
    );
    let read = message(&mut client(&b).await, surviving_seen[0].message_id.clone()).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);

    // Each replica's log lines name it, so a fleet's logs read apart.
    for (service, id) in [(&a, "a"), (&b, "b")] {
        let log = service.log_text();
        assert!(log.lines().count() > 1, "{log}");
        for line in log.lines() {
            assert!(line.starts_with(&format!("replica={id} ")), "{line}");
        }
    }
}

/// A paused replica (SIGSTOP) loses its run to a peer, which goes on with it; woken
/// (SIGCONT), the paused one adds not one event or record to it, and the run has one
/// terminal event, as `GetMessage` says.
#[tokio::test]
async fn a_paused_replica_woken_after_its_run_was_taken_writes_nothing() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        slow(200, 30),
        Reply::calls(&["Done elsewhere"], Vec::new(), (4, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;

    let (_stream, seen) = started(&a, "count").await;
    let id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &id, 0).await;
    signal(&a, "STOP");
    let followed = read_within(&mut on_peer, Duration::from_secs(15)).await;
    assert!(
        followed
            .iter()
            .any(|e| matches!(e.event, Some(pb::run_event::Event::RoundRestarted(_)))),
        "{followed:?}"
    );
    assert!(matches!(
        followed.last().unwrap().event,
        Some(pb::run_event::Event::End(_))
    ));
    let events = database.events_stored().await;

    signal(&a, "CONT");
    // The woken replica's model stream goes on for seconds; give it time to try.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(database.events_stored().await, events, "not one event more");
    let replay = read_within(&mut attach(&b, &id, 0).await, Duration::from_secs(5)).await;
    assert_eq!(replay, followed, "the record is as the peer ended it");
    let terminal = replay.iter().filter(|e| {
        matches!(
            e.event,
            Some(pb::run_event::Event::End(_) | pb::run_event::Event::Error(_))
        )
    });
    assert_eq!(terminal.count(), 1);
    let read = message(&mut client(&b).await, id).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
    assert_eq!(read.answer, "Done elsewhere");
    assert!(
        a.log_text().contains("writes nothing more"),
        "the woken replica says it stopped the run: {}",
        a.log_text()
    );
}

/// A second live process with a replica id already in use is refused, naming the id.
#[tokio::test]
async fn a_second_live_process_with_the_same_replica_id_is_refused() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let _a = replica(dir.path(), &llm, &database, &key, "same").await;
    let twin = dir.path().join("twin");
    std::fs::create_dir_all(&twin).unwrap();
    let config = twin.join("config.toml");
    let text = on_postgres(
        config_toml(&llm.base_url(), &twin.join("data")),
        &twin,
        &database.url(),
        Some(&key),
    );
    std::fs::write(&config, text).unwrap();
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let config = config.display().to_string();
    let output = agent_runner(
        &[
            "serve",
            "--listen",
            &listen,
            "--config",
            &config,
            "--replica-id",
            "same",
        ],
        &[],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("\"same\" is held by another live process"),
        "{stderr}"
    );
    assert!(stderr.contains(database.name()), "{stderr}");
}

/// NATS stopped in the middle of live runs: every stream followed on a peer still
/// completes, byte for byte as on the owner (the peer reads the store instead); NATS back,
/// notices flow again.
#[tokio::test]
async fn streams_complete_when_nats_stops_mid_run() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let Some(nats) = OwnNats::start(port).await else {
        return;
    };
    let bus = Bus::Nats {
        url: nats.url.clone(),
        prefix: "agent-runner".to_owned(),
    };
    let runs = 4;
    let llm = FakeOpenAi::start(vec![slow(30, 60); runs + 1]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus,
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;

    let mut owners = Vec::new();
    let mut peers = Vec::new();
    for _ in 0..runs {
        let (stream, seen) = started(&a, "count").await;
        peers.push(attach(&b, &seen[0].message_id, 0).await);
        owners.push((seen, stream));
    }
    drop(nats);
    for ((mut seen, mut stream), mut peer) in owners.into_iter().zip(peers) {
        seen.extend(read_within(&mut stream, Duration::from_secs(20)).await);
        let followed = read_within(&mut peer, Duration::from_secs(20)).await;
        assert_eq!(followed, seen, "every event, in order, without the bus");
        assert!(matches!(
            followed.last().unwrap().event,
            Some(pb::run_event::Event::End(_))
        ));
    }

    let _back = OwnNats::start(port).await.unwrap();
    let (mut stream, mut seen) = started(&a, "count").await;
    let mut peer = attach(&b, &seen[0].message_id, 0).await;
    seen.extend(read_within(&mut stream, Duration::from_secs(20)).await);
    assert_eq!(read_within(&mut peer, Duration::from_secs(20)).await, seen);
}
