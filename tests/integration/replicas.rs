//! Several replica processes on one PostgreSQL database: a run is followed from any of
//! them, a dead or paused replica's runs end on its peers (and the paused one, woken, adds
//! nothing), a restart leaves its peers' runs alone, and two live processes never share a
//! replica id. The tests take turns: each starts several processes on two cores.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::store::SecretKey;

use crate::support::postgres::{on_postgres, TestDatabase};
use crate::support::process::{agent_runner, client, spawn_service_edited, Service};
use crate::support::{config_toml, message, read_rest, read_until_delta, run_request};
use crate::support::{FakeOpenAi, Reply};

/// One multi-process test at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The NATS server tests use when `AGENT_RUNNER_TEST_NATS_URL` does not name another.
const NATS_URL: &str = "nats://127.0.0.1:4222";

/// A bus of its own on the test NATS server (a subject prefix no other test uses), or
/// `None` (skip) when NATS cannot be reached outside CI.
async fn nats_bus() -> Option<Bus> {
    let url = std::env::var("AGENT_RUNNER_TEST_NATS_URL").unwrap_or_else(|_| NATS_URL.to_owned());
    let place = agent_runner::cluster::nats::describe(&url);
    let reached = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(place.clone()),
    )
    .await;
    if !matches!(reached, Ok(Ok(_))) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "NATS at {place} is needed in CI"
        );
        eprintln!("skipped: NATS at {place} cannot be reached; set AGENT_RUNNER_TEST_NATS_URL to run these tests");
        return None;
    }
    Some(Bus::Nats {
        url,
        prefix: format!("test-{}", uuid::Uuid::new_v4().simple()),
    })
}

/// How replicas of a test tell each other of events and commands.
#[derive(Clone, Default)]
enum Bus {
    /// The database's notifications.
    #[default]
    Database,
    /// NATS at `url`, under `prefix`.
    Nats { url: String, prefix: String },
}

/// A replica named `id` on `database`, in a directory of its own.
async fn replica(
    dir: &Path,
    llm: &FakeOpenAi,
    database: &TestDatabase,
    key: &SecretKey,
    id: &str,
) -> Service {
    replica_on(dir, llm, database, key, id, &Options::default()).await
}

/// How a test's replica differs from the plain one.
#[derive(Clone, Default)]
struct Options {
    /// The bus between the replicas.
    bus: Bus,
    /// Where it serves `/metrics`.
    metrics: Option<std::net::SocketAddr>,
    /// Whether calls need API keys (made with [`ADMIN_TOKEN`]).
    auth: bool,
}

/// The admin token of replicas started with [`Options::auth`].
const ADMIN_TOKEN: &str = "replicas-admin-token";

