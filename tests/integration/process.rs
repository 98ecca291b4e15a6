//! The real binary: killed with SIGKILL it loses nothing a client was told about, and on
//! SIGTERM it ends running messages and exits cleanly within its grace period.

use std::process::Command;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::process::{client, spawn_service, wait_for_exit};
use crate::support::{message, read_until_delta, run_request};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

/// After `kill -9` mid-run and a restart, every event the client had received is still
/// readable, byte for byte, and the message is INTERRUPTED.
#[tokio::test]
async fn sigkill_loses_no_event_a_client_received() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &["Working."],
            vec![ScriptedCall::new(
                "k",
                "eval_expression",
                &["{\"expression\": \"5*5\"}"],
            )],
            (2, 2),
        ),
        Reply::Stall(vec!["Almost"]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = spawn_service(dir.path(), &llm).await;
    let mut stream = client(&first)
        .await
        .run(run_request("crash me", &[("maths", "eval_expression")]))
        .await
        .unwrap()
        .into_inner();
    let mut received = read_until_delta(&mut stream).await;
    received.extend(read_until_delta(&mut stream).await);

    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(stream);
    let second = spawn_service(dir.path(), &llm).await;
    let mut client = client(&second).await;
    let message_id = received[0].message_id.clone();
    let mut replay = client
        .attach(pb::AttachRequest {
            message_id: message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut stored = Vec::new();
    while let Some(event) = replay.message().await.unwrap() {
        stored.push(event);
    }

    assert!(
        received.len() >= 8,
        "the run got as far as round 2: {received:?}"
    );
    assert_eq!(&stored[..received.len()], &received[..]);
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Interrupted as i32);
    let thoughts = client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(thoughts.thoughts[0].tool_calls[0].observation, "25");
}

/// SIGTERM with a run in flight: the client receives the run's final `error` event (code
/// `shutdown`) and the process exits with status 0 within its grace period.
#[tokio::test]
async fn sigterm_ends_running_messages_and_exits_cleanly() {
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Hmm"])]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = spawn_service(dir.path(), &llm).await;
    let mut stream = client(&service)
        .await
        .run(run_request("wait", &[]))
        .await
        .unwrap()
        .into_inner();
    read_until_delta(&mut stream).await;

    let pid = service.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut rest = Vec::new();
    while let Ok(Some(event)) = stream.message().await {
        rest.push(event);
    }
    let status = wait_for_exit(&mut service.child, Duration::from_secs(10)).await;

    match rest.last().and_then(|e| e.event.clone()) {
        Some(Event::Error(error)) => assert_eq!(error.code, "shutdown"),
        other => panic!("expected the shutdown error, got {other:?}"),
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status: {status:?}; service log:\n{}",
        std::fs::read_to_string(&service.log).unwrap_or_default()
    );
}
