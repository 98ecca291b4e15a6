//! `agent-runner-bench`: drives the real service (as a child process) against the scripted
//! LLM (another child process) through the generated gRPC client, and reports throughput,
//! latency, time to first delta next to the direct-stream floor, orchestration overhead per
//! round, and the service's memory.
//!
//! The workload is a two-round function-calling agent: one `time.current_time` call, then
//! an answer of about 20 chunks. Build with `--release`.

mod commits;
mod database;
mod floor;
mod hostile;
mod large;
mod listing;
mod long;
mod measure;
mod nats_count;
mod otlp;
mod processes;
mod replicas;
mod takeover;
mod web;
mod workload;

use std::time::Duration;

use clap::Parser;

use measure::{run_case, Case, Report};

/// Benchmark cases that fit a 2-core machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Preset {
    /// One run at a time, 200 runs.
    C1,
    /// 50 at a time, 2000 runs.
    C50,
    /// 2000 concurrent streams against a slow model (1 s to first token, 50 ms per chunk).
    Streams2k,
    /// 10000 concurrent streams against the same slow model.
    Streams10k,
    /// 50 at a time, 2000 runs, over gRPC-Web on HTTP/1.1 (as c50 over gRPC).
    WebC50,
    /// 1000 concurrent gRPC-Web streams over HTTP/1.1 against the slow model: every run
    /// must end with all its events in order.
    WebStreams1k,
    /// 50 at a time, 400 runs whose call streams 2 KiB of arguments in 40 pieces over
    /// about 1 s, as `tool_call_delta` events (every frame 25 ms apart).
    ArgsC50,
    /// The same, with argument deltas turned off (`runner.max_tool_delta_bytes = 0`): what
    /// streaming them costs is the CPU per run of `args-c50` over this.
    ArgsC50Off,
    /// Ten runs answering 2 MB each: memory after, and disk per answer byte.
    Large,
    /// Time per `ListRuns` page with 100 runs stored and with 100,000: unfiltered, and the
    /// runs waiting for the caller (on PostgreSQL with --database-url).
    ListRuns,
    /// One conversation of --turns turns with history trimming on: the cost of the last
    /// ten turns over the first ten.
    Long,
    /// Hostile inputs, each on a fresh service: what it answers and the memory it holds.
    Hostile,
    /// Runs on one replica followed live on another (needs --database-url): one replica
    /// against three, at 10 and 50 at a time (three also at 30 and 150, and with each run
    /// followed on its own replica); the bus is NATS with --nats-url.
    Replicas,
    /// 10000 slow streams (1 s to first token, 50 ms per chunk) over three replicas, each
    /// followed live on the next, by a client that never retries (needs --database-url).
    ReplicaStreams,
    /// Three replicas; the first, holding 12 runs mid-answer, is killed: how long until each
    /// run's first event from its new owner, and an idle replica's CPU (needs
    /// --database-url).
    Takeover,
}

#[derive(Debug, Parser)]
#[command(
    name = "agent-runner-bench",
    version,
    about = "Benchmarks agent-runner"
)]
struct Args {
    /// Cases to run (default: c1, c50, streams2k).
    #[arg(long = "case", value_enum)]
    cases: Vec<Preset>,
    /// Interleaved repeats of the cases; the median repeat is reported.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Export the service's spans over OTLP/gRPC to a receiver in this process (to measure
    /// what tracing costs).
    #[arg(long)]
    otlp_sink: bool,
    /// Require API keys: the service checks a key on every call (to measure what auth
    /// costs).
    #[arg(long)]
    auth: bool,
    /// Turns of the `long` case.
    #[arg(long, default_value_t = 300)]
    turns: usize,
    /// Only these of the `hostile` case's inputs (numbered from 1; repeat for more).
    #[arg(long = "hostile-input")]
    hostile_inputs: Vec<usize>,
    /// Run c1, c50 and the stream cases on PostgreSQL, in a database made on this server
    /// for the sitting (`postgres://user@host:port/database`; the database named is only
    /// connected to, to make it).
    #[arg(long, env = "AGENT_RUNNER_BENCH_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The `replicas` case's bus: NATS at this URL (default: the database's notifications).
    #[arg(long, env = "AGENT_RUNNER_BENCH_NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// Only the `replicas` cases of these names (`replicas3-c10`, …; repeat for more): to
    /// profile or compare one shape without the rest.
    #[arg(long = "replica-case")]
    replica_cases: Vec<String>,
    /// Each replica of the `replicas` cases on its share of this machine's cores (this
    /// machine's cores over the replicas, at least one worker thread each), as replicas
    /// given a CPU quota each run by default; without, each runs one thread per core.
    #[arg(long)]
    share_cores: bool,
}

