//! The `list-runs` case: how long one `ListRuns` page takes with 100 runs stored and with
//! 100,000, unfiltered (paging down through them) and asking for the runs waiting for the
//! caller. The ended runs are written straight into the store through its contract (as
//! many runs would leave them, in a fraction of the time); the waiting ones are real runs
//! of the service, waiting for a client tool's output.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner::domain::{
    Conversation, ConversationId, FinishReason, Message, MessageStatus, StrategyKind, Tenant,
};
use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::store::{
    Admission, Burst, DatabaseSettings, NewMessage, Record, SecretKey, Store, StoreSettings,
};
use serde::Serialize;
use tonic::transport::Channel;

use crate::database::BenchDatabase;
use crate::measure::{percentile, sorted};
use crate::processes::{start_mock, start_service};
use crate::workload::bench_request;

/// Runs waiting for the caller among the stored ones.
const WAITING: usize = 20;
/// Pages timed of each kind.
const PAGES: usize = 50;
/// Runs a conversation holds before the seeding starts another.
const TURNS: usize = 10;
/// Seeding tasks writing at once.
const WRITERS: usize = 32;

/// Time per page at one size.
#[derive(Debug, Serialize)]
pub struct ListingReport {
    /// `embedded` or `postgres`.
    pub store: &'static str,
    /// Runs stored.
    pub runs: usize,
    /// An unfiltered page of 100, paging down from the newest.
    pub page_p50_ms: f64,
    pub page_p99_ms: f64,
    /// The first page of the runs waiting for the caller.
    pub waiting_p50_ms: f64,
    pub waiting_p99_ms: f64,
    /// How many waiting runs the filter found (all [`WAITING`] of them, or the case failed).
    pub waiting_found: usize,
}

/// Measures 100 and 100,000 stored runs on the embedded store, or on a fresh PostgreSQL
/// database each when `admin_url` names a server.
pub async fn run_listing(admin_url: Option<&str>) -> anyhow::Result<Vec<ListingReport>> {
    let mut reports = Vec::new();
    for runs in [100, 100_000] {
        let dir = std::env::temp_dir().join(format!(
            "agent-runner-bench-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        let database = match admin_url {
            Some(url) => Some(BenchDatabase::create(url).await?),
            None => None,
        };
        let report = measure(&dir, database.as_ref().map(|d| d.url.as_str()), runs).await;
        if let Some(database) = database {
            database.drop_database().await?;
        }
        let _ = std::fs::remove_dir_all(&dir);
        reports.push(report?);
    }
    Ok(reports)
}

async fn measure(dir: &Path, url: Option<&str>, runs: usize) -> anyhow::Result<ListingReport> {
    let key = SecretKey::generate();
    let settings = match url {
        Some(url) => StoreSettings::Shared(DatabaseSettings {
            url: url.to_owned(),
            replica_id: "bench-seed".into(),
            lease: Duration::from_secs(10),
            notify: false,
            pool_size: 16,
            pool_wait: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
        }),
        None => StoreSettings::Embedded {
            dir: dir.join("data"),
            cache_bytes: 64 << 20,
        },
    };
    seed(&settings, &key, runs).await?;
    let mut env = Vec::new();
    if let Some(url) = url {
        env.push(("AGENT_RUNNER_DATABASE_URL".to_owned(), url.to_owned()));
        env.push(("AGENT_RUNNER_SECRET_KEY".to_owned(), key.to_base64()));
    }
    let mock = start_mock(Duration::ZERO, Duration::ZERO).await?;
    let service = start_service(dir, mock.addr, &env).await?;
    let channel = Channel::from_shared(format!("http://{}", service.addr))?
        .connect()
        .await?;
    let mut client = AgentServiceClient::new(channel);
    let _waiting = start_waiting(&mut client).await?;
    let pages = page_times(&mut client, pb::ListRunsRequest::default()).await?;
    let waiting_request = pb::ListRunsRequest {
        statuses: vec![pb::MessageStatus::WaitingToolOutputs.into()],
        ..Default::default()
    };
    let mut waiting_times = Vec::new();
    let mut waiting_found = 0;
    for _ in 0..PAGES {
        let started = Instant::now();
        let page = client
            .list_runs(waiting_request.clone())
            .await?
            .into_inner();
        waiting_times.push(started.elapsed().as_secs_f64() * 1000.0);
        waiting_found = page.runs.len();
    }
    let pages = sorted(pages);
    let waiting_times = sorted(waiting_times);
    Ok(ListingReport {
        store: if url.is_some() {
            "postgres"
        } else {
            "embedded"
        },
        runs,
        page_p50_ms: percentile(&pages, 50.0),
        page_p99_ms: percentile(&pages, 99.0),
        waiting_p50_ms: percentile(&waiting_times, 50.0),
        waiting_p99_ms: percentile(&waiting_times, 99.0),
        waiting_found,
    })
}

/// Times up to [`PAGES`] pages of 100, paging down from the newest (starting over at the
/// last page).
async fn page_times(
    client: &mut AgentServiceClient<Channel>,
    request: pb::ListRunsRequest,
) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::new();
    let mut token = String::new();
    while times.len() < PAGES {
        let started = Instant::now();
        let page = client
            .list_runs(pb::ListRunsRequest {
                page_token: token,
                ..request.clone()
            })
            .await?
            .into_inner();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(!page.runs.is_empty(), "a page of runs came back empty");
        token = page.next_page_token;
    }
    Ok(times)
}