/// [`replica`] as `options` say.
async fn replica_on(
    dir: &Path,
    llm: &FakeOpenAi,
    database: &TestDatabase,
    key: &SecretKey,
    id: &str,
    options: &Options,
) -> Service {
    let dir = dir.join(id);
    let metrics = options.metrics.map_or(String::new(), |addr| {
        format!("metrics_listen = \"{addr}\"\n")
    });
    let auth = match options.auth {
        true => format!("[auth]\nrequired = true\nadmin_token = \"{ADMIN_TOKEN}\"\n\n[runner]\n"),
        false => "[runner]\n".to_owned(),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let nats = match &options.bus {
        Bus::Database => String::new(),
        Bus::Nats { url, prefix } => {
            format!("nats_url = \"{url}\"\nsubject_prefix = \"{prefix}\"\n")
        }
    };
    spawn_service_edited(&dir, llm, None, |config| {
        on_postgres(config, &dir, &database.url(), Some(key))
            .replacen(
                "[cluster]\n",
                &format!("[cluster]\nreplica_id = \"{id}\"\n{nats}"),
                1,
            )
            .replacen("[server]\n", &format!("[server]\n{metrics}"), 1)
            .replacen("[runner]\n", &auth, 1)
    })
    .await
}

fn slow(pieces: usize, delay_ms: u64) -> Reply {
    Reply::Slow {
        text: vec!["tick "; pieces],
        delay_ms,
    }
}

/// The stream of `message_id` on `service` after `after_seq`.
async fn attach(
    service: &Service,
    message_id: &str,
    after_seq: u64,
) -> tonic::Streaming<pb::RunEvent> {
    client(service)
        .await
        .attach(pb::AttachRequest {
            message_id: message_id.to_owned(),
            after_seq,
        })
        .await
        .unwrap()
        .into_inner()
}

/// Reads `stream` to its end, failing the test after `limit`.
async fn read_within(
    stream: &mut tonic::Streaming<pb::RunEvent>,
    limit: Duration,
) -> Vec<pb::RunEvent> {
    tokio::time::timeout(limit, read_rest(stream))
        .await
        .expect("the stream ends in time")
}

fn failure_code(event: &pb::RunEvent) -> Option<String> {
    match &event.event {
        Some(pb::run_event::Event::Error(error)) => Some(error.code.clone()),
        _ => None,
    }
}

/// Over NATS: see [`followed_identically`].
#[tokio::test]
async fn a_run_is_followed_identically_from_another_replica_over_nats() {
    let _turn = TURN.lock().await;
    if let Some(bus) = nats_bus().await {
        followed_identically(&bus).await;
    }
}

/// Without NATS, over the database's notifications: see [`followed_identically`].
#[tokio::test]
async fn a_run_is_followed_identically_from_another_replica_without_nats() {
    let _turn = TURN.lock().await;
    followed_identically(&Bus::Database).await;
}

/// A run on one replica, attached on another from `seq` 0 and from the middle, gives the
/// same events, byte for byte, with no gap; the peer reads the finished message too.
async fn followed_identically(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![slow(30, 40)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let plain = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let measured = Options {
        metrics: Some(metrics),
        ..plain.clone()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &plain).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &measured).await;

    let mut stream = client(&a)
        .await
        .run(run_request("count", &[]))
        .await
        .unwrap()
        .into_inner();
    let mut seen = read_until_delta(&mut stream).await;
    let id = seen[0].message_id.clone();
    let middle = seen.last().unwrap().seq;
    let mut from_start = attach(&b, &id, 0).await;
    let mut from_middle = attach(&b, &id, middle).await;
    seen.extend(read_within(&mut stream, Duration::from_secs(20)).await);
    let whole = read_within(&mut from_start, Duration::from_secs(20)).await;
    let rest = read_within(&mut from_middle, Duration::from_secs(20)).await;

    assert_eq!(whole, seen, "from seq 0 on a peer: every event, in order");
    let after: Vec<_> = seen.iter().filter(|e| e.seq > middle).cloned().collect();
    assert_eq!(rest, after, "from the middle on a peer: the rest");
    let seqs: Vec<u64> = whole.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    let read = message(&mut client(&b).await, id).await;
    assert_eq!(read.status, pb::MessageStatus::Completed as i32);
    assert_eq!(read.answer, "tick ".repeat(30));

    // Over NATS the peer's followers were handed the events by notices, not reads.
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let relayed: f64 = text
        .lines()
        .find_map(|line| line.strip_prefix("agent_runner_relayed_events_total "))
        .map_or(0.0, |value| value.parse().unwrap());
    match bus {
        Bus::Nats { .. } => assert!(relayed >= 20.0, "relayed {relayed}: {text}"),
        Bus::Database => assert_eq!(relayed, 0.0, "notifications carry no events"),
    }
}

/// A replica killed mid-run: once its lease lapses, a peer ends its run INTERRUPTED with
/// an end event, so a client attached on the peer sees the stream end; a replica that
/// restarts leaves its peer's running run alone.
#[tokio::test]
async fn a_dead_replicas_run_ends_on_its_peer_and_a_restart_leaves_peers_alone() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Almost"]), slow(40, 50)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;

    let mut doomed = client(&a)
        .await
        .run(run_request("stall", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut doomed).await;
    let doomed_id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &doomed_id, 0).await;
    let mut surviving = client(&b)
        .await
        .run(run_request("count", &[]))
        .await
        .unwrap()
        .into_inner();
    let surviving_seen = read_until_delta(&mut surviving).await;

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    let followed = read_within(&mut on_peer, Duration::from_secs(15)).await;
    let lapse = killed.elapsed();
    assert_eq!(&followed[..seen.len()], &seen[..], "every announced event");
    let end = followed.last().unwrap();
    assert_eq!(failure_code(end).as_deref(), Some("interrupted"), "{end:?}");
    assert_eq!(end.seq, followed[followed.len() - 2].seq + 1);
    assert!(
        lapse < Duration::from_secs(6),
        "ended {lapse:?} after the kill"
    );
    let read = message(&mut client(&b).await, doomed_id).await;
    assert_eq!(read.status, pb::MessageStatus::Interrupted as i32);

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
}

