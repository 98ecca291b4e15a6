//! Several replicas on one database: each run starts on one replica and is followed live,
//! from its first event, on the next one. Reports the live lag (when the follower got an
//! event after the owner's client got it), the CPU per run of all replicas together, and
//! the database's CPU and transactions per run. With one replica the follower is on the
//! same process: the same followers, so the CPU figures compare. Three replicas with each
//! run followed on its owner split the difference: what relaying costs, what more
//! processes cost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use serde::Serialize;
use tonic::transport::Channel;

use crate::measure::{bench_request, percentile, sorted};
use crate::processes::{cpu_time, start_mock, start_service, Process};

/// A replica case as the bench's presets name it.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    replicas: usize,
    concurrency: usize,
    runs: usize,
    /// The slow model (1 s to the first token, 50 ms per chunk) rather than the fast one.
    slow: bool,
    /// Each run followed on its own replica rather than the next.
    followers_on_owner: bool,
}

impl Shape {
    /// `runs` runs, `concurrency` at a time, over `replicas` replicas, with the fast model.
    pub fn new(replicas: usize, concurrency: usize, runs: usize) -> Self {
        Self {
            replicas,
            concurrency,
            runs,
            slow: false,
            followers_on_owner: false,
        }
    }

    /// With the slow model.
    pub fn slow(self) -> Self {
        Self { slow: true, ..self }
    }

    /// Each run followed on the replica that holds it: what more processes cost, without
    /// relaying.
    pub fn followers_on_owner(self) -> Self {
        Self {
            followers_on_owner: true,
            ..self
        }
    }

    /// The case, with the service's environment.
    pub fn case(&self, service_env: Vec<(String, String)>) -> ReplicaCase {
        let suffix = if self.followers_on_owner {
            "-followed-on-owner"
        } else {
            ""
        };
        ReplicaCase {
            name: format!("replicas{}-c{}{suffix}", self.replicas, self.concurrency),
            replicas: self.replicas,
            concurrency: self.concurrency,
            runs: self.runs,
            ttft: if self.slow {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            },
            chunk_delay: Duration::from_millis(if self.slow { 50 } else { 5 }),
            followers_on_owner: self.followers_on_owner,
            service_env,
        }
    }
}

/// A workload over replicas.
pub struct ReplicaCase {
    pub name: String,
    pub replicas: usize,
    pub concurrency: usize,
    pub runs: usize,
    pub ttft: Duration,
    pub chunk_delay: Duration,
    /// Whether each run is followed on its own replica rather than the next.
    pub followers_on_owner: bool,
    /// The service's environment: the database, the key, NATS when used.
    pub service_env: Vec<(String, String)>,
}

/// What a replica case measured; times in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaReport {
    pub case: String,
    pub replicas: usize,
    pub bus: String,
    pub concurrency: usize,
    pub runs: usize,
    pub errors: usize,
    /// `Run`s and `Attach`es refused `UNAVAILABLE` (all connections to the database busy)
    /// and tried again.
    pub retried: usize,
    pub events_followed: usize,
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub cpu_per_run_ms: f64,
    pub database_cpu_per_run_ms: f64,
    pub database_commits_per_run: f64,
}

