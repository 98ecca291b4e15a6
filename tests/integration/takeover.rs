//! Runs that outlive their replica: three replica processes on one PostgreSQL database and
//! one NATS server; the owner of many runs is killed mid-answer and its peers take every
//! run over and finish it, with nothing a client saw changed and no gap in `seq`. The tests
//! take turns with the other replica tests ([`TURN`]).

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::run_event::Event;
use agent_runner::store::SecretKey;

use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::*;
use crate::support::{message, FakeOpenAi, Reply};

/// `kill -9` of the owner of 12 runs mid-answer: each run, attached on a peer from `seq`
/// 0, shows every event its owner's client saw, then `round_restarted` voiding the cut
/// text within 15 s of the kill, then the round made again and `end`, `seq` 1..n without
/// gap or repeat; none is left running.
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
        ids.push(seen[0].message_id.clone());
    }
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
