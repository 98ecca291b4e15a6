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
use agent_runner::config::{Config, LogFormat, ServeArgs};
use agent_runner::telemetry::traces;

/// jemalloc, with the options in `.cargo/config.toml`: at C=50 a run costs about a fifth
/// less CPU than with glibc's allocator, for a peak 2 MiB higher, and long answers' buffers
/// go back to the system sooner (docs/performance.md).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let Cli { client, command } = Cli::parse();
    if let Err(usage) = cli::args::check_model(&command) {
        usage.exit();
    }
    match dispatch(&client, command).await {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        // A reader that went away (`| head`) is not an error to report.
        Err(error) if cli::is_broken_pipe(&error) => ExitCode::from(141),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(cli::error_exit_code(&error))
        }
    }
}

async fn dispatch(client: &ClientArgs, command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Serve(args) => serve(args).await.map(|()| Outcome::Completed),
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

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = Config::load(&args)?;
    let tracing = traces::init(
        config.server.log_format == LogFormat::Json,
        config.cluster.id(),
    )?;
    if tracing.exports() {
        tracing::info!("exporting spans over OTLP");
    }
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
