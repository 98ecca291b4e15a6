//! `agent-runner`: `serve` runs the service; `run`, `chat`, `attach`, `show` and `tools`
//! are its terminal client; `health` probes a running one (for container health checks,
//! with no extra binary in the image); `keys` manages API keys.
//!
//! Exit codes: 0 done (a run completed), 1 failed (a run's error, or the server refused:
//! its gRPC status is on stderr), 2 bad command line, 3 server unreachable, 130 cancelled.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio::net::TcpListener;

use agent_runner::app::{self, Extensions};
use agent_runner::cli::args::{Cli, ClientArgs, Command, KeysArgs};
use agent_runner::cli::{self, Outcome};
use agent_runner::config::{Config, LogFormat};
use agent_runner::telemetry::traces;

/// jemalloc, with the options in `.cargo/config.toml`: at C=50 a run costs about a fifth
/// less CPU than with glibc's allocator, for a peak 2 MiB higher, and long answers' buffers
/// go back to the system sooner (docs/performance-history.md).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let Cli { client, command } = Cli::parse();
    if let Err(usage) = cli::args::check_model(&command) {
        usage.exit();
    }
    match start(&client, command) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        // A reader that went away (`| head`) is not an error to report.
        Err(error) if cli::is_broken_pipe(&error) => ExitCode::from(141),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(cli::error_exit_code(&error))
        }
    }
}

/// Runs `command` on a runtime of its own: `serve`'s configuration is read first, since
/// the runtime's size is one of its settings.
fn start(client: &ClientArgs, command: Command) -> anyhow::Result<Outcome> {
    let Command::Serve(args) = &command else {
        return runtime(None)?.block_on(dispatch(client, command));
    };
    let config = Config::load(args)?;
    runtime(config.server.worker_threads)?.block_on(serve(config))?;
    Ok(Outcome::Completed)
}

/// A multi-threaded runtime of `workers` threads; unset, tokio's own choice (one per core
/// the process may use, or `TOKIO_WORKER_THREADS`).
fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.enable_all().build()
}

async fn dispatch(client: &ClientArgs, command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Serve(_) => anyhow::bail!("`serve` runs on a runtime of its own"),
        Command::Run(args) => cli::run(client, args).await,
        Command::Chat(args) => cli::chat(client, args).await,
        Command::Attach(args) => cli::attach(client, args).await,
        Command::Show(args) => print(cli::show(client, args).await?),
        Command::Tools(args) => print(cli::tools(client, args).await?),
        Command::Health => {
            cli::check_health(client).await?;
            println!("SERVING");
            Ok(Outcome::Completed)
        }
        Command::Keys(args) => keys(client, args).await.map(|()| Outcome::Completed),
        Command::Agents(args) => print(cli::agents(client, args.command).await?),
    }
}

fn print(text: String) -> anyhow::Result<Outcome> {
    print!("{text}");
    Ok(Outcome::Completed)
}

async fn keys(client: &ClientArgs, args: KeysArgs) -> anyhow::Result<()> {
    let token = std::env::var(cli::ADMIN_TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .with_context(|| format!("set {} to the server's admin token", cli::ADMIN_TOKEN_ENV))?;
    for line in cli::keys(client, token.trim(), args.command).await? {
        println!("{line}");
    }
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let tracing = traces::init(
        config.server.log_format == LogFormat::Json,
        config.cluster.id(),
    )?;
    if tracing.exports() {
        tracing::info!("exporting spans over OTLP");
    }
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(worker_threads = workers, "runtime");
    if let Some(limit) = agent_runner::net::raise_descriptor_limit() {
        tracing::info!(limit, "open-descriptor limit");
    }
    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let served = app::serve(listener, config, Extensions::default(), shutdown_signal()).await;
    tracing.shutdown();
    Ok(served?)
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
