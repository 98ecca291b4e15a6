//! The real service on an ephemeral port, over a temporary data directory, with clients.

use std::net::SocketAddr;
use std::path::Path;

use agent_runner::app::{self, AppError, Extensions};
use agent_runner::config::Config;
use agent_runner::pb;
use agent_runner::pb::agent_registry_client::AgentRegistryClient;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::tool_registry_client::ToolRegistryClient;
use agent_runner::store::Store;
use agent_runner::test_utils::testing_provider;

use super::postgres::TestDatabase;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// Whether in-process servers keep their records in PostgreSQL (`AGENT_RUNNER_TEST_STORE=
/// postgres`): how CI runs the suites that matter most on both backends.
pub fn on_postgres() -> bool {
    std::env::var("AGENT_RUNNER_TEST_STORE").as_deref() == Ok("postgres")
}

/// The database and key of each data directory a server used on PostgreSQL: a restart on
/// the same directory finds its records. A database goes once its directory is gone.
static DATABASES: std::sync::Mutex<
    Vec<(std::path::PathBuf, std::sync::Arc<TestDatabase>, String)>,
> = std::sync::Mutex::new(Vec::new());

/// Points `config` at its data directory's database (a new one the first time), with that
/// database's sealing key, as a shared database needs.
async fn use_database(config: &mut Config) -> std::sync::Arc<TestDatabase> {
    let dir = config.server.data_dir.clone();
    let known = {
        let mut databases = DATABASES.lock().unwrap();
        databases.retain(|(dir, _, _)| dir.exists());
        databases
            .iter()
            .find(|(known, _, _)| *known == dir)
            .map(|(_, database, key)| (std::sync::Arc::clone(database), key.clone()))
    };
    let (database, key) = match known {
        Some(known) => known,
        None => {
            let database = TestDatabase::create()
                .await
                .expect("AGENT_RUNNER_TEST_STORE=postgres needs a reachable PostgreSQL");
            let database = std::sync::Arc::new(database);
            let key = agent_runner::store::SecretKey::generate().to_base64();
            std::fs::create_dir_all(&dir).unwrap();
            DATABASES
                .lock()
                .unwrap()
                .push((dir, std::sync::Arc::clone(&database), key.clone()));
            (database, key)
        }
    };
    config.store.database_url = Some(agent_runner::llm::Secret::new(database.url()));
    config.store.pool_size = 3;
    config.server.secret_key = Some(agent_runner::llm::Secret::new(key));
    database
}

/// Provider name of the scripted LLM in the server's configuration.
pub const PROVIDER: &str = "scripted";
/// A model with streamed tool calls.
pub const STREAMING_MODEL: &str = "fc-model";
/// A model that cannot stream tool calls, so the runner uses the non-streaming path.
pub const BLOCKING_MODEL: &str = "blocking-model";
/// A model configured with no features at all, so auto-selection picks chain of thought.
pub const PLAIN_MODEL: &str = "plain-model";
/// A model with a 400-token context window, for history budget tests.
pub const SMALL_WINDOW_MODEL: &str = "small-window";
/// A model that can see images.
pub const VISION_MODEL: &str = "vision-model";
/// A model with native structured output.
pub const STRUCTURED_MODEL: &str = "structured-model";
/// The same LLM server behind a one-second first-byte timeout, without retries.
pub const IMPATIENT_PROVIDER: &str = "impatient";
/// The same LLM server, retrying after waits of up to a minute.
pub const PATIENT_PROVIDER: &str = "patient";
/// The same LLM server with one call in flight at a time and a one-second queue.
pub const NARROW_PROVIDER: &str = "narrow";
/// A provider nobody listens for: every call fails to connect.
pub const DOWN_PROVIDER: &str = "down";

pub struct TestServer {
    pub addr: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// The server's store, for tests that make it fail.
    pub store: Store,
    _temp: Option<tempfile::TempDir>,
    /// The database of a server on PostgreSQL (see [`on_postgres`]).
    _database: Option<std::sync::Arc<TestDatabase>>,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), AppError>>>,
}

/// Configuration pointing the `scripted` provider at `llm_base_url`; prices are 1 and 2
/// per million tokens so tests can check cost arithmetic.
pub fn config(llm_base_url: &str, data_dir: &Path) -> Config {
    Config::from_toml(&config_toml(llm_base_url, data_dir))
        .unwrap()
        .validated()
        .unwrap()
}

