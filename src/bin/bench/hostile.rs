//! Hostile inputs against the real service, each on a fresh process: what the service
//! answers, and what memory (or `/metrics` size, or connection state) it is left with. The
//! figures behind the bounds in docs/security.md's limits table.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::tool_registry_client::ToolRegistryClient;
use serde::Serialize;
use serde_json::json;
use tonic::transport::Channel;

use crate::processes::{cpu_time, memory_kib, start_mock_with, start_service, Process};

/// One hostile input and what it left behind.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub input: String,
    /// The status or outcome the service answered.
    pub answer: String,
    pub rss_before_mib: f64,
    /// Peak resident memory (VmHWM) after the input.
    pub peak_mib: f64,
    pub rss_after_mib: f64,
    /// What else was measured.
    pub note: String,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the hostile cases (all, or those numbered in `only`, from 1), each on a fresh
/// service, handing each row to `done` as it is measured.
pub async fn run_hostile(only: &[usize], mut done: impl FnMut(&Row)) -> anyhow::Result<Vec<Row>> {
    let wanted = |n: usize| only.is_empty() || only.contains(&n);
    let mut rows = Vec::new();
    let mut keep = |row: Row| {
        done(&row);
        rows.push(row);
    };
    if wanted(1) {
        keep(fresh(instruction_bomb).await?);
    }
    if wanted(2) {
        keep(fresh(|s| pattern_document(s, 256, 150, 2)).await?);
    }
    if wanted(3) {
        keep(fresh(|s| pattern_document(s, 100, 20, 1000)).await?);
    }
    if wanted(4) {
        keep(fresh(model_names).await?);
    }
    if wanted(5) {
        keep(fresh(silent_connections).await?);
    }
    if wanted(6) {
        keep(fresh_with(&["--parallel-tools", "30000"], many_calls).await?);
    }
    Ok(rows)
}

async fn fresh<F, Fut>(case: F) -> anyhow::Result<Row>
where
    F: FnOnce(Service) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Row>>,
{
    fresh_with(&[], case).await
}

async fn fresh_with<F, Fut>(mock_args: &[&str], case: F) -> anyhow::Result<Row>
where
    F: FnOnce(Service) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Row>>,
{
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let service = Service::start(&dir, mock_args).await;
    let row = match service {
        Ok(service) => case(service).await,
        Err(err) => Err(err),
    };
    let _ = std::fs::remove_dir_all(&dir);
    row
}

/// The service, the scripted model it calls, and where its metrics are served.
pub struct Service {
    process: Process,
    _mock: Process,
    metrics: std::net::SocketAddr,
}

impl Service {
    async fn start(dir: &Path, mock_args: &[&str]) -> anyhow::Result<Self> {
        let mock = start_mock_with(Duration::ZERO, Duration::ZERO, mock_args).await?;
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let env = [(
            "AGENT_RUNNER_METRICS_LISTEN".to_owned(),
            metrics.to_string(),
        )];
        let process = start_service(dir, mock.addr, &env).await?;
        Ok(Self {
            process,
            _mock: mock,
            metrics,
        })
    }

    async fn channel(&self) -> anyhow::Result<Channel> {
        Ok(
            Channel::from_shared(format!("http://{}", self.process.addr))?
                .connect()
                .await?,
        )
    }

    fn memory(&self) -> (f64, f64) {
        let (rss, peak) = memory_kib(self.process.pid());
        (mib(rss), mib(peak))
    }
}

fn run_request(query: &str, model: &str) -> pb::RunRequest {
    pb::RunRequest {
        query: query.into(),
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: "mock".into(),
                name: model.into(),
                ..Default::default()
            }),
            tools: vec![pb::AgentTool {
                provider: "time".into(),
                name: "current_time".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A status's code and the start of its message.
fn said(status: &tonic::Status) -> String {
    let message: String = status.message().chars().take(110).collect();
    format!("{:?}: {message}", status.code())
}

/// Ten `{{v}}` in the instruction, `v` of 1 MB: 10 MB of instruction from a 1 MB request.
async fn instruction_bomb(service: Service) -> anyhow::Result<Row> {
    let (before, _) = service.memory();
    let mut request = run_request("hi", "mock");
    if let Some(agent) = request.agent.as_mut() {
        agent.instruction = "{{v}}".repeat(10);
    }
    request.inputs.insert("v".into(), "v".repeat(1_000_000));
    let answer = match AgentServiceClient::new(service.channel().await?)
        .max_decoding_message_size(64 << 20)
        .run(request)
        .await
    {
        Ok(_) => "accepted".to_owned(),
        Err(status) => said(&status),
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, peak) = service.memory();
    Ok(Row {
        input: "Run: instruction of ten {{v}}, v of 1 MB".into(),
        answer,
        rss_before_mib: before,
        peak_mib: peak,
        rss_after_mib: after,
        note: String::new(),
    })
}

/// `operations` operations sharing one body schema of `patterns` distinct patterns.
async fn pattern_document(
    service: Service,
    operations: usize,
    patterns: usize,
    repeat: usize,
) -> anyhow::Result<Row> {
    let properties: serde_json::Map<String, serde_json::Value> = (0..patterns)
        .map(|i| {
            let pattern = format!("^\\w{{{}}}$", repeat + i);
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": pattern}),
            )
        })
        .collect();
    let body =
        json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S"}}}});
    let paths: serde_json::Map<String, serde_json::Value> = (0..operations)
        .map(|i| {
            let post = json!({"operationId": format!("op_{i}"), "requestBody": body});
            (format!("/op{i}"), json!({ "post": post }))
        })
        .collect();
    let spec = json!({"openapi": "3.0.0", "paths": paths,
        "components": {"schemas": {"S": {"type": "object", "properties": properties}}}})
    .to_string();
    let size = spec.len();
    let (before, _) = service.memory();
    let request = pb::CreateProviderRequest {
        provider: Some(pb::ToolProvider {
            name: "patterns".into(),
            source: Some(pb::ProviderSource {
                source: Some(pb::provider_source::Source::Openapi(pb::OpenApiSource {
                    spec,
                    server_url: "https://api.example.com".into(),
                })),
            }),
            ..Default::default()
        }),
    };
    let started = Instant::now();
    let answer = match ToolRegistryClient::new(service.channel().await?)
        .create_provider(request)
        .await
    {
        Ok(_) => "created".to_owned(),
        Err(status) => said(&status),
    };
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, peak) = service.memory();
    Ok(Row {
        input: format!(
            "CreateProvider: OpenAPI document of {} KB, {operations} operations sharing {patterns} patterns ({} once inlined{})",
            size / 1000,
            operations * patterns,
            if repeat >= 1000 { ", each about 120 KB compiled" } else { "" }
        ),
        answer,
        rss_before_mib: before,
        peak_mib: peak,
        rss_after_mib: after,
        note: format!("answered in {:.2} s", took.as_secs_f64()),
    })
}

