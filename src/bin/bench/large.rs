//! Large answers: what memory and disk a run costs per byte the model writes, and whether
//! memory comes back once the runs are over.
//!
//! Ten runs one after another, each answering 2 MB (2000 chunks of 1000 bytes, just under
//! the default answer limit); then the service idles for two seconds before its resident
//! memory and its data directory are measured.

use std::path::Path;
use std::time::Duration;

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::run_event::Event;
use serde::Serialize;
use tonic::transport::Channel;

use crate::processes::{directory_bytes, memory_kib, start_mock_with, start_service};

const RUNS: usize = 10;
const CHUNKS: usize = 2000;
const CHUNK_BYTES: usize = 1000;

/// What the case measured.
#[derive(Debug, Clone, Serialize)]
pub struct LargeReport {
    pub case: &'static str,
    pub runs: usize,
    pub errors: usize,
    /// Answer bytes over all runs.
    pub answer_mib: f64,
    pub idle_rss_mib: f64,
    pub peak_rss_mib: f64,
    /// Resident memory two seconds after the last run.
    pub rss_after_mib: f64,
    /// The data directory's size over the answer bytes written.
    pub disk_per_answer_byte: f64,
}

/// Runs the case from fresh processes.
pub async fn run_large(service_env: &[(String, String)]) -> anyhow::Result<LargeReport> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let report = measure(&dir, service_env).await;
    let _ = std::fs::remove_dir_all(&dir);
    report
}

async fn measure(dir: &Path, service_env: &[(String, String)]) -> anyhow::Result<LargeReport> {
    let chunks = CHUNKS.to_string();
    let bytes = CHUNK_BYTES.to_string();
    let mock = start_mock_with(
        Duration::ZERO,
        Duration::ZERO,
        &["--answer-chunks", &chunks, "--chunk-bytes", &bytes],
    )
    .await?;
    let service = start_service(dir, mock.addr, service_env).await?;
    let channel = Channel::from_shared(format!("http://{}", service.addr))?
        .connect()
        .await?;
    let (idle, _) = memory_kib(service.pid());
    let mut errors = 0;
    let mut answered = 0usize;
    for _ in 0..RUNS {
        match run(AgentServiceClient::new(channel.clone())).await {
            Some(bytes) => answered += bytes,
            None => errors += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, peak) = memory_kib(service.pid());
    let disk = directory_bytes(&dir.join("data"));
    Ok(LargeReport {
        case: "large",
        runs: RUNS,
        errors,
        answer_mib: answered as f64 / (1024.0 * 1024.0),
        idle_rss_mib: idle as f64 / 1024.0,
        peak_rss_mib: peak as f64 / 1024.0,
        rss_after_mib: after as f64 / 1024.0,
        disk_per_answer_byte: disk as f64 / answered.max(1) as f64,
    })
}

/// One run; the answer's length, or `None` when it did not complete.
async fn run(mut client: AgentServiceClient<Channel>) -> Option<usize> {
    let request = pb::RunRequest {
        query: "Write a long answer.".into(),
        agent: Some(pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: "mock".into(),
                name: "bench-model".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut stream = client.run(request).await.ok()?.into_inner();
    let mut answer = None;
    while let Ok(Some(event)) = stream.message().await {
        if let Some(Event::End(end)) = event.event {
            answer = Some(end.answer.len());
        }
    }
    answer
}