/// The TOML text of [`config`], for tests that start the real binary.
pub fn config_toml(llm_base_url: &str, data_dir: &Path) -> String {
    format!(
        r#"
        [server]
        data_dir = "{dir}"
        shutdown_grace_secs = 5

        [store]
        write_timeout_secs = 1

        [cluster]
        lease_secs = 2

        [runner]
        tool_timeout_secs = 5
        client_tool_timeout_secs = 2
        mcp_timeout_secs = 2

        [outbound]
        allow = ["127.0.0.1"]

        [providers.{PROVIDER}]
        base_url = "{llm_base_url}"
        api_key = "test-key"
        first_byte_timeout_secs = 5
        retry_base_ms = 10
        retry_max_delay_ms = 2000

        [[providers.{PROVIDER}.models]]
        name = "{STREAMING_MODEL}"
        context_window = 8192
        input_price = 1
        output_price = 2
        currency = "USD"

        [[providers.{PROVIDER}.models]]
        name = "{BLOCKING_MODEL}"
        features = ["tool-call"]

        [[providers.{PROVIDER}.models]]
        name = "{PLAIN_MODEL}"
        features = []

        [[providers.{PROVIDER}.models]]
        name = "{SMALL_WINDOW_MODEL}"
        context_window = 400

        [[providers.{PROVIDER}.models]]
        name = "{VISION_MODEL}"
        features = ["tool-call", "multi-tool-call", "stream-tool-call", "vision"]

        [[providers.{PROVIDER}.models]]
        name = "{STRUCTURED_MODEL}"
        features = ["tool-call", "multi-tool-call", "stream-tool-call", "structured-output"]

        [providers.{IMPATIENT_PROVIDER}]
        base_url = "{llm_base_url}"
        first_byte_timeout_secs = 1
        max_retries = 0

        [providers.{PATIENT_PROVIDER}]
        base_url = "{llm_base_url}"
        retry_max_delay_ms = 60000

        [providers.{NARROW_PROVIDER}]
        base_url = "{llm_base_url}"
        max_concurrent_requests = 1
        queue_timeout_secs = 1
        max_retries = 0

        [providers.{DOWN_PROVIDER}]
        base_url = "http://127.0.0.1:9/v1"
        connect_timeout_secs = 1
        max_retries = 1
        retry_base_ms = 10

        [[providers.{DOWN_PROVIDER}.models]]
        name = "{STREAMING_MODEL}"
        input_price = 100
        output_price = 100
        "#,
        dir = data_dir.display(),
    )
}

