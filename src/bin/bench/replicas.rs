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

use crate::measure::{percentile, sorted};
use crate::nats_count::NatsCount;
use crate::processes::{cpu_time, start_mock, start_service_with, Process};
use crate::workload::bench_request;

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
    /// Whether a call refused `UNAVAILABLE` is tried again, or counts as failed.
    retry: bool,
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
            retry: true,
        }
    }

    /// With a client that never tries a refused call again: every refusal is a failure.
    pub fn without_retries(self) -> Self {
        Self {
            retry: false,
            ..self
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
            retry: self.retry,
            service_env,
            worker_threads: None,
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
    /// Whether a call refused `UNAVAILABLE` is tried again.
    pub retry: bool,
    /// The service's environment: the database, the key, NATS when used.
    pub service_env: Vec<(String, String)>,
    /// Worker threads each replica runs on; `None`: the service's default (one per core).
    pub worker_threads: Option<usize>,
}

/// Worker threads for each of `replicas` replicas given an equal share of this machine's
/// cores: what each runs on by default when given that share as a CPU quota (the service
/// counts a container's quota), and never fewer than one.
pub fn share_of_cores(replicas: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (cores / replicas.max(1)).max(1)
}

/// What a replica case measured; times in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaReport {
    pub case: String,
    pub replicas: usize,
    /// Worker threads of each replica; `None`: the service's default.
    pub worker_threads: Option<usize>,
    pub bus: String,
    pub concurrency: usize,
    pub runs: usize,
    pub errors: usize,
    /// Why runs failed, most common first: the call, and the code and message it ended with.
    pub failures: Vec<(String, usize)>,
    /// `Run`s and `Attach`es refused `UNAVAILABLE` (all connections to the database busy)
    /// and tried again.
    pub retried: usize,
    /// Why they were refused, most common first.
    pub refusals: Vec<(String, usize)>,
    /// Whether refused calls were tried again; without, each refusal is also a failure.
    pub retry: bool,
    /// From a `Run` call to its first event, and from an `Attach` call to its first event:
    /// how long a start or attach waited (for a connection, among others).
    pub start_p50_ms: f64,
    pub start_max_ms: f64,
    pub attach_p50_ms: f64,
    pub attach_max_ms: f64,
    pub events_followed: usize,
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub cpu_per_run_ms: f64,
    pub database_cpu_per_run_ms: f64,
    pub database_commits_per_run: f64,
    /// The replicas' own commits, all together: bursts and group flushes per run.
    pub commits: crate::commits::CommitBreakdown,
    /// Write-ahead log written per run, in bytes.
    pub wal_bytes_per_run: f64,
    /// Messages and payload bytes per run on NATS, every replica subject (with NATS).
    pub nats_messages_per_run: f64,
    pub nats_bytes_per_run: f64,
    /// Runs per second over the measured runs, all replicas together.
    pub runs_per_sec: f64,
    /// What the load spent per run: the scripted model and this client, in milliseconds.
    pub load_cpu_per_run_ms: f64,
}

