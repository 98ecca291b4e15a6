//! The real binary: killed with SIGKILL it loses nothing a client was told about and goes
//! on with the run after a restart, and on SIGTERM it hands running messages over to the
//! next start and exits cleanly within its grace period; its runtime has the threads it is
//! given.

use std::process::Command;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::run_event::Event;

use crate::support::process::{
    agent_runner, client, spawn_service, spawn_service_edited, spawn_service_with, wait_for_exit,
};
use crate::support::{message, read_until_delta, run_request};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

/// After `kill -9` mid-answer and a restart, the run goes on from its last durable round:
/// every event the client had received is still there byte for byte, then
/// `round_restarted` voids the cut round's text, the round is made again, and the run
/// ends with `seq` gap-free, the finished tool call not made again, the void text gone
/// from the answer, and the cut call counted as estimated usage.
#[tokio::test]
async fn sigkill_mid_answer_resumes_after_a_restart() {
    let llm = FakeOpenAi::start(vec![
        working_on_five_times_five(),
        Reply::Stall(vec!["Almost"]),
        Reply::calls(&["It is 25."], Vec::new(), (3, 3)),
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
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=stored.len() as u64).collect::<Vec<_>>());
    let void = received.last().unwrap();
    assert!(matches!(&void.event, Some(Event::Delta(d)) if d.text.contains("Almost")));
    match &stored[received.len()].event {
        Some(Event::RoundRestarted(restarted)) => {
            assert_eq!(restarted.position, 2);
            assert_eq!(restarted.discard_from_seq, void.seq);
            assert_eq!(restarted.reason, "owner_lost");
        }
        other => panic!("round_restarted comes first after the takeover: {other:?}"),
    }
    let Some(Event::End(end)) = &stored.last().unwrap().event else {
        panic!("the run ends normally: {stored:?}");
    };
    assert_eq!(end.answer, "Working.\nIt is 25.");
    assert_eq!(end.iterations, 2);
    // The rounds' reported 4 and 6 tokens, and the cut call's estimate besides.
    let usage = end.usage.clone().unwrap();
    assert!(usage.estimated, "{usage:?}");
    assert!(usage.total_tokens > 10, "{usage:?}");
    let message = message(&mut client, message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Completed as i32);
    assert_eq!(message.answer, end.answer);
    let thoughts = client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(thoughts.thoughts.len(), 2, "the cut round keeps its place");
    assert_eq!(thoughts.thoughts[0].tool_calls[0].observation, "25");
    assert_eq!(thoughts.thoughts[1].answer, "It is 25.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "the finished round is not asked again");
    let resumed_prompt = requests[2].to_string();
    assert!(resumed_prompt.contains("\"25\""), "{resumed_prompt}");
    assert!(!resumed_prompt.contains("Almost"), "{resumed_prompt}");
}

/// A run that loses its owner at every start is taken over `cluster.max_takeovers` times,
/// then ends `owner_lost` instead of taking a further process down with it; with
/// `runner.resume_after_restart = false` a crashed run ends interrupted at the next start.
#[tokio::test]
async fn a_run_lost_too_often_ends_owner_lost_and_resuming_can_be_turned_off() {
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["First"]),
        Reply::Stall(vec!["Second"]),
        Reply::Stall(vec!["Third"]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let once = |config: String| config.replacen("[cluster]\n", "[cluster]\nmax_takeovers = 1\n", 1);
    let mut first = spawn_service_edited(dir.path(), &llm, None, once).await;
    let mut stream = client(&first)
        .await
        .run(run_request("crash me", &[]))
        .await
        .unwrap()
        .into_inner();
    let message_id = read_until_delta(&mut stream).await[0].message_id.clone();
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = spawn_service_edited(dir.path(), &llm, None, once).await;
    let mut resumed = client(&second)
        .await
        .attach(pb::AttachRequest {
            message_id: message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut texts = Vec::new();
    while texts.len() < 2 {
        let event = resumed.message().await.unwrap().unwrap();
        if let Some(Event::Delta(delta)) = event.event {
            texts.push(delta.text);
        }
    }
    assert_eq!(texts, ["First", "Second"], "taken over once");
    second.child.kill().unwrap();
    second.child.wait().unwrap();

    let third = spawn_service_edited(dir.path(), &llm, None, once).await;
    let mut client = client(&third).await;
    let lost = message(&mut client, message_id.clone()).await;
    assert_eq!(lost.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(lost.error.unwrap().code, "owner_lost");
    assert_eq!(llm.requests().len(), 2, "not called a third time");

    // Turned off: a crashed run is interrupted, not resumed.
    let mut stream = client
        .run(run_request("crash me too", &[]))
        .await
        .unwrap()
        .into_inner();
    let second_id = read_until_delta(&mut stream).await[0].message_id.clone();
    drop(third);
    let off = |config: String| {
        config.replacen("[runner]\n", "[runner]\nresume_after_restart = false\n", 1)
    };
    let fourth = spawn_service_edited(dir.path(), &llm, None, off).await;
    let crashed = message(
        &mut crate::support::process::client(&fourth).await,
        second_id,
    )
    .await;
    assert_eq!(crashed.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(crashed.error.unwrap().code, "interrupted");
    assert_eq!(llm.requests().len(), 3);
}

/// SIGTERM with a run in flight: the process stops taking runs, lets the run's step go on
/// for its grace period, cuts it, and exits with status 0; the client's stream ends with
/// `UNAVAILABLE` and no `error` event; the next start goes on with the run (a hand-over,
/// told as such), which ends normally.
#[tokio::test]
async fn sigterm_hands_running_messages_over_to_the_next_start() {
    let llm = FakeOpenAi::start(vec![
        Reply::Stall(vec!["Hmm"]),
        Reply::text(&["Done after the restart."], (2, 3)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = spawn_service(dir.path(), &llm).await;
    let mut stream = client(&service)
        .await
        .run(run_request("wait", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;

    let pid = service.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut rest = Vec::new();
    let ended = loop {
        match stream.message().await {
            Ok(Some(event)) => rest.push(event),
            Ok(None) => panic!("the stream ends with UNAVAILABLE: {rest:?}"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    assert!(ended.message().contains("Attach again"), "{ended:?}");
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e.event, Some(Event::Error(_)))),
        "{rest:?}"
    );
    let status = wait_for_exit(&mut service.child, Duration::from_secs(10)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit status: {status:?}; service log:\n{}",
        std::fs::read_to_string(&service.log).unwrap_or_default()
    );

    let restarted = spawn_service(dir.path(), &llm).await;
    let mut client = client(&restarted).await;
    let mut replay = client
        .attach(pb::AttachRequest {
            message_id: seen[0].message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = replay.message().await.unwrap() {
        events.push(event);
    }
    assert_eq!(&events[..seen.len()], &seen[..]);
    let restarted_round = events.iter().find_map(|e| match &e.event {
        Some(Event::RoundRestarted(restarted)) => Some(restarted.clone()),
        _ => None,
    });
    assert_eq!(restarted_round.unwrap().reason, "handed_over");
    let Some(Event::End(end)) = &events.last().unwrap().event else {
        panic!("the run ends normally: {events:?}");
    };
    assert_eq!(end.answer, "Done after the restart.");
    let read = message(&mut client, seen[0].message_id.clone()).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
}

/// `--worker-threads` (here as `AGENT_RUNNER_WORKER_THREADS`) sizes the process's runtime:
/// on one thread the service says so as it starts and carries a run with a tool round to
/// its end; a count out of range is refused before anything starts, naming the setting.
#[tokio::test]
async fn the_service_runs_on_the_worker_threads_it_is_given() {
    let llm = FakeOpenAi::start(vec![
        working_on_five_times_five(),
        Reply::calls(&["It is 25."], Vec::new(), (3, 3)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let one = [
        ("AGENT_RUNNER_WORKER_THREADS", "1".to_owned()),
        ("AGENT_RUNNER_LOG_FORMAT", "json".to_owned()),
    ];
    let service = spawn_service_with(dir.path(), &llm, &one).await;
    let mut stream = client(&service)
        .await
        .run(run_request("5*5?", &[("maths", "eval_expression")]))
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(event) = stream.message().await.unwrap() {
        last = event.event;
    }
    let Some(Event::End(end)) = last else {
        panic!("the run ends normally: {last:?}");
    };
    assert_eq!(end.answer, "Working.\nIt is 25.");
    let log = service.log_text();
    assert!(log.contains(r#""worker_threads":1"#), "{log}");

    let data = dir.path().join("refused").display().to_string();
    for threads in ["0", "257"] {
        let output = agent_runner(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                &data,
                "--worker-threads",
                threads,
            ],
            &[],
        )
        .await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("server.worker_threads must be between 1 and 256"),
            "{stderr}"
        );
    }
}

/// A round that says "Working." and asks `eval_expression` for 5*5.
fn working_on_five_times_five() -> Reply {
    Reply::calls(
        &["Working."],
        vec![ScriptedCall::new(
            "k",
            "eval_expression",
            &["{\"expression\": \"5*5\"}"],
        )],
        (2, 2),
    )
}