/// The workload of a preset measured through [`run_case`]; `None` for those measured each
/// by a driver of its own (`large`, `long`, the replicas' cases, …).
fn case(
    preset: Preset,
    service_env: &[(String, String)],
    admin_token: Option<&str>,
) -> Option<Case> {
    let fast = |name: &'static str, concurrency, runs| Case {
        name,
        concurrency,
        runs,
        ttft: Duration::ZERO,
        chunk_delay: Duration::ZERO,
        service_env: service_env.to_vec(),
        admin_token: admin_token.map(str::to_owned),
        web: false,
        mock_args: Vec::new(),
        service_config: String::new(),
    };
    let slow = |name: &'static str, concurrency| Case {
        name,
        concurrency,
        runs: concurrency,
        ttft: Duration::from_secs(1),
        chunk_delay: Duration::from_millis(50),
        service_env: service_env.to_vec(),
        admin_token: admin_token.map(str::to_owned),
        web: false,
        mock_args: Vec::new(),
        service_config: String::new(),
    };
    let streamed_arguments = |name: &'static str, config: &str| Case {
        chunk_delay: Duration::from_millis(25),
        mock_args: long_arguments(),
        service_config: config.to_owned(),
        ..fast(name, 50, 400)
    };
    Some(match preset {
        Preset::C1 => fast("c1", 1, 200),
        Preset::C50 => fast("c50", 50, 2000),
        Preset::Streams2k => slow("streams2k", 2000),
        Preset::Streams10k => slow("streams10k", 10_000),
        Preset::WebC50 => Case {
            web: true,
            ..fast("web-c50", 50, 2000)
        },
        Preset::WebStreams1k => Case {
            web: true,
            ..slow("web-streams1k", 1000)
        },
        Preset::ArgsC50 => streamed_arguments("args-c50", ""),
        Preset::ArgsC50Off => {
            streamed_arguments("args-c50-off", "[runner]\nmax_tool_delta_bytes = 0\n")
        }
        Preset::Large
        | Preset::ListRuns
        | Preset::Long
        | Preset::Hostile
        | Preset::Replicas
        | Preset::ReplicaStreams
        | Preset::Takeover => return None,
    })
}

