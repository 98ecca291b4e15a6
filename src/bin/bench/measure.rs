//! One benchmark case: start the processes, measure the floor, drive the load, summarize.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runner::pb;
use agent_runner::pb::admin_service_client::AdminServiceClient;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use serde::Serialize;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::floor::Direct;
use crate::processes::{
    cpu_time, directory_bytes, memory_kib, resident_and_anon_kib, start_mock_with,
    start_service_with, written_bytes,
};
use crate::workload::{bench_request, RunResult};

/// Concurrent streams per gRPC connection.
const STREAMS_PER_CONNECTION: usize = 100;

/// Runs each followed by the direct calls, after a lone run's case, for
/// [`Report::over_floor_p50_ms`].
const OVER_FLOOR_RUNS: usize = 100;

/// A workload.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    pub concurrency: usize,
    pub runs: usize,
    pub ttft: Duration,
    pub chunk_delay: Duration,
    /// Extra environment of the service process (an OTLP endpoint, say).
    pub service_env: Vec<(String, String)>,
    /// The admin token of a service that requires API keys: the case makes a key with it
    /// and every run sends that key.
    pub admin_token: Option<String>,
    /// Runs over gRPC-Web on HTTP/1.1, as browsers make them, instead of gRPC.
    pub web: bool,
    /// Extra arguments of the scripted model (its calls' arguments, say).
    pub mock_args: Vec<String>,
    /// Appended to the service's configuration file.
    pub service_config: String,
}

/// The `authorization` header runs send, if the service requires one.
#[derive(Clone, Default)]
struct Credentials(Option<MetadataValue<Ascii>>);

impl Credentials {
    /// A key made for the bench when `admin_token` is given.
    async fn for_case(channel: &Channel, admin_token: Option<&str>) -> anyhow::Result<Self> {
        let Some(token) = admin_token else {
            return Ok(Self(None));
        };
        let mut request = tonic::Request::new(pb::CreateApiKeyRequest {
            tenant: "bench".into(),
            name: "bench".into(),
            limits: None,
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
        let created = AdminServiceClient::new(channel.clone())
            .create_api_key(request)
            .await?
            .into_inner();
        Ok(Self(Some(format!("Bearer {}", created.secret).parse()?)))
    }

    /// The `authorization` header's value, for gRPC-Web runs.
    fn header(&self) -> Option<String> {
        self.0
            .as_ref()
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    }

    fn request(&self) -> tonic::Request<pb::RunRequest> {
        let mut request = tonic::Request::new(bench_request());
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request
    }
}

/// What one case measured. Times in milliseconds, memory in MiB / KiB.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub case: String,
    pub concurrency: usize,
    pub runs: usize,
    pub errors: usize,
    pub runs_per_sec: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub floor_latency_p50_ms: f64,
    pub floor_ttft_p50_ms: f64,
    pub overhead_per_round_p50_ms: f64,
    pub overhead_per_round_p99_ms: f64,
    pub idle_rss_mib: f64,
    pub peak_rss_mib: f64,
    pub rss_per_run_kib: f64,
    /// The service's anonymous memory (`RssAnon`) before the runs and at its sampled peak:
    /// what the build changes, without the binary's own pages.
    pub idle_anon_mib: f64,
    pub peak_anon_mib: f64,
    /// The service's CPU time (user + system) over the measured runs, per run: steadier
    /// than runs/s on a shared machine.
    pub cpu_per_run_ms: f64,
    /// A lone run's latency (less its tool time) over the two model calls made directly
    /// right after it, median of [`OVER_FLOOR_RUNS`] such pairs (see
    /// [`over_floor`]); for one run at a time against the quick model only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_floor_p50_ms: Option<f64>,
    /// On PostgreSQL: its server processes' CPU time per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_cpu_per_run_ms: Option<f64>,
    /// On PostgreSQL: transactions committed per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_commits_per_run: Option<f64>,
    /// On PostgreSQL: where the runs' commits spent their time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<crate::commits::CommitBreakdown>,
    /// On the embedded store: what the service's writes dirtied for the disk per run, in
    /// pages (log records, the nodes sled rewrites as it splits and consolidates them, and
    /// its segment cleaning): the disk bandwidth a node needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written_per_run_kib: Option<f64>,
    /// On the embedded store: how much its data directory grew per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_per_run_kib: Option<f64>,
    /// On PostgreSQL: write-ahead log per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_per_run_kib: Option<f64>,
}

/// What the store has written and keeps so far: on the embedded store the service's
/// writes and its data directory's size, on PostgreSQL the server's write-ahead log.
struct Disk {
    written: u64,
    kept: u64,
    wal: Option<i64>,
}

impl Disk {
    async fn now(pid: u32, data: &std::path::Path, database: Option<&str>) -> anyhow::Result<Self> {
        let wal = match database {
            Some(url) => Some(crate::database::wal_bytes(url).await?),
            None => None,
        };
        Ok(Self {
            written: written_bytes(pid),
            kept: directory_bytes(data),
            wal,
        })
    }