impl TestServer {
    /// Starts on a fresh data directory.
    pub async fn start(llm_base_url: &str) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_owned();
        let mut server = Self::start_in(llm_base_url, &dir).await;
        server._temp = Some(temp);
        server
    }

    /// Starts on `data_dir`, which outlives the server (for restart tests).
    pub async fn start_in(llm_base_url: &str, data_dir: &Path) -> Self {
        Self::start_with(config(llm_base_url, data_dir)).await
    }

    /// Starts on a fresh data directory with the test configuration changed by `edit`.
    pub async fn start_edited(llm_base_url: &str, edit: impl FnOnce(&mut Config)) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let mut config = config(llm_base_url, temp.path());
        edit(&mut config);
        let mut server = Self::start_with(config).await;
        server._temp = Some(temp);
        server
    }

    /// Starts with `config`, on a database of its own when the suite runs on PostgreSQL
    /// (see [`on_postgres`]).
    pub async fn start_with(mut config: Config) -> Self {
        let database = match on_postgres() {
            true => Some(use_database(&mut config).await),
            false => None,
        };
        // Loaded here, once per test process, rather than inside `serve` while a test's
        // first request (and its deadline) waits on the accepted connection.
        tokio::task::spawn_blocking(agent_runner::llm::Tokenizer::load_all)
            .await
            .unwrap();
        let store = app::open_store(&config).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics_addr = metrics.local_addr().unwrap();
        let extensions = Extensions {
            tool_providers: vec![testing_provider().unwrap()],
            model_providers: vec![],
            metrics_listener: Some(metrics),
            store: Some(store.clone()),
        };
        let handle = tokio::spawn(app::serve(listener, config, extensions, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            metrics_addr,
            store,
            _temp: None,
            _database: database,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Keeps `temp` (the data directory of [`Self::start_with`]) until the server is gone.
    pub fn keeping(mut self, temp: tempfile::TempDir) -> Self {
        self._temp = Some(temp);
        self
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    pub async fn agents(&self) -> AgentServiceClient<Channel> {
        AgentServiceClient::new(self.channel().await)
    }

    pub async fn library(&self) -> AgentRegistryClient<Channel> {
        AgentRegistryClient::new(self.channel().await)
    }

    pub async fn tools(&self) -> ToolRegistryClient<Channel> {
        ToolRegistryClient::new(self.channel().await)
    }

    /// Asks the server to stop without waiting for it.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Stops gracefully and waits for the server to release the data directory.
    pub async fn stop(mut self) -> Option<tempfile::TempDir> {
        self.shutdown().await;
        self._temp.take()
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            handle.await.unwrap().unwrap();
        }
    }
}

/// A run request for the scripted streaming model with the given tools.
pub fn run_request(query: &str, tools: &[(&str, &str)]) -> pb::RunRequest {
    pb::RunRequest {
        query: query.to_owned(),
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: PROVIDER.to_owned(),
                name: STREAMING_MODEL.to_owned(),
                ..Default::default()
            }),
            instruction: "You are a helpful assistant.".to_owned(),
            tools: tools
                .iter()
                .map(|(provider, name)| pb::AgentTool {
                    provider: (*provider).to_owned(),
                    name: (*name).to_owned(),
                    parameters: None,
                    require_approval: false,
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs `request` and collects every event until the stream ends.
pub async fn run_to_end(
    client: &mut AgentServiceClient<Channel>,
    request: pb::RunRequest,
) -> Vec<pb::RunEvent> {
    let mut stream = client.run(request).await.unwrap().into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    events
}

/// Every stored event of a message, read back with `Attach` from the start.
pub async fn replayed(client: &mut Agents, message_id: &str) -> Vec<pb::RunEvent> {
    let request = pb::AttachRequest {
        message_id: message_id.to_owned(),
        after_seq: 0,
    };
    let mut stream = client.attach(request).await.unwrap().into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    events
}

/// The payload of each event.
pub fn kinds(events: &[pb::RunEvent]) -> Vec<&pb::run_event::Event> {
    events.iter().filter_map(|e| e.event.as_ref()).collect()
}

/// The concatenated answer deltas.
pub fn streamed_text(events: &[pb::RunEvent]) -> String {
    kinds(events)
        .into_iter()
        .filter_map(|e| match e {
            pb::run_event::Event::Delta(delta) => Some(delta.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The stream's `end` event, which must be the last.
pub fn end_of(events: &[pb::RunEvent]) -> pb::MessageEnd {
    match events.last().and_then(|e| e.event.clone()) {
        Some(pb::run_event::Event::End(end)) => end,
        other => panic!("the last event is not `end`: {other:?}"),
    }
}

/// The last snapshot of each thought, by position.
pub fn final_thoughts(events: &[pb::RunEvent]) -> Vec<pb::AgentThought> {
    let mut thoughts: Vec<pb::AgentThought> = Vec::new();
    for event in kinds(events) {
        if let pb::run_event::Event::Thought(thought) = event {
            match thoughts.iter_mut().find(|t| t.position == thought.position) {
                Some(slot) => *slot = thought.clone(),
                None => thoughts.push(thought.clone()),
            }
        }
    }
    thoughts
}

/// The generated client of the agent service.
pub type Agents = AgentServiceClient<Channel>;

/// `GetMessage`, unwrapped.
pub async fn message(client: &mut Agents, message_id: impl Into<String>) -> pb::Message {
    client
        .get_message(pb::GetMessageRequest {
            message_id: message_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// `ListThoughts`, unwrapped.
pub async fn thoughts(client: &mut Agents, message_id: impl Into<String>) -> Vec<pb::AgentThought> {
    client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id: message_id.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .thoughts
}

/// The message's status once it is no longer RUNNING (polled for up to two seconds).
pub async fn settled_status(client: &mut Agents, message_id: &str) -> i32 {
    let mut status = pb::MessageStatus::Running as i32;
    for _ in 0..100 {
        status = message(client, message_id).await.status;
        if status != pb::MessageStatus::Running as i32 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    status
}

/// The stream's `error` event, which must be the last.
/// The first `file` event of a run.
pub fn first_file(events: &[pb::RunEvent]) -> pb::MessageFile {
    events
        .iter()
        .find_map(|e| match &e.event {
            Some(pb::run_event::Event::File(file)) => Some(file.clone()),
            _ => None,
        })
        .expect("a file event")
}

pub fn last_error(events: &[pb::RunEvent]) -> pb::RunError {
    match events.last().and_then(|e| e.event.clone()) {
        Some(pb::run_event::Event::Error(error)) => error,
        other => panic!("the last event is not an error: {other:?}"),
    }
}

/// Reads events up to and including the first answer delta.
pub async fn read_until_delta(stream: &mut tonic::Streaming<pb::RunEvent>) -> Vec<pb::RunEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let delta = matches!(event.event, Some(pb::run_event::Event::Delta(_)));
        events.push(event);
        if delta {
            return events;
        }
    }
    panic!("the stream ended before any delta: {events:?}");
}

/// Reads the rest of a stream.
pub async fn read_rest(stream: &mut tonic::Streaming<pb::RunEvent>) -> Vec<pb::RunEvent> {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    events
}

/// The embedded store a server keeps under its data directory `dir`, opened as the server
/// opens it (with the key file it made there).
pub async fn open_data_dir(dir: &Path) -> Store {
    let key =
        agent_runner::store::SecretKey::load_or_create(&dir.join(agent_runner::config::KEY_FILE))
            .unwrap();
    let settings = agent_runner::store::StoreSettings::Embedded {
        dir: dir.to_owned(),
        cache_bytes: 16 * 1024 * 1024,
    };
    Store::open(&settings, &key).await.unwrap()
}
