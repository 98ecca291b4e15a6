//! Takeover: three replicas on one database; runs started on the first are followed on the
//! other two, then the first is killed (`kill -9`) mid-answer. Reports how long after the
//! kill each run's first event from its new owner reached its follower, against the lease,
//! and the CPU an idle replica spends on heartbeats and sweeps.

use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::pb::run_event::Event;
use serde::Serialize;
use tonic::transport::Channel;

use crate::measure::{percentile, sorted};
use crate::processes::{cpu_time, start_mock, start_service_with, Process};
use crate::workload::bench_request;

/// Runs the dead replica holds when it is killed.
const RUNS: usize = 12;

/// The lease the replicas run with.
const LEASE_SECS: u64 = 5;

/// How long the idle replicas are watched.
const IDLE_FOR: Duration = Duration::from_secs(20);

/// What one takeover sitting measured.
#[derive(Debug, Clone, Serialize)]
pub struct TakeoverReport {
    pub runs: usize,
    pub lease_secs: u64,
    /// Runs whose followers saw them end normally after the takeover.
    pub finished: usize,
    /// From the kill to each run's first event from its new owner, in seconds.
    pub takeover_p50_s: f64,
    pub takeover_p99_s: f64,
    /// CPU an idle replica spends per second (heartbeats, sweeps, registry and command
    /// polls), in milliseconds.
    pub idle_cpu_ms_per_s: f64,
}

/// One sitting on fresh processes.
pub async fn run_takeover(service_env: &[(String, String)]) -> anyhow::Result<TakeoverReport> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-takeover-{}",
        uuid::Uuid::new_v4().simple()
    ));
    // 20 chunks 200 ms apart: every run is mid-answer when its replica dies.
    let mock = start_mock(Duration::ZERO, Duration::from_millis(200)).await?;
    let cluster = format!("[cluster]\nlease_secs = {LEASE_SECS}\n");
    let mut replicas: Vec<Process> = Vec::new();
    for replica in 0..3 {
        let dir = dir.join(format!("r{replica}"));
        std::fs::create_dir_all(&dir)?;
        let mut env = service_env.to_vec();
        env.push((
            "AGENT_RUNNER_REPLICA_ID".into(),
            format!("bench-t{replica}"),
        ));
        replicas.push(start_service_with(&dir, mock.addr, &env, &cluster).await?);
    }
    let idle_cpu_ms_per_s = idle_cpu(&replicas).await;
    let channels = connect(&replicas).await?;
    let mut followers = Vec::new();
    let mut owners = Vec::new();
    for index in 0..RUNS {
        let mut run = AgentServiceClient::new(channels[0].clone())
            .run(bench_request())
            .await?
            .into_inner();
        let id = first_delta(&mut run).await?;
        let follower = AgentServiceClient::new(channels[1 + index % 2].clone())
            .attach(pb::AttachRequest {
                message_id: id,
                after_seq: 0,
            })
            .await?
            .into_inner();
        owners.push(run);
        followers.push(follower);
    }
    replicas[0].kill();
    let killed = Instant::now();
    let watched = followers
        .into_iter()
        .map(|follower| went_on(follower, killed));
    let mut delays = Vec::new();
    let mut finished = 0;
    for (delay, ended) in futures::future::join_all(watched).await {
        delays.extend(delay);
        finished += usize::from(ended);
    }
    drop(owners);
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
    let delays = sorted(delays);
    Ok(TakeoverReport {
        runs: RUNS,
        lease_secs: LEASE_SECS,
        finished,
        takeover_p50_s: percentile(&delays, 50.0),
        takeover_p99_s: percentile(&delays, 99.0),
        idle_cpu_ms_per_s,
    })
}

/// CPU per second of each of `replicas` while nothing runs, averaged.
async fn idle_cpu(replicas: &[Process]) -> f64 {
    let before: Vec<Duration> = replicas.iter().map(|r| cpu_time(r.pid())).collect();
    tokio::time::sleep(IDLE_FOR).await;
    let spent: Duration = replicas
        .iter()
        .zip(before)
        .map(|(replica, before)| cpu_time(replica.pid()).saturating_sub(before))
        .sum();
    spent.as_secs_f64() * 1000.0 / IDLE_FOR.as_secs_f64() / replicas.len() as f64
}

async fn connect(replicas: &[Process]) -> anyhow::Result<Vec<Channel>> {
    let mut channels = Vec::new();
    for replica in replicas {
        channels.push(
            Channel::from_shared(format!("http://{}", replica.addr))?
                .connect()
                .await?,
        );
    }
    Ok(channels)
}

/// Reads `run` up to its first answer delta; returns the message id.
async fn first_delta(run: &mut tonic::Streaming<pb::RunEvent>) -> anyhow::Result<String> {
    while let Some(event) = run.message().await? {
        if matches!(event.event, Some(Event::Delta(_))) {
            return Ok(event.message_id);
        }
    }
    anyhow::bail!("the run ended before its answer")
}

/// When (after `killed`) the follower saw the new owner's first event, and whether the run
/// then ended normally.
async fn went_on(
    mut follower: tonic::Streaming<pb::RunEvent>,
    killed: Instant,
) -> (Option<f64>, bool) {
    let mut delay = None;
    let mut ended = false;
    let limit = Duration::from_secs(120);
    while let Ok(Ok(Some(event))) = tokio::time::timeout(limit, follower.message()).await {
        match event.event {
            Some(Event::RoundRestarted(_)) => {
                delay.get_or_insert(killed.elapsed().as_secs_f64());
            }
            Some(Event::End(_)) => ended = true,
            _ => {}
        }
    }
    (delay, ended)
}
