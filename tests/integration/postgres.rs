//! The service on PostgreSQL, as whole processes: runs are served and survive `kill -9`
//! with every announced record intact; a second process on the database, a start without
//! a key, a start with another key and an unreachable database are refused, clearly and
//! without the password.

use std::path::Path;

use agent_runner::pb;
use agent_runner::store::SecretKey;

use crate::support::postgres::{on_postgres, TestDatabase};
use crate::support::process::{agent_runner, client, spawn_service_edited, Service};
use crate::support::{config_toml, message, read_rest, read_until_delta, run_request, run_to_end};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

async fn spawn_on(dir: &Path, llm: &FakeOpenAi, url: &str, key: &SecretKey) -> Service {
    spawn_service_edited(dir, llm, None, |config| {
        on_postgres(config, dir, url, Some(key))
    })
    .await
}

/// Writes the configuration for a start expected to fail; returns its path.
fn config_file(dir: &Path, llm: &FakeOpenAi, url: &str, key: Option<&SecretKey>) -> String {
    let path = dir.join(format!("refused-{}.toml", uuid::Uuid::new_v4().simple()));
    let config = config_toml(&llm.base_url(), &dir.join("data"));
    std::fs::write(&path, on_postgres(config, dir, url, key)).unwrap();
    path.display().to_string()
}

