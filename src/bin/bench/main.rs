//! `agent-runner-bench`: drives the real service (as a child process) against the scripted
//! LLM (another child process) through the generated gRPC client, and reports throughput,
//! latency, time to first delta next to the direct-stream floor, orchestration overhead per
//! round, and the service's memory.
//!
//! The workload is a two-round function-calling agent: one `time.current_time` call, then
//! an answer of about 20 chunks. Build with `--release`.

mod measure;
mod otlp;
mod processes;

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
}

fn case(preset: Preset, service_env: &[(String, String)]) -> Case {
    let fast = |name: &'static str, concurrency, runs| Case {
        name,
        concurrency,
        runs,
        ttft: Duration::ZERO,
        chunk_delay: Duration::ZERO,
        service_env: service_env.to_vec(),
    };
    let slow = |name: &'static str, concurrency| Case {
        name,
        concurrency,
        runs: concurrency,
        ttft: Duration::from_secs(1),
        chunk_delay: Duration::from_millis(50),
        service_env: service_env.to_vec(),
    };
    match preset {
        Preset::C1 => fast("c1", 1, 200),
        Preset::C50 => fast("c50", 50, 2000),
        Preset::Streams2k => slow("streams2k", 2000),
        Preset::Streams10k => slow("streams10k", 10_000),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let presets = if args.cases.is_empty() {
        vec![Preset::C1, Preset::C50, Preset::Streams2k]
    } else {
        args.cases
    };
    let sink = if args.otlp_sink {
        Some(otlp::Sink::start().await?)
    } else {
        None
    };
    let service_env: Vec<(String, String)> =
        sink.iter().flat_map(|sink| sink.service_env()).collect();
    let mut reports: Vec<Vec<Report>> = presets.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.repeats.max(1) {
        for (preset, runs) in presets.iter().zip(reports.iter_mut()) {
            runs.push(run_case(case(*preset, &service_env)).await?);
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