/// The scripted model's arguments for the argument cases: 2 KiB of JSON in 40 pieces.
fn long_arguments() -> Vec<String> {
    let note = "x".repeat(2048 - r#"{"timezone": "UTC", "note": ""}"#.len());
    vec![
        "--arguments".into(),
        format!(r#"{{"timezone": "UTC", "note": "{note}"}}"#),
        "--argument-pieces".into(),
        "40".into(),
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let presets = if args.cases.is_empty() {
        vec![Preset::C1, Preset::C50, Preset::Streams2k]
    } else {
        args.cases.clone()
    };
    let sink = if args.otlp_sink {
        Some(otlp::Sink::start().await?)
    } else {
        None
    };
    let mut service_env: Vec<(String, String)> =
        sink.iter().flat_map(|sink| sink.service_env()).collect();
    let admin_token = args
        .auth
        .then(|| format!("bench-admin-{}", uuid::Uuid::new_v4().simple()));
    if let Some(token) = &admin_token {
        service_env.push(("AGENT_RUNNER_REQUIRE_AUTH".into(), "true".into()));
        service_env.push(("AGENT_RUNNER_ADMIN_TOKEN".into(), token.clone()));
    }
    let database = match &args.database_url {
        Some(url) => Some(database::BenchDatabase::create(url).await?),
        None => None,
    };
    if let Some(database) = &database {
        service_env.push(("AGENT_RUNNER_DATABASE_URL".into(), database.url.clone()));
        let key = agent_runner::store::SecretKey::generate().to_base64();
        service_env.push(("AGENT_RUNNER_SECRET_KEY".into(), key));
    }
    let outcome = run_presets(
        &args,
        presets,
        &service_env,
        admin_token.as_deref(),
        sink.as_ref(),
    )
    .await;
    if let Some(database) = database {
        database.drop_database().await?;
    }
    outcome
}

async fn run_presets(
    args: &Args,
    presets: Vec<Preset>,
    service_env: &[(String, String)],
    admin_token: Option<&str>,
    sink: Option<&otlp::Sink>,
) -> anyhow::Result<()> {
    if presets.contains(&Preset::Takeover) {
        run_takeover_case(args, service_env).await?;
    }
    if presets.contains(&Preset::Hostile) {
        if !args.json {
            println!("| input | answer | RSS before | peak | RSS after | also |\n|---|---|---|---|---|---|");
        }
        let rows = hostile::run_hostile(&args.hostile_inputs, |row| {
            if !args.json {
                println!(
                    "| {} | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {} |",
                    row.input,
                    row.answer,
                    row.rss_before_mib,
                    row.peak_mib,
                    row.rss_after_mib,
                    row.note
                );
            }
        })
        .await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
    }
    let shape = replicas::Shape::new;
    let replica_shapes: Vec<replicas::Shape> = [
        (
            Preset::Replicas,
            vec![
                shape(1, 10, 500),
                shape(3, 10, 500),
                shape(3, 10, 500).followers_on_owner(),
                shape(3, 30, 1500),
                shape(1, 50, 2000),
                shape(3, 50, 2000),
                shape(3, 50, 2000).followers_on_owner(),
                shape(3, 150, 6000),
            ],
        ),
        (
            Preset::ReplicaStreams,
            vec![shape(3, 10_000, 10_000).slow().without_retries()],
        ),
    ]
    .into_iter()
    .filter(|(preset, _)| presets.contains(preset))
    .flat_map(|(_, shapes)| shapes)
    .collect();
    if !replica_shapes.is_empty() {
        run_replica_cases(args, service_env, &replica_shapes).await?;
    }
    if presets.contains(&Preset::ListRuns) {
        let reports = listing::run_listing(args.database_url.as_deref()).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&reports)?);
        } else {
            println!("| store | runs | page p50 | page p99 | waiting p50 | waiting p99 | waiting found |\n|---|---|---|---|---|---|---|");
            for r in &reports {
                println!(
                    "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {} |",
                    r.store,
                    r.runs,
                    r.page_p50_ms,
                    r.page_p99_ms,
                    r.waiting_p50_ms,
                    r.waiting_p99_ms,
                    r.waiting_found
                );
            }
        }
    }
    let large = presets.contains(&Preset::Large);
    let long = presets.contains(&Preset::Long);
    let presets: Vec<Preset> = presets
        .into_iter()
        .filter(|p| case(*p, service_env, admin_token).is_some())
        .collect();
    if long {
        let report = long::run_long(args.turns, service_env).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "long: {} turns, {} errors; latency at the client, median of the first ten {:.2} ms, of the last ten {:.2} ms: ratio {:.2}; in the service {:.2} / {:.2} ms: {:.2} ({} earlier turns sent with the last)",
                report.turns, report.errors, report.first_turns_ms, report.last_turns_ms,
                report.ratio, report.service_first_turns_ms, report.service_last_turns_ms,
                report.service_ratio, report.last_history_turns
            );
            if let Some(error) = &report.first_error {
                println!("long: first failure: {error}");
            }
        }
        if presets.is_empty() && !large {
            return Ok(());
        }
    }
    if presets.is_empty() && !large {
        return Ok(());
    }
    let mut reports: Vec<Vec<Report>> = presets.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.repeats.max(1) {
        for (preset, runs) in presets.iter().zip(reports.iter_mut()) {
            if let Some(case) = case(*preset, service_env, admin_token) {
                runs.push(run_case(case).await?);
            }
        }
    }
    if large {
        anyhow::ensure!(!args.auth, "--auth applies to c1, c50 and the stream cases");
        let report = large::run_large(service_env).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "large: {} runs, {} errors, {:.1} MiB answered; RSS idle {:.1} MiB, peak {:.1} MiB, 2 s after {:.1} MiB; disk {:.2} bytes per answer byte",
                report.runs, report.errors, report.answer_mib, report.idle_rss_mib,
                report.peak_rss_mib, report.rss_after_mib, report.disk_per_answer_byte
            );
        }
        if presets.is_empty() {
            return Ok(());
        }
    }
    if let Some(sink) = &sink {
        eprintln!("the OTLP sink received {} spans", sink.spans());
    }
    let medians: Vec<Report> = reports.into_iter().map(measure::median_report).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&medians)?);
    } else {
        measure::print_table(&medians);
    }
    Ok(())
}