/// Starts [`WAITING`] runs that call a tool the caller runs, and leaves them waiting for
/// its output; their streams are kept open.
async fn start_waiting(
    client: &mut AgentServiceClient<Channel>,
) -> anyhow::Result<Vec<tonic::Streaming<pb::RunEvent>>> {
    let mut streams = Vec::new();
    for _ in 0..WAITING {
        let mut request = bench_request();
        if let Some(agent) = request.agent.as_mut() {
            agent.tools.clear();
        }
        request.client_tools.push(pb::ClientTool {
            name: "current_time".into(),
            description: "The time, as the caller knows it".into(),
            parameters_schema: None,
            require_approval: false,
        });
        let mut stream = client.run(request).await?.into_inner();
        while let Some(event) = stream.message().await? {
            if matches!(
                event.event,
                Some(pb::run_event::Event::ToolCallsRequired(_))
            ) {
                break;
            }
        }
        streams.push(stream);
    }
    Ok(streams)
}

/// Writes `runs` ended runs of the default tenant, [`TURNS`] to a conversation.
async fn seed(settings: &StoreSettings, key: &SecretKey, runs: usize) -> anyhow::Result<()> {
    let store = Store::open(settings, key).await?;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = store.clone();
            let share = runs / WRITERS + usize::from(writer < runs % WRITERS);
            tokio::spawn(async move { seed_share(&store, share).await })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    store.stop(Duration::from_secs(10)).await;
    Ok(())
}

async fn seed_share(store: &Store, runs: usize) -> anyhow::Result<()> {
    let tenant = Tenant::default_tenant();
    let spec = serde_json::json!({});
    let mut conversation = ConversationId::new();
    for turn in 0..runs {
        let opening = (turn % TURNS == 0).then(|| {
            conversation = ConversationId::new();
            Conversation {
                id: conversation,
                tenant: tenant.clone(),
                user: String::new(),
                created_at: agent_runner::domain::now(),
            }
        });
        let mut message = Message::running(
            conversation,
            "What time is it?".into(),
            StrategyKind::FunctionCalling,
            "mock".into(),
            "bench-model".into(),
        );
        store
            .insert_message(NewMessage {
                tenant: &tenant,
                conversation: opening.as_ref(),
                message: &mut message,
                spec: &spec,
                idempotency: None,
                admission: Admission::default(),
            })
            .await?;
        message.status = MessageStatus::Completed;
        message.finish_reason = Some(FinishReason::Stop);
        message.answer = "It is noon.".into();
        message.iterations = 2;
        let burst = Burst {
            records: vec![Record::Message(message)],
            events: Vec::new(),
        };
        store.commit(&tenant, &store.fence(), &burst).await?;
    }
    Ok(())
}
