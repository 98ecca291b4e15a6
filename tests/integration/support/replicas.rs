//! Several replica processes on one PostgreSQL database (and NATS) for the replicas'
//! tests: starting them, following their runs, a NATS server of a test's own.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::store::SecretKey;

use super::postgres::{on_postgres, TestDatabase};
use super::process::{client, spawn_binary_edited, Service};
use super::{read_rest, FakeOpenAi, Reply};

/// One multi-process test at a time.
pub static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The NATS server tests use when `AGENT_RUNNER_TEST_NATS_URL` does not name another.
pub const NATS_URL: &str = "nats://127.0.0.1:4222";

/// A bus of its own on the test NATS server (a subject prefix no other test uses), or
/// `None` (skip) when NATS cannot be reached outside CI.
pub async fn nats_bus() -> Option<Bus> {
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
        agent_runner::test_utils::say_skipped(&format!(
            "NATS at {place} cannot be reached; set AGENT_RUNNER_TEST_NATS_URL to run these tests"
        ));
        return None;
    }
    Some(Bus::Nats {
        url,
        prefix: format!("test-{}", uuid::Uuid::new_v4().simple()),
    })
}

/// How replicas of a test tell each other of events and commands.
#[derive(Clone, Default)]
pub enum Bus {
    /// The database's notifications.
    #[default]
    Database,
    /// NATS at `url`, under `prefix`.
    Nats { url: String, prefix: String },
}

/// A replica named `id` on `database`, in a directory of its own.
pub async fn replica(
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
pub struct Options {
    /// The bus between the replicas.
    pub bus: Bus,
    /// Whether it serves `/metrics` (on a port of its own: [`Service::metrics`]).
    pub metrics: bool,
    /// Whether calls need API keys (made with [`ADMIN_TOKEN`]).
    pub auth: bool,
    /// `[limits] max_concurrent_runs` (0: none).
    pub max_concurrent_runs: u32,
    /// `[a2a] enabled` (needs `metrics`).
    pub a2a: bool,
    /// `[runner] client_tool_timeout_secs`, when not the tests' 2 s.
    pub client_tool_timeout_secs: Option<u64>,
    /// `[cluster] max_takeovers`, when not the default.
    pub max_takeovers: Option<u32>,
    /// The database's URL, when not the test database's own (through a proxy, say).
    pub database_url: Option<String>,
    /// Further edits of the configuration file.
    pub edit: Option<fn(String) -> String>,
    /// The service's binary, when not this build's (a previous release's, say).
    pub binary: Option<String>,
}

/// The admin token of replicas started with [`Options::auth`].
pub const ADMIN_TOKEN: &str = "replicas-admin-token";

/// [`replica`] as `options` say.
pub async fn replica_on(
    dir: &Path,
    llm: &FakeOpenAi,
    database: &TestDatabase,
    key: &SecretKey,
    id: &str,
    options: &Options,
) -> Service {
    let dir = dir.join(id);
    let mut auth = match options.auth {
        true => format!("[auth]\nrequired = true\nadmin_token = \"{ADMIN_TOKEN}\"\n\n"),
        false => String::new(),
    };
    if options.max_concurrent_runs > 0 {
        auth.push_str(&format!(
            "[limits]\nmax_concurrent_runs = {}\n\n",
            options.max_concurrent_runs
        ));
    }
    if options.a2a {
        auth.push_str("[a2a]\nenabled = true\n\n");
    }
    auth.push_str("[runner]\n");
    std::fs::create_dir_all(&dir).unwrap();
    let mut nats = match &options.bus {
        Bus::Database => String::new(),
        Bus::Nats { url, prefix } => {
            format!("nats_url = \"{url}\"\nsubject_prefix = \"{prefix}\"\n")
        }
    };
    if let Some(max) = options.max_takeovers {
        nats.push_str(&format!("max_takeovers = {max}\n"));
    }
    let url = options
        .database_url
        .clone()
        .unwrap_or_else(|| database.url());
    let edit = options.edit.unwrap_or(|config| config);
    let binary = options
        .binary
        .clone()
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-runner").to_owned());
    spawn_binary_edited(&binary, &dir, llm, None, options.metrics, |config| {
        edit(on_postgres(config, &dir, &url, Some(key)))
            .replacen(
                "[cluster]\n",
                &format!("[cluster]\nreplica_id = \"{id}\"\n{nats}"),
                1,
            )
            .replacen("[runner]\n", &auth, 1)
            .replacen(
                "client_tool_timeout_secs = 2\n",
                &format!(
                    "client_tool_timeout_secs = {}\n",
                    options.client_tool_timeout_secs.unwrap_or(2)
                ),
                1,
            )
    })
    .await
}

pub fn slow(pieces: usize, delay_ms: u64) -> Reply {
    Reply::Slow {
        text: vec!["tick "; pieces],
        delay_ms,
    }
}

/// The stream of `message_id` on `service` after `after_seq`.
pub async fn attach(
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

/// A tool the caller runs itself: the run asks for its outputs.
pub fn order_lookup() -> pb::ClientTool {
    pb::ClientTool {
        name: "lookup_order".into(),
        description: "Look up an order in the caller's system".into(),
        parameters_schema: None,
        require_approval: false,
    }
}

/// The model's turn that calls the caller's [`order_lookup`] (call id `cli`).
pub fn calls_order_lookup() -> Reply {
    Reply::calls(
        &[],
        vec![crate::support::ScriptedCall::new(
            "cli",
            "lookup_order",
            &["{\"order_id\": \"A1\"}"],
        )],
        (1, 1),
    )
}

/// Starts a run of `query` on `service` with the caller's [`order_lookup`] tool; returns
/// its stream and its events up to the run's ask for the tool's output.
pub async fn started_asking(
    service: &Service,
    query: &str,
) -> (tonic::Streaming<pb::RunEvent>, Vec<pb::RunEvent>) {
    let mut request = super::run_request(query, &[]);
    request.client_tools.push(order_lookup());
    let mut stream = client(service)
        .await
        .run(request)
        .await
        .unwrap()
        .into_inner();
    let seen = read_until(&mut stream, |e| {
        matches!(e.event, Some(pb::run_event::Event::ToolCallsRequired(_)))
    })
    .await;
    (stream, seen)
}

/// The caller's output `shipped` for call `call` of `message_id`.
pub fn shipped(message_id: &str, call: &str) -> pb::SubmitToolOutputsRequest {
    pb::SubmitToolOutputsRequest {
        message_id: message_id.to_owned(),
        outputs: vec![pb::ToolOutput {
            tool_call_id: call.into(),
            output: "shipped".into(),
            error: String::new(),
            message_id: String::new(),
        }],
    }
}

/// Approval of call `call` of `message_id`.
pub fn approved(message_id: &str, call: &str) -> pb::ApproveToolCallsRequest {
    pb::ApproveToolCallsRequest {
        message_id: message_id.to_owned(),
        decisions: vec![pb::ToolCallDecision {
            tool_call_id: call.into(),
            approve: true,
            reason: String::new(),
            message_id: String::new(),
        }],
    }
}

/// Reads `stream` up to and with the first event `last` picks; fails the test when the
/// stream ends before.
pub async fn read_until(
    stream: &mut tonic::Streaming<pb::RunEvent>,
    last: impl Fn(&pb::RunEvent) -> bool,
) -> Vec<pb::RunEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let done = last(&event);
        events.push(event);
        if done {
            return events;
        }
    }
    panic!("the stream ended before the event looked for: {events:?}");
}