/// Runs one replica case from fresh processes.
pub async fn run_replicas(case: &ReplicaCase, database_url: &str) -> anyhow::Result<ReplicaReport> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-replicas-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let mock = start_mock(case.ttft, case.chunk_delay).await?;
    let mut services: Vec<Process> = Vec::new();
    let mut metrics = Vec::new();
    for replica in 0..case.replicas {
        let dir = dir.join(format!("r{replica}"));
        std::fs::create_dir_all(&dir)?;
        let mut env = case.service_env.clone();
        env.push((
            "AGENT_RUNNER_REPLICA_ID".into(),
            format!("bench-r{replica}"),
        ));
        let listen = crate::processes::free_addr()?;
        env.push(("AGENT_RUNNER_METRICS_LISTEN".into(), listen.to_string()));
        metrics.push(listen);
        if let Some(threads) = case.worker_threads {
            env.push(("AGENT_RUNNER_WORKER_THREADS".into(), threads.to_string()));
        }
        // One tenant makes every run and follows each: the per-tenant cap on following
        // streams (1,000 a replica by default) is raised past the case's streams, since
        // the case measures the store and the bus, not that cap.
        let limits = "[limits]\nmax_follow_streams = 20000\n";
        services.push(start_service_with(&dir, mock.addr, &env, limits).await?);
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
    let load = [mock.pid(), std::process::id()];
    let load_before: Duration = load.iter().map(|pid| cpu_time(*pid)).sum();
    let retried_before = RETRIED.load(Ordering::SeqCst);
    take_refusals();
    let (db_cpu_before, db_commits_before) = crate::database::spent(database_url).await?;
    let commits_before = commit_totals(&metrics).await?;
    let wal_before = crate::database::wal_bytes(database_url).await?;
    let nats = match case
        .service_env
        .iter()
        .find(|(name, _)| name == "AGENT_RUNNER_NATS_URL")
    {
        Some((_, url)) => Some(NatsCount::start(url).await?),
        None => None,
    };
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(connections);
    let workers = (0..case.concurrency).map(|worker| {
        let (next, connections, runs) = (Arc::clone(&next), Arc::clone(&connections), case.runs);
        let elsewhere = usize::from(!case.followers_on_owner);
        let attempts = if case.retry { 10 } else { 1 };
        tokio::spawn(async move {
            let mut timed = Timed::default();
            let mut errors: HashMap<String, usize> = HashMap::new();
            loop {
                let run = next.fetch_add(1, Ordering::SeqCst);
                if run >= runs {
                    return (timed, errors);
                }
                let count = connections.len();
                let pick = |replica: usize| {
                    let own = &connections[replica % count];
                    own[worker % own.len()].clone()
                };
                let owner = pick(worker + run);
                let follower = pick(worker + run + elsewhere);
                if let Err(why) = followed_run(owner, follower, attempts, &mut timed).await {
                    *errors.entry(why).or_default() += 1;
                }
            }
        })
    });
    let mut timed = Timed::default();
    let mut failures: HashMap<String, usize> = HashMap::new();
    for worker in futures::future::join_all(workers).await {
        let (worker_timed, worker_errors) = worker.unwrap_or_default();
        timed.lags.extend(worker_timed.lags);
        timed.starts.extend(worker_timed.starts);
        timed.attaches.extend(worker_timed.attaches);
        for (why, count) in worker_errors {
            *failures.entry(why).or_default() += count;
        }
    }
    let errors = failures.values().sum();
    let mut failures: Vec<(String, usize)> = failures.into_iter().collect();
    failures.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    failures.truncate(8);
    let cpu: Duration = pids
        .iter()
        .map(|pid| cpu_time(*pid))
        .sum::<Duration>()
        .saturating_sub(cpu_before);
    let elapsed = started.elapsed();
    let load_cpu = load
        .iter()
        .map(|pid| cpu_time(*pid))
        .sum::<Duration>()
        .saturating_sub(load_before);
    let (nats_messages, nats_bytes) = nats.as_ref().map(NatsCount::counted).unwrap_or_default();
    let (db_cpu, db_commits) = crate::database::spent(database_url).await?;
    let commits =
        crate::commits::breakdown(commits_before, commit_totals(&metrics).await?, case.runs);
    let wal = crate::database::wal_bytes(database_url).await? - wal_before;
    drop(services);
    let _ = std::fs::remove_dir_all(&dir);
    let runs = case.runs.max(1) as f64;
    let (lags, starts, attaches) = (
        sorted(timed.lags),
        sorted(timed.starts),
        sorted(timed.attaches),
    );
    let bus = case
        .service_env
        .iter()
        .any(|(name, _)| name == "AGENT_RUNNER_NATS_URL");
    Ok(ReplicaReport {
        case: case.name.clone(),
        replicas: case.replicas,
        worker_threads: case.worker_threads,
        bus: if bus { "nats" } else { "database" }.to_owned(),
        concurrency: case.concurrency,
        runs: case.runs,
        errors,
        failures,
        retried: RETRIED.load(Ordering::SeqCst) - retried_before,
        refusals: take_refusals(),
        retry: case.retry,
        start_p50_ms: percentile(&starts, 50.0),
        start_max_ms: starts.last().copied().unwrap_or_default(),
        attach_p50_ms: percentile(&attaches, 50.0),
        attach_max_ms: attaches.last().copied().unwrap_or_default(),
        events_followed: lags.len(),
        lag_p50_ms: percentile(&lags, 50.0),
        lag_p99_ms: percentile(&lags, 99.0),
        cpu_per_run_ms: cpu.as_secs_f64() * 1000.0 / runs,
        database_cpu_per_run_ms: db_cpu.saturating_sub(db_cpu_before).as_secs_f64() * 1000.0 / runs,
        database_commits_per_run: (db_commits - db_commits_before) as f64 / runs,
        commits,
        wal_bytes_per_run: wal as f64 / runs,
        nats_messages_per_run: nats_messages as f64 / runs,
        nats_bytes_per_run: nats_bytes as f64 / runs,
        runs_per_sec: runs / elapsed.as_secs_f64().max(1e-9),
        load_cpu_per_run_ms: load_cpu.as_secs_f64() * 1000.0 / runs,
    })
}

