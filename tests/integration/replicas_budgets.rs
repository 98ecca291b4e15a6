//! A run's budget across replica processes on one PostgreSQL database: what a run spent
//! and the wall clock it ran go with it to the replica that takes it over after its
//! owner's `kill -9`, so the budget is never given again.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::*;
use crate::support::{message, run_request, FakeOpenAi, Reply, RunRequestExt, ScriptedCall};

/// What a run spent goes with it to the replica that takes it over: the tool call its
/// killed owner made counts, so with a budget of two calls only one more is made, and the
/// run ends naming the budget.
#[tokio::test]
async fn a_run_taken_over_keeps_what_it_spent() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let time =
        |id: &'static str| ScriptedCall::new(id, "current_time", &[r#"{"timezone": "UTC"}"#]);
    let llm = FakeOpenAi::start(vec![
        Reply::calls(&["Checking."], vec![time("c1")], (10, 5)),
        Reply::Stall(vec!["Hal"]),
        Reply::calls(&[], vec![time("c2"), time("c3")], (10, 5)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let mut request = run_request("What time is it, thrice?", &[("time", "current_time")]);
    request.agent_mut().budget = Some(pb::Budget {
        max_tool_calls: Some(2),
        ..Default::default()
    });
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let id = stream.message().await.unwrap().unwrap().message_id;
    within("the second round is under way", || async {
        llm.requests().len() == 2
    })
    .await;
    let mut on_peer = attach(&b, &id, 0).await;
    // The second model call can go out before the first round's records are durable; a
    // follower on the peer sees only what is, so the kill waits for it to see the call.
    let ran_c1 = |event: &pb::RunEvent| match &event.event {
        Some(Event::ToolFinished(finished)) => finished
            .tool_call
            .as_ref()
            .is_some_and(|call| call.id == "c1"),
        _ => false,
    };
    let reached = tokio::time::timeout(Duration::from_secs(20), read_until(&mut on_peer, ran_c1));
    let mut followed = reached.await.expect("the first round reaches the peer");
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    followed.extend(read_within(&mut on_peer, Duration::from_secs(20)).await);
    let Some(Event::End(end)) = &followed.last().unwrap().event else {
        panic!("the run ends normally: {followed:?}");
    };
    assert_eq!(end.finish_reason, pb::FinishReason::BudgetExhausted as i32);
    assert_eq!(end.budget_exhausted, "tool_calls");
    let observations: BTreeMap<String, String> = followed
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::ToolFinished(finished)) => finished.tool_call.clone(),
            _ => None,
        })
        .map(|call| (call.id, call.observation))
        .collect();
    assert!(!observations["c1"].starts_with("not run"));
    assert!(!observations["c2"].starts_with("not run"));
    assert_eq!(
        observations["c3"],
        "not run: the run's tool-call budget (2) is spent"
    );
    let stored = message(&mut client(&b).await, &id).await;
    assert_eq!(stored.budget_exhausted, "tool_calls");
}

/// The wall clock goes with a run to the replica that takes it over: its killed owner had
/// run about 1.6 of its three seconds, so the peer stops the remade round about 1.4 s
/// later — not three.
#[tokio::test]
async fn a_run_taken_over_keeps_its_wall_clock() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let time = ScriptedCall::new("c1", "current_time", &[r#"{"timezone": "UTC"}"#]);
    let llm = FakeOpenAi::start(vec![
        Reply::SlowCalls {
            text: vec!["Checking ", "the clock."],
            calls: vec![time],
            delay_ms: 200,
        },
        Reply::Stall(vec!["Hal"]),
        slow(10, 2_000),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = agent_runner::store::SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let mut request = run_request("What time is it?", &[("time", "current_time")]);
    request.agent_mut().budget = Some(pb::Budget {
        max_seconds: Some(3),
        ..Default::default()
    });
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let id = stream.message().await.unwrap().unwrap().message_id;
    let started = std::time::Instant::now();
    while llm.requests().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the second round is under way: not after 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut on_peer = attach(&b, &id, 0).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let mut restarted = None;
    let end = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), on_peer.message())
            .await
            .expect("the run goes on on the peer")
            .unwrap()
            .expect("the run ends");
        match event.event {
            Some(Event::RoundRestarted(_)) => restarted = Some(std::time::Instant::now()),
            Some(Event::End(end)) => break end,
            _ => {}
        }
    };
    let took = restarted.expect("the peer restarted the round").elapsed();
    assert_eq!(end.budget_exhausted, "wall_clock");
    assert!(
        took < Duration::from_millis(2_400),
        "the peer gave the run its whole budget again: {took:?}"
    );
}