/// Reads `stream` to its end, failing the test after `limit`.
pub async fn read_within(
    stream: &mut tonic::Streaming<pb::RunEvent>,
    limit: Duration,
) -> Vec<pb::RunEvent> {
    tokio::time::timeout(limit, read_rest(stream))
        .await
        .expect("the stream ends in time")
}

pub fn signal(service: &Service, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &service.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// A NATS server of the test's own, on a free port.
pub struct OwnNats {
    child: std::process::Child,
    pub url: String,
}

impl OwnNats {
    /// Starts `nats-server`, or `None` (skip) where it is not installed outside CI.
    #[allow(clippy::zombie_processes, reason = "killed and waited for on drop")]
    pub async fn start(port: u16) -> Option<Self> {
        let binary = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server"]
            .into_iter()
            .find(|path| Path::new(path).exists());
        let Some(binary) = binary else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "nats-server is needed in CI"
            );
            agent_runner::test_utils::say_skipped("nats-server is not installed");
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

/// `request` signed with `token` (an API key or the admin token).
pub fn signed<T>(request: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// Polls `check` every 20 ms until it holds; returns how long that took, failing after
/// five seconds.
pub async fn within<F, Fut>(what: &str, mut check: F) -> Duration
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

/// Two tests of `check`: over NATS (skipped where NATS cannot be reached outside CI) and
/// over the database's notifications, each taking its turn.
macro_rules! on_both_buses {
    ($check:ident: $over_nats:ident, $without_nats:ident) => {
        #[tokio::test]
        async fn $over_nats() {
            let _turn = TURN.lock().await;
            if let Some(bus) = nats_bus().await {
                $check(&bus).await;
            }
        }

        #[tokio::test]
        async fn $without_nats() {
            let _turn = TURN.lock().await;
            $check(&Bus::Database).await;
        }
    };
}
pub(crate) use on_both_buses;

/// Starts a run of `query` on `service`; returns its stream and the events up to its
/// first answer delta.
pub async fn started(
    service: &Service,
    query: &str,
) -> (tonic::Streaming<pb::RunEvent>, Vec<pb::RunEvent>) {
    let mut stream = client(service)
        .await
        .run(super::run_request(query, &[]))
        .await
        .unwrap()
        .into_inner();
    let seen = super::read_until_delta(&mut stream).await;
    (stream, seen)
}

/// The counter `name` (without `_total`) that the replica whose metrics listener is
/// `metrics` serves, 0 when absent; with the whole page, for a failure's message.
pub async fn counter(metrics: std::net::SocketAddr, name: &str) -> (f64, String) {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("{name}_total ");
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map_or(0.0, |value| value.parse().unwrap());
    (value, text)
}

/// How `stream` ends: the status it fails with, or `None` when it simply ends. Reads (and
/// drops) its events until then.
pub async fn ending_of<T>(stream: &mut tonic::Streaming<T>) -> Option<tonic::Status> {
    loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(status) => return Some(status),
        }
    }
}

/// Asserts that the stream `name` ended `UNAVAILABLE` (`ended` is how it ended), saying
/// the database cannot be reached.
pub fn says_the_database_cannot_be_reached(name: &str, ended: Option<tonic::Status>) {
    let status = ended.unwrap_or_else(|| panic!("the {name} stream ends with a status"));
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "{name}: {status:?}"
    );
    assert!(
        status.message().contains("the database cannot be reached"),
        "{name}: {}",
        status.message()
    );
}