    /// Fills `report`'s disk figures from what changed since `before`, over `runs`.
    fn report_since(&self, before: &Self, runs: f64, report: &mut Report) {
        let per_run = |bytes: f64| bytes / 1024.0 / runs;
        if let (Some(then), Some(now)) = (before.wal, self.wal) {
            report.wal_per_run_kib = Some(per_run((now - then) as f64));
            return;
        }
        report.written_per_run_kib =
            Some(per_run(self.written.saturating_sub(before.written) as f64));
        report.kept_per_run_kib = Some(per_run(self.kept as f64 - before.kept as f64));
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// Runs one case from fresh processes.
pub async fn run_case(case: Case) -> anyhow::Result<Report> {
    let dir = std::env::temp_dir().join(format!(
        "agent-runner-bench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    let report = run_in(&case, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    report
}

async fn run_in(case: &Case, dir: &std::path::Path) -> anyhow::Result<Report> {
    let mock_args: Vec<&str> = case.mock_args.iter().map(String::as_str).collect();
    let mock = start_mock_with(case.ttft, case.chunk_delay, &mock_args).await?;
    let metrics = crate::processes::free_addr()?;
    let mut env = case.service_env.clone();
    env.push(("AGENT_RUNNER_METRICS_LISTEN".into(), metrics.to_string()));
    let service = start_service_with(dir, mock.addr, &env, &case.service_config).await?;
    // A slow model's floor is its delays: a few samples tell it.
    let samples = if case.ttft.is_zero() && case.chunk_delay.is_zero() {
        200
    } else {
        3
    };
    let (floor_latency, floor_ttft) = direct_floor(mock.addr, samples).await?;
    let channels = connect(service.addr, case.concurrency).await?;
    let credentials = Credentials::for_case(&channels[0], case.admin_token.as_deref()).await?;
    warm_up(&channels[0], &credentials).await;
    let (idle_rss, idle_anon) = resident_and_anon_kib(service.pid());
    let peak = Arc::new(AtomicU64::new(idle_rss));
    let peak_anon = Arc::new(AtomicU64::new(idle_anon));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample_memory(
        service.pid(),
        Arc::clone(&peak),
        Arc::clone(&peak_anon),
        Arc::clone(&sampling),
    ));
    let database = case
        .service_env
        .iter()
        .find(|(name, _)| name == "AGENT_RUNNER_DATABASE_URL")
        .map(|(_, url)| url.as_str());
    let database_before = match database {
        Some(url) => Some(crate::database::spent(url).await?),
        None => None,
    };
    let commits_before = crate::commits::totals(metrics).await?;
    let data = dir.join("data");
    let disk_before = Disk::now(service.pid(), &data, database).await?;
    let cpu_before = cpu_time(service.pid());
    let started = Instant::now();
    let results = if case.web {
        drive_web(service.addr, case, &credentials).await?
    } else {
        drive(&channels, case, &credentials).await
    };
    let elapsed = started.elapsed();
    let cpu = cpu_time(service.pid()).saturating_sub(cpu_before);
    let commits_after = crate::commits::totals(metrics).await?;
    let disk_after = Disk::now(service.pid(), &data, database).await?;
    let database_spent = match (database, database_before) {
        (Some(url), Some((cpu_then, commits_then))) => {
            let (cpu_now, commits_now) = crate::database::spent(url).await?;
            Some((cpu_now.saturating_sub(cpu_then), commits_now - commits_then))
        }
        _ => None,
    };
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.await;
    let (_, hwm) = memory_kib(service.pid());
    let peak_rss = peak.load(Ordering::SeqCst).max(hwm);
    // After the measured runs, so their CPU and throughput do not count the direct calls.
    let lone_and_quick = case.concurrency == 1 && samples > 3 && !case.web;
    let over_floor = if lone_and_quick {
        Some(over_floor(&channels[0], &credentials, mock.addr, OVER_FLOOR_RUNS).await?)
    } else {
        None
    };
    let mut report = summarize(
        case,
        &results,
        elapsed,
        floor_latency,
        floor_ttft,
        idle_rss,
        peak_rss,
    );
    let runs = results.len().max(1) as f64;
    report.cpu_per_run_ms = millis(cpu) / runs;
    report.idle_anon_mib = idle_anon as f64 / 1024.0;
    report.peak_anon_mib = peak_anon.load(Ordering::SeqCst) as f64 / 1024.0;
    report.over_floor_p50_ms = over_floor;
    disk_after.report_since(&disk_before, runs, &mut report);
    if let Some((cpu, commits)) = database_spent {
        report.database_cpu_per_run_ms = Some(millis(cpu) / runs);
        report.database_commits_per_run = Some(commits as f64 / runs);
        report.commits = Some(crate::commits::breakdown(
            commits_before,
            commits_after,
            results.len(),
        ));
    }
    Ok(report)
}

fn summarize(
    case: &Case,
    results: &[RunResult],
    elapsed: Duration,
    floor_latency: f64,
    floor_ttft: f64,
    idle_rss: u64,
    peak_rss: u64,
) -> Report {
    let ok: Vec<&RunResult> = results.iter().filter(|r| r.ok).collect();
    let latency = sorted(ok.iter().map(|r| millis(r.latency)).collect());
    let ttft = sorted(ok.iter().filter_map(|r| r.ttft).map(millis).collect());
    let overhead = sorted(
        ok.iter()
            .map(|r| (millis(r.latency) - floor_latency - millis(r.tool_time)) / 2.0)
            .collect(),
    );
    Report {
        case: if case.admin_token.is_some() {
            format!("{}+auth", case.name)
        } else {
            case.name.to_owned()
        },
        concurrency: case.concurrency,
        runs: results.len(),
        errors: results.len() - ok.len(),
        runs_per_sec: ok.len() as f64 / elapsed.as_secs_f64(),
        latency_p50_ms: percentile(&latency, 50.0),
        latency_p99_ms: percentile(&latency, 99.0),
        ttft_p50_ms: percentile(&ttft, 50.0),
        ttft_p99_ms: percentile(&ttft, 99.0),
        floor_latency_p50_ms: floor_latency,
        floor_ttft_p50_ms: floor_ttft,
        overhead_per_round_p50_ms: percentile(&overhead, 50.0),
        overhead_per_round_p99_ms: percentile(&overhead, 99.0),
        idle_rss_mib: idle_rss as f64 / 1024.0,
        peak_rss_mib: peak_rss as f64 / 1024.0,
        rss_per_run_kib: peak_rss.saturating_sub(idle_rss) as f64 / case.concurrency as f64,
        idle_anon_mib: 0.0,
        peak_anon_mib: 0.0,
        cpu_per_run_ms: 0.0,
        over_floor_p50_ms: None,
        database_cpu_per_run_ms: None,
        database_commits_per_run: None,
        commits: None,
        written_per_run_kib: None,
        kept_per_run_kib: None,
        wal_per_run_kib: None,
    }
}

async fn connect(addr: SocketAddr, concurrency: usize) -> anyhow::Result<Vec<Channel>> {
    let count = concurrency.div_ceil(STREAMS_PER_CONNECTION).max(1);
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        channels.push(
            Channel::from_shared(format!("http://{addr}"))?
                .connect()
                .await?,
        );
    }
    Ok(channels)
}

async fn warm_up(channel: &Channel, credentials: &Credentials) {
    for _ in 0..3 {
        one_run(AgentServiceClient::new(channel.clone()), credentials).await;
    }
}

async fn one_run(mut client: AgentServiceClient<Channel>, credentials: &Credentials) -> RunResult {
    let started = Instant::now();
    let mut result = RunResult::new();
    let Ok(response) = client.run(credentials.request()).await else {
        return result;
    };
    let mut stream = response.into_inner();
    while let Ok(Some(event)) = stream.message().await {
        result.note(started, event.event);
    }
    result.latency = started.elapsed();
    result
}

async fn drive(channels: &[Channel], case: &Case, credentials: &Credentials) -> Vec<RunResult> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (0..case.concurrency).map(|worker| {
        let channel = channels[worker / STREAMS_PER_CONNECTION % channels.len()].clone();
        let next = Arc::clone(&next);
        let runs = case.runs;
        let credentials = credentials.clone();
        tokio::spawn(async move {
            let mut results = Vec::new();
            while next.fetch_add(1, Ordering::SeqCst) < runs {
                let client = AgentServiceClient::new(channel.clone());
                results.push(one_run(client, &credentials).await);
            }
            results
        })
    });
    let mut all = Vec::with_capacity(case.runs);
    for worker in futures::future::join_all(workers).await {
        all.extend(worker.unwrap_or_default());
    }
    all
}

/// [`drive`] over gRPC-Web: each worker's runs on an HTTP/1.1 connection of its own.
async fn drive_web(
    addr: SocketAddr,
    case: &Case,
    credentials: &Credentials,
) -> anyhow::Result<Vec<RunResult>> {
    let http = crate::web::client(case.concurrency)?;
    let url = format!("http://{addr}/agentrunner.v1.AgentService/Run");
    let authorization = credentials.header();
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (0..case.concurrency).map(|_| {
        let next = Arc::clone(&next);
        let runs = case.runs;
        let (http, url, authorization) = (http.clone(), url.clone(), authorization.clone());
        tokio::spawn(async move {
            let mut results = Vec::new();
            while next.fetch_add(1, Ordering::SeqCst) < runs {
                results.push(crate::web::one_run(&http, &url, authorization.as_deref()).await);
            }
            results
        })
    });
    let mut all = Vec::with_capacity(case.runs);
    for worker in futures::future::join_all(workers).await {
        all.extend(worker.unwrap_or_default());
    }
    Ok(all)
}

/// Keeps the peaks of resident and of anonymous memory, sampled every 20 ms.
async fn sample_memory(
    pid: u32,
    peak: Arc<AtomicU64>,
    peak_anon: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
) {
    while running.load(Ordering::SeqCst) {
        let (rss, anon) = resident_and_anon_kib(pid);
        peak.fetch_max(rss, Ordering::SeqCst);
        peak_anon.fetch_max(anon, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The floor before the load: median full duration, and median time until the second
/// call's first answer chunk.
async fn direct_floor(llm: SocketAddr, samples: usize) -> anyhow::Result<(f64, f64)> {
    let direct = Direct::new(llm);
    let mut totals = Vec::with_capacity(samples);
    let mut firsts = Vec::with_capacity(samples);
    for _ in 0..samples {
        let (total, first) = direct.pair().await?;
        totals.push(millis(total));
        firsts.push(millis(first));
    }
    Ok((
        percentile(&sorted(totals), 50.0),
        percentile(&sorted(firsts), 50.0),
    ))
}

/// What a lone run takes over the floor measured right beside it: each of `samples` runs
/// is followed at once by the two calls made directly, and the median is taken of the
/// run's latency less its tool time and less those calls. The floor measured once before
/// the load moves with the machine between sittings by more than the service's own share;
/// measured beside each run, it moves with the run.
async fn over_floor(
    channel: &Channel,
    credentials: &Credentials,
    llm: SocketAddr,
    samples: usize,
) -> anyhow::Result<f64> {
    let direct = Direct::new(llm);
    let mut over = Vec::with_capacity(samples);
    for _ in 0..samples {
        let run = one_run(AgentServiceClient::new(channel.clone()), credentials).await;
        let (floor, _) = direct.pair().await?;
        if run.ok {
            over.push(millis(run.latency) - millis(run.tool_time) - millis(floor));
        }
    }
    Ok(percentile(&sorted(over), 50.0))
}

/// The median repeat of a case, by throughput.
pub fn median_report(mut reports: Vec<Report>) -> Report {
    reports.sort_by(|a, b| a.runs_per_sec.total_cmp(&b.runs_per_sec));
    let middle = reports.len() / 2;
    reports.swap_remove(middle)
}

pub fn print_table(reports: &[Report]) {
    println!(
        "{:<11} {:>6} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "case", "C", "runs", "errors", "runs/s", "lat p50", "lat p99", "ttft p50", "ttft p99",
        "floor ttft", "floor lat", "ovh p50", "ovh p99", "peak MiB", "KiB/run", "CPU ms/run"
    );
    for r in reports {
        println!(
            "{:<11} {:>6} {:>6} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>9.3} {:>9.3} {:>9.1} {:>10.1} {:>10.3}",
            r.case, r.concurrency, r.runs, r.errors, r.runs_per_sec, r.latency_p50_ms, r.latency_p99_ms,
            r.ttft_p50_ms, r.ttft_p99_ms, r.floor_ttft_p50_ms, r.floor_latency_p50_ms,
            r.overhead_per_round_p50_ms, r.overhead_per_round_p99_ms, r.peak_rss_mib, r.rss_per_run_kib,
            r.cpu_per_run_ms
        );
    }
    for r in reports {
        if let Some(over) = r.over_floor_p50_ms {
            println!(
                "{:<11} a run over the direct calls made right after it: {over:.2} ms (p50)",
                r.case
            );
        }
    }
    for r in reports {
        if let (Some(cpu), Some(commits)) = (r.database_cpu_per_run_ms, r.database_commits_per_run)
        {
            let wal = r.wal_per_run_kib.unwrap_or(f64::NAN);
            println!(
                "{:<11} PostgreSQL: {cpu:.3} ms CPU per run, {commits:.1} transactions per run, {wal:.1} KiB of WAL per run",
                r.case
            );
        }
        if let (Some(written), Some(kept)) = (r.written_per_run_kib, r.kept_per_run_kib) {
            println!(
                "{:<11} embedded store: {written:.1} KiB written to disk per run, {kept:.1} KiB kept",
                r.case
            );
        }
    }
    println!("(times in ms; ovh = orchestration overhead per round: (run latency − direct two-call floor − tool time) / 2)");
}