/// Runs one replica case from fresh processes.
pub async fn run_replicas(case: &ReplicaCase, database_url: &str) -> anyhow::Result<ReplicaReport> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-replicas-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let mock = start_mock(case.ttft, case.chunk_delay).await?;
    let mut services: Vec<Process> = Vec::new();
    for replica in 0..case.replicas {
        let dir = dir.join(format!("r{replica}"));
        std::fs::create_dir_all(&dir)?;
        let mut env = case.service_env.clone();
        env.push((
            "AGENT_RUNNER_REPLICA_ID".into(),
            format!("bench-r{replica}"),
        ));
        services.push(start_service(&dir, mock.addr, &env).await?);
    }
    // A hundred streams per connection, as the other cases: per replica, its share.
    let per_replica = (2 * case.concurrency).div_ceil(100).max(1);
    let mut connections: Vec<Vec<Channel>> = Vec::new();
    for service in &services {
        let mut own = Vec::new();
        for _ in 0..per_replica {
            own.push(
                Channel::from_shared(format!("http://{}", service.addr))?
                    .connect()
                    .await?,
            );
        }
        connections.push(own);
    }
    let channels: Vec<Channel> = connections.iter().map(|own| own[0].clone()).collect();
    // Warm up every replica's pool and caches.
    for channel in &channels {
        let mut client = AgentServiceClient::new(channel.clone());
        let mut stream = client.run(bench_request()).await?.into_inner();
        while stream.message().await?.is_some() {}
    }
    let pids: Vec<u32> = services.iter().map(Process::pid).collect();
    let cpu_before: Duration = pids.iter().map(|pid| cpu_time(*pid)).sum();
    let retried_before = RETRIED.load(Ordering::SeqCst);
    let (db_cpu_before, db_commits_before) = crate::database::spent(database_url).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(connections);
    let workers = (0..case.concurrency).map(|worker| {
        let (next, connections, runs) = (Arc::clone(&next), Arc::clone(&connections), case.runs);
        let elsewhere = usize::from(!case.followers_on_owner);
        tokio::spawn(async move {
            let mut lags = Vec::new();
            let mut errors = 0;
            loop {
                let run = next.fetch_add(1, Ordering::SeqCst);
                if run >= runs {
                    return (lags, errors);
                }
                let count = connections.len();
                let pick = |replica: usize| {
                    let own = &connections[replica % count];
                    own[worker % own.len()].clone()
                };
                let owner = pick(worker + run);
                let follower = pick(worker + run + elsewhere);
                match followed_run(owner, follower).await {
                    Some(run_lags) => lags.extend(run_lags),
                    None => errors += 1,
                }
            }
        })
    });
    let mut lags = Vec::new();
    let mut errors = 0;
    for worker in futures::future::join_all(workers).await {
        let (worker_lags, worker_errors) = worker.unwrap_or_default();
        lags.extend(worker_lags);
        errors += worker_errors;
    }
    let cpu: Duration = pids
        .iter()
        .map(|pid| cpu_time(*pid))
        .sum::<Duration>()
        .saturating_sub(cpu_before);
    let (db_cpu, db_commits) = crate::database::spent(database_url).await?;
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);
    let runs = case.runs.max(1) as f64;
    let lags = sorted(lags);
    let bus = case
        .service_env
        .iter()
        .any(|(name, _)| name == "AGENT_RUNNER_NATS_URL");
    Ok(ReplicaReport {
        case: case.name.clone(),
        replicas: case.replicas,
        bus: if bus { "nats" } else { "database" }.to_owned(),
        concurrency: case.concurrency,
        runs: case.runs,
        errors,
        retried: RETRIED.load(Ordering::SeqCst) - retried_before,
        events_followed: lags.len(),
        lag_p50_ms: percentile(&lags, 50.0),
        lag_p99_ms: percentile(&lags, 99.0),
        cpu_per_run_ms: cpu.as_secs_f64() * 1000.0 / runs,
        database_cpu_per_run_ms: db_cpu.saturating_sub(db_cpu_before).as_secs_f64() * 1000.0 / runs,
        database_commits_per_run: (db_commits - db_commits_before) as f64 / runs,
    })
}

/// Calls refused `UNAVAILABLE` and tried again, in this process.
static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// The stream `call` opens, tried again (up to ten times, a growing pause apart) while it is
/// refused `UNAVAILABLE`, as a client of a busy service does: a refused `Run` or `Attach`
/// started nothing, so trying it again is safe. `None` when it is refused otherwise or
/// throughout.
async fn retried<T, F, Fut>(mut call: F) -> Option<tonic::Streaming<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>>,
{
    for attempt in 1..=10u64 {
        match call().await {
            Ok(response) => return Some(response.into_inner()),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                RETRIED.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(_) => return None,
        }
    }
    None
}

/// Starts a run on `owner`, follows it on `follower` from its first event, and returns the
/// lag of every event the owner's client got after the follower attached; `None` when
/// either stream failed or they differ.
async fn followed_run(owner: Channel, follower: Channel) -> Option<Vec<f64>> {
    let owner = AgentServiceClient::new(owner);
    let mut run = retried(|| {
        let mut owner = owner.clone();
        async move { owner.run(bench_request()).await }
    })
    .await?;
    let first = run.message().await.ok()??;
    let attached = Instant::now();
    let follower = AgentServiceClient::new(follower);
    let mut follow = retried(|| {
        let mut follower = follower.clone();
        let message_id = first.message_id.clone();
        async move {
            follower
                .attach(pb::AttachRequest {
                    message_id,
                    after_seq: 0,
                })
                .await
        }
    })
    .await?;
    let reading_owner = tokio::spawn(async move {
        let mut at = HashMap::new();
        while let Ok(Some(event)) = run.message().await {
            at.insert(event.seq, Instant::now());
        }
        at
    });
    let mut followed = HashMap::new();
    while let Ok(Some(event)) = follow.message().await {
        followed.insert(event.seq, Instant::now());
    }
    let owned = reading_owner.await.ok()?;
    if followed.len() != owned.len() + 1 {
        return None;
    }
    Some(
        owned
            .iter()
            .filter(|(_, at)| **at > attached)
            .filter_map(|(seq, at)| {
                let seen = followed.get(seq)?;
                Some(seen.saturating_duration_since(*at).as_secs_f64() * 1000.0)
            })
            .collect(),
    )
}