/// 1,000 runs, each naming a random 200-byte model: `/metrics` before and after.
async fn model_names(service: Service) -> anyhow::Result<Row> {
    let scrape = || async {
        let response = reqwest::get(format!("http://{}/metrics", service.metrics)).await?;
        anyhow::Ok(response.text().await?.len())
    };
    let channel = service.channel().await?;
    let warm = run_request("warm", "mock");
    drain(AgentServiceClient::new(channel.clone()), warm).await;
    let before_bytes = scrape().await?;
    let (before, _) = service.memory();
    let mut failed = 0;
    for batch in 0..20 {
        let runs = (0..50).map(|i| {
            let name =
                format!("model-{batch}-{i}-{}", uuid::Uuid::new_v4().simple()) + &"x".repeat(160);
            drain(
                AgentServiceClient::new(channel.clone()),
                run_request("hi", &name),
            )
        });
        failed += futures::future::join_all(runs)
            .await
            .into_iter()
            .filter(|ok| !ok)
            .count();
    }
    let after_bytes = scrape().await?;
    let (after, peak) = service.memory();
    Ok(Row {
        input: "1,000 runs, each naming a random 200-byte model".into(),
        answer: format!("{} completed", 1000 - failed),
        rss_before_mib: before,
        peak_mib: peak,
        rss_after_mib: after,
        note: format!("/metrics {before_bytes} bytes after one run, {after_bytes} after 1,000"),
    })
}

/// Runs `request` to its end; whether it completed.
async fn drain(mut client: AgentServiceClient<Channel>, request: pb::RunRequest) -> bool {
    let Ok(stream) = client.run(request).await else {
        return false;
    };
    let mut stream = stream.into_inner();
    let mut completed = false;
    while let Ok(Some(event)) = stream.message().await {
        completed = matches!(event.event, Some(pb::run_event::Event::End(_)));
    }
    completed
}

/// 1,100 connections that never speak: a run beside them, and how many are closed 11 s on.
async fn silent_connections(service: Service) -> anyhow::Result<Row> {
    let (before, _) = service.memory();
    let mut silent = Vec::new();
    for _ in 0..1100 {
        silent.push(tokio::net::TcpStream::connect(service.process.addr).await?);
    }
    let started = Instant::now();
    let completed = drain(
        AgentServiceClient::new(service.channel().await?),
        run_request("beside them", "mock"),
    )
    .await;
    let run_ms = started.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut closed = 0;
    for stream in &silent {
        let mut buf = [0u8; 4096];
        // Whatever the server sent is read first; then a closed socket reads 0 bytes and
        // an open one would block.
        loop {
            match stream.try_read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    let (after, peak) = service.memory();
    Ok(Row {
        input: "1,100 connections that never send a byte".into(),
        answer: if completed {
            format!("a run beside them completed in {run_ms:.0} ms")
        } else {
            "a run beside them failed".into()
        },
        rss_before_mib: before,
        peak_mib: peak,
        rss_after_mib: after,
        note: format!("{closed} of 1100 closed by the service 11 s later"),
    })
}

/// One run whose model calls a tool 30,000 times in one round.
async fn many_calls(service: Service) -> anyhow::Result<Row> {
    let (before, _) = service.memory();
    let cpu_before = cpu_time(service.process.pid());
    let started = Instant::now();
    let completed = drain(
        AgentServiceClient::new(service.channel().await?).max_decoding_message_size(64 << 20),
        run_request("call away", "mock"),
    )
    .await;
    let took = started.elapsed();
    let cpu = cpu_time(service.process.pid()).saturating_sub(cpu_before);
    let (after, peak) = service.memory();
    Ok(Row {
        input: "a round of 30,000 tool calls".into(),
        answer: if completed {
            format!("completed in {:.1} s", took.as_secs_f64())
        } else {
            format!("failed after {:.1} s", took.as_secs_f64())
        },
        rss_before_mib: before,
        peak_mib: peak,
        rss_after_mib: after,
        note: format!("{:.1} s of CPU in the service", cpu.as_secs_f64()),
    })
}