/// The `takeover` case, repeated `--repeats` times on fresh processes; prints each sitting
/// and the medians.
async fn run_takeover_case(args: &Args, service_env: &[(String, String)]) -> anyhow::Result<()> {
    anyhow::ensure!(
        service_env
            .iter()
            .any(|(name, _)| name == "AGENT_RUNNER_DATABASE_URL"),
        "the takeover case needs --database-url"
    );
    let mut env = service_env.to_vec();
    if let Some(nats) = &args.nats_url {
        env.push(("AGENT_RUNNER_NATS_URL".into(), nats.clone()));
    }
    let mut reports = Vec::new();
    for _ in 0..args.repeats.max(1) {
        let report = takeover::run_takeover(&env).await?;
        eprintln!("{}", serde_json::to_string(&report)?);
        reports.push(report);
    }
    let median = |value: fn(&takeover::TakeoverReport) -> f64| {
        let values = measure::sorted(reports.iter().map(value).collect());
        measure::percentile(&values, 50.0)
    };
    println!("| runs | lease | finished | takeover p50 / p99 | idle replica CPU |\n|---|---|---|---|---|");
    println!(
        "| {} | {} s | {} | {:.2} / {:.2} s | {:.2} ms/s |",
        reports[0].runs,
        reports[0].lease_secs,
        reports.iter().map(|r| r.finished).min().unwrap_or(0),
        median(|r| r.takeover_p50_s),
        median(|r| r.takeover_p99_s),
        median(|r| r.idle_cpu_ms_per_s),
    );
    Ok(())
}

/// The `replicas` case: one replica against three at 10 and 50 runs at a time (and three
/// with each run followed on its own replica, which splits what relaying costs from what
/// more processes cost; and three at 30 and 150, each replica as loaded as the one),
/// repeated `--repeats` times in turn; prints each repeat and the medians.
async fn run_replica_cases(
    args: &Args,
    service_env: &[(String, String)],
    shapes: &[replicas::Shape],
) -> anyhow::Result<()> {
    let Some(url) = service_env
        .iter()
        .find(|(name, _)| name == "AGENT_RUNNER_DATABASE_URL")
        .map(|(_, url)| url.clone())
    else {
        anyhow::bail!("the replicas case needs --database-url");
    };
    let mut env = service_env.to_vec();
    if let Some(nats) = &args.nats_url {
        env.push(("AGENT_RUNNER_NATS_URL".into(), nats.clone()));
    }
    let cases: Vec<replicas::ReplicaCase> = shapes
        .iter()
        .map(|shape| {
            let mut case = shape.case(env.clone());
            if args.share_cores {
                case.worker_threads = Some(replicas::share_of_cores(case.replicas));
            }
            case
        })
        .filter(|case| args.replica_cases.is_empty() || args.replica_cases.contains(&case.name))
        .collect();
    let mut all: Vec<Vec<replicas::ReplicaReport>> = cases.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.repeats.max(1) {
        for (case, reports) in cases.iter().zip(all.iter_mut()) {
            let report = replicas::run_replicas(case, &url).await?;
            eprintln!("{}", serde_json::to_string(&report)?);
            reports.push(report);
        }
    }
    println!("| case | threads | bus | runs | errors | refused | start max | lag p50 | lag p99 | CPU/run (all replicas) | PG CPU/run | xact/run | bursts/run | flushes/run |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for mut reports in all {
        reports.sort_by(|a, b| a.cpu_per_run_ms.total_cmp(&b.cpu_per_run_ms));
        let median = reports.swap_remove(reports.len() / 2);
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} | {:.1} | {:.1} |",
            median.case,
            threads(median.worker_threads),
            median.bus,
            median.runs,
            median.errors,
            median.retried,
            median.start_max_ms,
            median.lag_p50_ms,
            median.lag_p99_ms,
            median.cpu_per_run_ms,
            median.database_cpu_per_run_ms,
            median.database_commits_per_run,
            median.commits.bursts_per_run,
            median.commits.flushes_per_run
        );
    }
    Ok(())
}

/// A replica's worker threads as the table shows them.
fn threads(count: Option<usize>) -> String {
    count.map_or_else(|| "default".to_owned(), |count| count.to_string())
}