/// A paused replica (SIGSTOP) loses its run to a peer's sweep; woken (SIGCONT), it adds
/// not one event or record to it.
#[tokio::test]
async fn a_paused_replica_woken_after_its_run_ended_writes_nothing() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![slow(200, 30)]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;

    let mut stream = client(&a)
        .await
        .run(run_request("count", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stream).await;
    let id = seen[0].message_id.clone();
    let mut on_peer = attach(&b, &id, 0).await;
    signal(&a, "STOP");
    let followed = read_within(&mut on_peer, Duration::from_secs(15)).await;
    assert_eq!(
        failure_code(followed.last().unwrap()).as_deref(),
        Some("interrupted")
    );
    let events = database.count("events").await;

    signal(&a, "CONT");
    // The woken replica's model stream goes on for seconds; give it time to try.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(database.count("events").await, events, "not one event more");
    let replay = read_within(&mut attach(&b, &id, 0).await, Duration::from_secs(5)).await;
    assert_eq!(replay, followed, "the record is as the peer ended it");
    let read = message(&mut client(&b).await, id).await;
    assert_eq!(read.status, pb::MessageStatus::Interrupted as i32);
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

fn signal(service: &Service, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &service.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

fn order_lookup() -> pb::ClientTool {
    pb::ClientTool {
        name: "lookup_order".into(),
        description: "Look up an order in the caller's system".into(),
        parameters_schema: None,
        require_approval: false,
    }
}

/// Reads `stream` until the run asks for its caller's tools.
async fn until_required(stream: &mut tonic::Streaming<pb::RunEvent>) -> Vec<pb::RunEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let required = matches!(
            event.event,
            Some(pb::run_event::Event::ToolCallsRequired(_))
        );
        events.push(event);
        if required {
            return events;
        }
    }
    panic!("the run ended without asking for tools: {events:?}");
}

/// Over NATS: see [`commands_reach_the_run`].
#[tokio::test]
async fn commands_sent_to_a_peer_reach_the_run_over_nats() {
    let _turn = TURN.lock().await;
    if let Some(bus) = nats_bus().await {
        commands_reach_the_run(&bus).await;
    }
}

/// Without NATS: see [`commands_reach_the_run`].
#[tokio::test]
async fn commands_sent_to_a_peer_reach_the_run_without_nats() {
    let _turn = TURN.lock().await;
    commands_reach_the_run(&Bus::Database).await;
}