/// Starts `serve` with `config` and waits for it to exit; returns its exit code and its
/// standard error.
async fn refused_start(config: &str) -> (Option<i32>, String) {
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let output = agent_runner(&["serve", "--listen", &listen, "--config", config], &[]).await;
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A run with a tool call completes on PostgreSQL and reads back; a second one killed
/// with SIGKILL mid-answer leaves every event its client received, and goes on after a
/// restart; the tables hold the conversations, messages, thoughts and events.
#[tokio::test]
async fn runs_on_postgres_survive_kill_9_with_every_announced_event() {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &["Working."],
            vec![ScriptedCall::new(
                "k",
                "eval_expression",
                &["{\"expression\": \"6*7\"}"],
            )],
            (2, 2),
        ),
        Reply::text(&["It is 42."], (3, 3)),
        Reply::Stall(vec!["Almost"]),
        Reply::text(&["Recovered."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut first = spawn_on(dir.path(), &llm, &database.url(), &key).await;
    let mut agents = client(&first).await;
    let done = run_to_end(
        &mut agents,
        run_request("what is 6*7?", &[("maths", "eval_expression")]),
    )
    .await;
    let done_id = done[0].message_id.clone();
    let mut stream = agents
        .run(run_request("crash me", &[]))
        .await
        .unwrap()
        .into_inner();
    let received = read_until_delta(&mut stream).await;

    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(stream);
    let second = spawn_on(dir.path(), &llm, &database.url(), &key).await;
    let mut agents = client(&second).await;
    for (id, seen) in [(&done_id, &done), (&received[0].message_id, &received)] {
        let mut replay = agents
            .attach(pb::AttachRequest {
                message_id: id.clone(),
                after_seq: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let stored = read_rest(&mut replay).await;
        assert_eq!(&stored[..seen.len()], &seen[..], "every announced event");
    }
    let ended = message(&mut agents, done_id.clone()).await;
    assert_eq!(ended.status, pb::MessageStatus::Completed as i32);
    assert_eq!(ended.answer, "Working.\nIt is 42.");
    let crashed = message(&mut agents, received[0].message_id.clone()).await;
    assert_eq!(crashed.status, pb::MessageStatus::Completed as i32);
    assert_eq!(crashed.answer, "Recovered.", "the cut text is void");
    let thoughts = agents
        .list_thoughts(pb::ListThoughtsRequest {
            message_id: done_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(thoughts.thoughts[0].tool_calls[0].observation, "42");
    assert_eq!(database.count("conversations").await, 2);
    assert_eq!(database.count("messages").await, 2);
    assert_eq!(database.count("thoughts").await, 3);
    assert!(database.events_stored().await >= (done.len() + received.len()) as i64);
}

/// A start without a secret key, and one with a key other than the database's, are
/// refused, each saying why and showing no key. (A second process under a replica id in
/// use is refused too: see the replicas' tests.)
#[tokio::test]
async fn a_missing_key_and_another_key_are_refused() {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let first = spawn_on(dir.path(), &llm, &database.url(), &key).await;
    drop(first);

    let keyless = config_file(dir.path(), &llm, &database.url(), None);
    let (code, stderr) = refused_start(&keyless).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("AGENT_RUNNER_SECRET_KEY"), "{stderr}");

    let other = SecretKey::generate();
    let mismatched = config_file(dir.path(), &llm, &database.url(), Some(&other));
    let (code, stderr) = refused_start(&mismatched).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("another key"), "{stderr}");
    for shown in [&key, &other] {
        assert!(!stderr.contains(&shown.to_base64()), "{stderr}");
    }
}

/// A database that cannot be reached fails the start, naming host, port and database,
/// and the password appears nowhere in what the process wrote.
#[tokio::test]
async fn an_unreachable_database_fails_the_start_without_its_password() {
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://agents:hunter2-in-the-url@127.0.0.1:1/agents";
    let config = config_file(dir.path(), &llm, url, Some(&SecretKey::generate()));
    let (code, stderr) = refused_start(&config).await;
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1/agents"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// The health status of the service behind `channel`.
async fn health(channel: tonic::transport::Channel) -> i32 {
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: "agentrunner.v1.AgentService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

/// Waits up to `limit` for health to read `status`; returns how long it took.
async fn health_turns(
    channel: &tonic::transport::Channel,
    status: i32,
    limit: std::time::Duration,
) -> Option<std::time::Duration> {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if health(channel.clone()).await == status {
            return Some(started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    None
}

/// PostgreSQL lost mid-run: the run announces nothing more, tries its commit for the write
/// timeout, then its stream ends UNAVAILABLE; health turns NOT_SERVING and `Run` is refused
/// as UNAVAILABLE. Once the database is back, health and `Run` recover within 2 s, the
/// lost run's end lands (FAILED, `store_error`), every event announced before is there,
/// and every run's tokens are counted toward the tenant's day exactly once.
#[tokio::test]
async fn a_lost_database_stops_announcing_and_recovers_with_every_announced_event() {
    use crate::support::postgres::{server_of, Proxy};
    use std::time::Duration;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let proxy = Proxy::start(server_of(&database.url())).await;
    let url = proxy.url_through(&database.url());
    let llm = FakeOpenAi::start(vec![
        Reply::text(&["Before."], (1, 1)),
        Reply::Slow {
            text: vec!["one ", "two ", "three ", "four ", "five ", "six"],
            delay_ms: 200,
        },
        Reply::text(&["After."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let service = spawn_on(dir.path(), &llm, &url, &key).await;
    let channel = crate::support::process::channel(&service).await;
    let mut agents = client(&service).await;
    let before = run_to_end(&mut agents, run_request("before", &[])).await;
    let mut stream = agents
        .run(run_request("during", &[]))
        .await
        .unwrap()
        .into_inner();
    let mut received = read_until_delta(&mut stream).await;

    proxy.cut();
    let ended = loop {
        match stream.message().await {
            Ok(Some(event)) => received.push(event),
            Ok(None) => break None,
            Err(status) => break Some(status),
        }
    };
    let status = ended.expect("the stream ends with a status");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        health_turns(&channel, 2, Duration::from_secs(5))
            .await
            .is_some(),
        "health turns NOT_SERVING"
    );
    let refused = agents
        .run(run_request("while down", &[]))
        .await
        .expect_err("no run starts while the database is away");
    assert_eq!(refused.code(), tonic::Code::Unavailable);

    proxy.restore();
    let took = health_turns(&channel, 1, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("health turns SERVING again: {}", service.log_text()));
    assert!(took < Duration::from_secs(2), "{took:?}");
    let after = run_to_end(&mut agents, run_request("after", &[])).await;
    assert_eq!(crate::support::end_of(&after).answer, "After.");

    for (id, seen) in [
        (&before[0].message_id, &before),
        (&received[0].message_id, &received),
    ] {
        let mut replay = agents
            .attach(pb::AttachRequest {
                message_id: id.clone(),
                after_seq: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let mut stored = Vec::new();
        while let Ok(Some(event)) = replay.message().await {
            stored.push(event);
        }
        assert!(
            stored.len() >= seen.len(),
            "{} < {}",
            stored.len(),
            seen.len()
        );
        assert_eq!(&stored[..seen.len()], &seen[..], "every announced event");
    }
    let mut lost = message(&mut agents, received[0].message_id.clone()).await;
    for _ in 0..40 {
        if lost.status != pb::MessageStatus::Running as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        lost = message(&mut agents, received[0].message_id.clone()).await;
    }
    assert_eq!(lost.status, pb::MessageStatus::Failed as i32);
    assert_eq!(lost.error.clone().unwrap().code, "store_error");

    // Each run's tokens count once toward the tenant's day, the lost run's too, whose end
    // commit was tried again until the database came back.
    use sqlx::Connection as _;
    let mut usage = 0;
    for id in [
        &before[0].message_id,
        &received[0].message_id,
        &after[0].message_id,
    ] {
        let read = message(&mut agents, id.clone()).await;
        usage += read.usage.map_or(0, |u| u.total_tokens);
    }
    assert!(
        lost.usage.is_some_and(|u| u.total_tokens > 0),
        "the lost run used tokens"
    );
    let mut db = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    let (counted,): (i64,) =
        sqlx::query_as("SELECT coalesce(sum(tokens), 0)::bigint FROM tenant_usage")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(
        counted,
        i64::try_from(usage).unwrap(),
        "tokens counted once"
    );
}

/// A caller whose deadline passes while its run's message is being written (here: held
/// back by another transaction on its idempotency key) leaves no half-started run: the
/// message is written and launched anyway, the passed deadline cancels it, and a retry
/// under the same key follows that run to its end rather than starting another or
/// finding a message `RUNNING` that nothing drives.
#[tokio::test]
async fn a_caller_gone_while_its_run_is_written_leaves_a_cancelled_run_not_a_stuck_one() {
    use sqlx::Connection as _;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Thinking"])]).await;
    let dir = tempfile::tempdir().unwrap();
    let service = spawn_on(dir.path(), &llm, &database.url(), &SecretKey::generate()).await;
    let mut agents = client(&service).await;
    let mut request = run_request("too slow to start", &[]);
    request.idempotency_key = "held-key".into();
    // A model without a context window: the start reaches the write at once, instead of
    // first building the vocabulary a window needs (seconds in a debug build), which the
    // caller's short deadline would outlast before anything is written.
    if let Some(model) = request
        .agent
        .as_mut()
        .and_then(|agent| agent.model.as_mut())
    {
        model.name = "blocking-model".into();
    }

    let mut holder = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO idempotency_keys (tenant, key, message_id, fingerprint) \
         VALUES ('default', 'held-key', gen_random_uuid(), 'held')",
    )
    .execute(&mut holder)
    .await
    .unwrap();
    let mut timed = tonic::Request::new(request.clone());
    timed.set_timeout(std::time::Duration::from_millis(300));
    // The client's own timer ends the call (tonic says CANCELLED, "Timeout expired").
    let gone = agents.run(timed).await.unwrap_err();
    assert!(
        matches!(
            gone.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{gone:?}"
    );
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();

    let retried = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_to_end(&mut agents, request),
    )
    .await
    .expect("the retry follows the first run to its end, which its passed deadline cancelled");
    assert_eq!(
        crate::support::end_of(&retried).finish_reason,
        pb::FinishReason::Cancelled as i32
    );
    let stored = message(&mut agents, retried[0].message_id.clone()).await;
    assert_eq!(stored.status, pb::MessageStatus::Cancelled as i32);
    assert!(llm.requests().len() <= 1);
}

/// PostgreSQL falls silent mid-run (the link stays open and answers nothing, as a network
/// that drops packets without a reset): within `write_timeout_secs` + 5 s (here 2 + 5; 6.1 s
/// measured, where the code before waited out 30 s of patient reads, with no deadline on a
/// commit) both the run's stream and a follower's end `UNAVAILABLE`, saying the database
/// cannot be reached; a new `Run` is refused the same way; once the database answers
/// again, every event sent is stored. One connection for calls, so the silence finds it in
/// use: a full pool of a database that answers nobody is lost, not busy (a stream once
/// ended "busy … try again" here when the pool happened to be full).
#[tokio::test]
async fn a_silent_database_ends_every_stream_unavailable_in_time() {
    use crate::support::postgres::{server_of, Proxy};
    use std::time::{Duration, Instant};
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let proxy = Proxy::start(server_of(&database.url())).await;
    let url = proxy.url_through(&database.url());
    let llm = FakeOpenAi::start(vec![Reply::Slow {
        text: vec!["tick "; 100],
        delay_ms: 50,
    }])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let service = spawn_service_edited(dir.path(), &llm, None, |config| {
        on_postgres(config, dir.path(), &url, Some(&key))
            .replacen(
                "write_timeout_secs = 1\n",
                "write_timeout_secs = 2\nstatement_timeout_ms = 1000\n",
                1,
            )
            .replacen("pool_size = 3\n", "pool_size = 1\n", 1)
    })
    .await;
    let mut agents = client(&service).await;
    let mut stream = agents
        .run(run_request("during", &[]))
        .await
        .unwrap()
        .into_inner();
    let received = read_until_delta(&mut stream).await;
    let id = received[0].message_id.clone();
    let mut follower = agents
        .attach(pb::AttachRequest {
            message_id: id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();

    proxy.stall();
    let silent = Instant::now();
    for (name, stream) in [("Run", &mut stream), ("Attach", &mut follower)] {
        let ended = tokio::time::timeout(
            Duration::from_secs(20),
            crate::support::replicas::ending_of(stream),
        )
        .await
        .unwrap_or_else(|_| panic!("the {name} stream still open 20 s after"));
        crate::support::replicas::says_the_database_cannot_be_reached(name, ended);
    }
    let took = silent.elapsed();
    assert!(
        took <= Duration::from_secs(7),
        "streams ended {took:?} after"
    );
    let mut refusing = client(&service).await;
    let mut request = tonic::Request::new(run_request("while silent", &[]));
    request.set_timeout(Duration::from_secs(10));
    let refused = refusing.run(request).await.expect_err("no run starts");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("the database cannot be reached"),
        "{}",
        refused.message()
    );
    proxy.restore();
    let mut replay = Vec::new();
    for _ in 0..100 {
        let attached = agents
            .attach(pb::AttachRequest {
                message_id: id.clone(),
                after_seq: 0,
            })
            .await;
        if let Ok(stream) = attached {
            let mut stream = stream.into_inner();
            replay.clear();
            while let Ok(Some(event)) = stream.message().await {
                replay.push(event);
            }
            if replay.len() >= received.len() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        &replay[..received.len()],
        &received[..],
        "every event sent is stored"
    );
}