/// The commit totals of every replica whose metrics listen at `metrics`, summed.
async fn commit_totals(
    metrics: &[std::net::SocketAddr],
) -> anyhow::Result<crate::commits::CommitTotals> {
    let mut sum = crate::commits::CommitTotals::default();
    for listen in metrics {
        sum = sum + crate::commits::totals(*listen).await?;
    }
    Ok(sum)
}

/// Calls refused `UNAVAILABLE` and tried again, in this process.
static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// Why calls were refused `UNAVAILABLE`, in this process.
static REFUSALS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The refusals since the last call, counted by reason, most common first.
fn take_refusals() -> Vec<(String, usize)> {
    let taken = std::mem::take(&mut *REFUSALS.lock().unwrap_or_else(|e| e.into_inner()));
    let mut counted: HashMap<String, usize> = HashMap::new();
    for why in taken {
        *counted.entry(why).or_default() += 1;
    }
    let mut counted: Vec<(String, usize)> = counted.into_iter().collect();
    counted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counted.truncate(8);
    counted
}

/// What one worker timed, in milliseconds.
#[derive(Default)]
struct Timed {
    /// Each followed event's lag.
    lags: Vec<f64>,
    /// Each `Run` call to its first event.
    starts: Vec<f64>,
    /// Each `Attach` call to its first event.
    attaches: Vec<f64>,
}

/// The stream `call` opens, tried again (up to `attempts` times in all, a growing pause
/// apart) while it is refused `UNAVAILABLE`, as a client of a busy service does: a refused
/// `Run` or `Attach` started nothing, so trying it again is safe. The last refusal when it
/// is refused otherwise or throughout.
async fn retried<T, F, Fut>(
    attempts: u64,
    mut call: F,
) -> Result<tonic::Streaming<T>, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>>,
{
    let mut last = tonic::Status::unavailable("not tried");
    for attempt in 1..=attempts {
        match call().await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                RETRIED.fetch_add(1, Ordering::SeqCst);
                REFUSALS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(why("refused", &status));
                last = status;
                if attempt == attempts {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(status) => return Err(status),
        }
    }
    Err(last)
}

/// A failure's name for the report: what failed, its code and the start of its message.
fn why(what: &str, status: &tonic::Status) -> String {
    let message: String = status.message().chars().take(200).collect();
    format!("{what}: {:?}: {message}", status.code())
}

/// Starts a run on `owner`, follows it on `follower` from its first event, and adds to
/// `timed` how long the start and the attach took to their first event and the lag of
/// every event the owner's client got after the follower attached; why, when either
/// stream failed or they differ.
async fn followed_run(
    owner: Channel,
    follower: Channel,
    attempts: u64,
    timed: &mut Timed,
) -> Result<(), String> {
    let owner = AgentServiceClient::new(owner);
    let called = Instant::now();
    let mut run = retried(attempts, || {
        let mut owner = owner.clone();
        async move { owner.run(bench_request()).await }
    })
    .await
    .map_err(|status| why("run refused", &status))?;
    let first = match run.message().await {
        Ok(Some(first)) => first,
        Ok(None) => return Err("run: no event".to_owned()),
        Err(status) => return Err(why("run's first event", &status)),
    };
    timed.starts.push(ms(called.elapsed()));
    let attached = Instant::now();
    let follower = AgentServiceClient::new(follower);
    let mut follow = retried(attempts, || {
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
    .await
    .map_err(|status| why("attach refused", &status))?;
    let reading_owner = tokio::spawn(async move {
        let mut at = HashMap::new();
        loop {
            match run.message().await {
                Ok(Some(event)) => at.insert(event.seq, Instant::now()),
                Ok(None) => return Ok(at),
                Err(status) => return Err(why("run's stream", &status)),
            };
        }
    });
    let mut followed = HashMap::new();
    loop {
        let event = follow.message().await;
        if followed.is_empty() {
            timed.attaches.push(ms(attached.elapsed()));
        }
        match event {
            Ok(Some(event)) => followed.insert(event.seq, Instant::now()),
            Ok(None) => break,
            Err(status) => return Err(why("attach's stream", &status)),
        };
    }
    let owned = reading_owner
        .await
        .map_err(|_| "run's reader panicked".to_owned())??;
    if followed.len() != owned.len() + 1 {
        return Err(format!(
            "streams differ: {} followed, {} owned",
            followed.len(),
            owned.len()
        ));
    }
    timed.lags.extend(
        owned
            .iter()
            .filter(|(_, at)| **at > attached)
            .filter_map(|(seq, at)| Some(ms(followed.get(seq)?.saturating_duration_since(*at)))),
    );
    Ok(())
}

/// A duration in milliseconds.
fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