/// Tool outputs, cancels and deletes sent to a replica that does not hold the run: they
/// are refused as the owner would refuse them, or kept and carried out by the owner; an
/// idempotency key sent to two replicas at once starts one run.
async fn commands_reach_the_run(bus: &Bus) {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![crate::support::ScriptedCall::new(
                "cli",
                "lookup_order",
                &["{\"order_id\": \"A1\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["Order A1 has shipped."], (1, 1)),
        Reply::Stall(vec!["Almost"]),
        slow(20, 100),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        bus: bus.clone(),
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let mut peer = client(&b).await;

    // Tool outputs through the peer: a wrong id is refused naming the field, as the owner
    // refuses it; the right one resumes the run on its owner.
    let mut request = run_request("Where is order A1?", &[]);
    request.client_tools.push(order_lookup());
    let mut stream = client(&a).await.run(request).await.unwrap().into_inner();
    let mut events = until_required(&mut stream).await;
    let id = events[0].message_id.clone();
    let output = |call: &str| pb::SubmitToolOutputsRequest {
        message_id: id.clone(),
        outputs: vec![pb::ToolOutput {
            tool_call_id: call.into(),
            output: "shipped".into(),
            error: String::new(),
        }],
    };
    let refused = peer.submit_tool_outputs(output("nope")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        refused.message(),
        "outputs[0].tool_call_id \"nope\" is not a call the run is waiting for"
    );
    peer.submit_tool_outputs(output("cli")).await.unwrap();
    events.extend(read_within(&mut stream, Duration::from_secs(10)).await);
    match &events.last().unwrap().event {
        Some(pb::run_event::Event::End(end)) => assert_eq!(end.answer, "Order A1 has shipped."),
        other => panic!("the run did not complete: {other:?}"),
    }
    let late = peer.submit_tool_outputs(output("cli")).await.unwrap_err();
    assert_eq!(late.code(), tonic::Code::FailedPrecondition, "{late:?}");

    // A run held by the owner: the peer refuses to delete its conversation, then cancels
    // it; the cancel is answered once the run has ended.
    let mut stalled = client(&a)
        .await
        .run(run_request("stall", &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = read_until_delta(&mut stalled).await;
    let busy = peer
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: seen[0].conversation_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition, "{busy:?}");
    let asked = Instant::now();
    let cancelled = peer
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let took = asked.elapsed();
    assert_eq!(cancelled.status, pb::MessageStatus::Cancelled as i32);
    // Woken by the bus, the owner stops the run at once; its end is then seen within
    // the cancel's own look every 50 ms.
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");
    let rest = read_within(&mut stalled, Duration::from_secs(5)).await;
    assert!(rest.last().is_some(), "the owner's stream ends");
    let again = peer
        .cancel(pb::CancelRequest {
            message_id: seen[0].message_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);

    // One idempotency key, two replicas at once: one message.
    let mut keyed = run_request("count", &[]);
    keyed.idempotency_key = "order-42".into();
    let (mut on_a, mut on_b) = (client(&a).await, client(&b).await);
    let (first, second) = tokio::join!(on_a.run(keyed.clone()), on_b.run(keyed.clone()));
    let (mut first, mut second) = (first.unwrap().into_inner(), second.unwrap().into_inner());
    let first = read_within(&mut first, Duration::from_secs(20)).await;
    let second = read_within(&mut second, Duration::from_secs(20)).await;
    assert_eq!(first[0].message_id, second[0].message_id);
    assert_eq!(first, second, "the second caller follows the one run");
}

/// A NATS server of the test's own, on a free port.
struct OwnNats {
    child: std::process::Child,
    url: String,
}

impl OwnNats {
    /// Starts `nats-server`, or `None` (skip) where it is not installed outside CI.
    #[allow(clippy::zombie_processes, reason = "killed and waited for on drop")]
    async fn start(port: u16) -> Option<Self> {
        let binary = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server"]
            .into_iter()
            .find(|path| Path::new(path).exists());
        let Some(binary) = binary else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "nats-server is needed in CI"
            );
            eprintln!("skipped: nats-server is not installed");
            return None;
        };
        let child = std::process::Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("nats://127.0.0.1:{port}");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(Self { child, url });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nats-server did not start");
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        let mut stream = client(&a)
            .await
            .run(run_request("count", &[]))
            .await
            .unwrap()
            .into_inner();
        let seen = read_until_delta(&mut stream).await;
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
    let mut stream = client(&a)
        .await
        .run(run_request("count", &[]))
        .await
        .unwrap()
        .into_inner();
    let mut seen = read_until_delta(&mut stream).await;
    let mut peer = attach(&b, &seen[0].message_id, 0).await;
    seen.extend(read_within(&mut stream, Duration::from_secs(20)).await);
    assert_eq!(read_within(&mut peer, Duration::from_secs(20)).await, seen);
}

/// `request` signed with `token` (an API key or the admin token).
fn signed<T>(request: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// Polls `check` every 20 ms until it holds; returns how long that took, failing after
/// five seconds.
async fn within<F, Fut>(what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: not after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// An API key made, or revoked, on one replica is in force on another within a second;
/// a tool provider made or deleted on one is known, or unknown, on another within a second.
#[tokio::test]
async fn keys_and_providers_changed_on_one_replica_hold_on_the_others_within_a_second() {
    use agent_runner::pb::admin_service_client::AdminServiceClient;
    use agent_runner::pb::tool_registry_client::ToolRegistryClient;
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let options = Options {
        auth: true,
        ..Options::default()
    };
    let a = replica_on(dir.path(), &llm, &database, &key, "a", &options).await;
    let b = replica_on(dir.path(), &llm, &database, &key, "b", &options).await;
    let channel = |service: &Service| {
        tonic::transport::Channel::from_shared(format!("http://{}", service.addr))
            .unwrap()
            .connect_lazy()
    };

    let created = AdminServiceClient::new(channel(&a))
        .create_api_key(signed(
            pb::CreateApiKeyRequest {
                tenant: "acme".into(),
                name: "acme-ci".into(),
                limits: None,
            },
            ADMIN_TOKEN,
        ))
        .await
        .unwrap()
        .into_inner();
    let (id, secret) = (created.key.unwrap().id, created.secret);
    // A known message id is not needed: a key that works gets NOT_FOUND, one that does not
    // gets UNAUTHENTICATED.
    let answer = |service: &Service| {
        let mut agents =
            agent_runner::pb::agent_service_client::AgentServiceClient::new(channel(service));
        let secret = secret.clone();
        async move {
            agents
                .get_message(signed(
                    pb::GetMessageRequest {
                        message_id: "00000000-0000-0000-0000-000000000000".into(),
                    },
                    &secret,
                ))
                .await
                .unwrap_err()
                .code()
        }
    };
    let made = within("a key made on a works on b", || async {
        answer(&b).await == tonic::Code::NotFound
    })
    .await;
    AdminServiceClient::new(channel(&a))
        .revoke_api_key(signed(pb::RevokeApiKeyRequest { id }, ADMIN_TOKEN))
        .await
        .unwrap();
    let revoked = within("a key revoked on a is refused on b", || async {
        answer(&b).await == tonic::Code::Unauthenticated
    })
    .await;
    assert!(made < Duration::from_secs(1), "made after {made:?}");
    assert!(
        revoked < Duration::from_secs(1),
        "revoked after {revoked:?}"
    );

    let tenant_key = AdminServiceClient::new(channel(&a))
        .create_api_key(signed(
            pb::CreateApiKeyRequest {
                tenant: "acme".into(),
                name: "tools".into(),
                limits: None,
            },
            ADMIN_TOKEN,
        ))
        .await
        .unwrap()
        .into_inner()
        .secret;
    within("the tools key works on b", || async {
        let mut tools = ToolRegistryClient::new(channel(&b));
        tools
            .list_providers(signed(pb::ListProvidersRequest::default(), &tenant_key))
            .await
            .is_ok()
    })
    .await;
    let provider = pb::ToolProvider {
        name: "handbook".into(),
        description: "The staff handbook".into(),
        source: Some(pb::ProviderSource {
            source: Some(pb::provider_source::Source::Knowledge(
                pb::KnowledgeSource {
                    endpoint: "http://127.0.0.1:9".into(),
                    knowledge_id: "kb-1".into(),
                    top_k: 2,
                    score_threshold: 0.5,
                },
            )),
        }),
        ..Default::default()
    };
    ToolRegistryClient::new(channel(&a))
        .create_provider(signed(
            pb::CreateProviderRequest {
                provider: Some(provider),
            },
            &tenant_key,
        ))
        .await
        .unwrap();
    let known = |service: &Service| {
        let mut tools = ToolRegistryClient::new(channel(service));
        let tenant_key = tenant_key.clone();
        async move {
            let got = tools
                .get_provider(signed(
                    pb::GetProviderRequest {
                        name: "handbook".into(),
                    },
                    &tenant_key,
                ))
                .await;
            got.is_ok()
        }
    };
    let created = within("a provider made on a is known on b", || async {
        known(&b).await
    })
    .await;
    ToolRegistryClient::new(channel(&a))
        .delete_provider(signed(
            pb::DeleteProviderRequest {
                name: "handbook".into(),
            },
            &tenant_key,
        ))
        .await
        .unwrap();
    let deleted = within("a provider deleted on a is unknown on b", || async {
        !known(&b).await
    })
    .await;
    assert!(created < Duration::from_secs(1), "known after {created:?}");
    assert!(
        deleted < Duration::from_secs(1),
        "unknown after {deleted:?}"
    );
}

/// A tenant's limit of runs at once holds across replicas: 30 runs started at once over
/// three replicas against a limit of 2 admit exactly 2; a dead replica's place frees once
/// its lease lapses.
#[tokio::test]
async fn tenant_limits_are_exact_across_replicas() {
    let _turn = TURN.lock().await;
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Working"]); 4]).await;
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let mut replicas = Vec::new();
    for id in ["a", "b", "c"] {
        let dir = dir.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let url = database.url();
        replicas.push(
            spawn_service_edited(&dir, &llm, None, |config| {
                on_postgres(config, &dir, &url, Some(&key))
                    .replacen(
                        "[cluster]\n",
                        &format!("[cluster]\nreplica_id = \"{id}\"\n"),
                        1,
                    )
                    .replacen(
                        "[runner]\n",
                        "[limits]\nmax_concurrent_runs = 2\n\n[runner]\n",
                        1,
                    )
            })
            .await,
        );
    }
    let mut clients = Vec::new();
    for replica in &replicas {
        clients.push(client(replica).await);
    }
    let starts = (0..30).map(|i| {
        let mut agents = clients[i % 3].clone();
        async move { (i % 3, agents.run(run_request("stall", &[])).await) }
    });
    let mut admitted = Vec::new();
    let mut refused = 0;
    for (replica, started) in futures::future::join_all(starts).await {
        match started {
            Ok(stream) => admitted.push((replica, stream.into_inner())),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                assert!(
                    status.message().contains("max_concurrent_runs"),
                    "{status:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(admitted.len(), 2, "exactly the limit over three replicas");
    assert_eq!(refused, 28);

    // The replica holding the first admitted run dies: its place frees with its lease.
    let (dead, mut stream) = admitted.remove(0);
    let _ = read_until_delta(&mut stream).await;
    let mut killed = replicas.remove(dead);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let survivor = &replicas[0];
    let freed = within("a dead replica's place frees", || async {
        client(survivor)
            .await
            .run(run_request("stall", &[]))
            .await
            .is_ok()
    })
    .await;
    assert!(freed < Duration::from_secs(5), "freed after {freed:?}");
}
