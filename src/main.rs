//! `agent-runner`: `serve` runs the service; `health` probes a running one (for container
//! health checks, with no extra binary in the image); `keys` manages API keys.

use anyhow::Context;
use clap::Parser;
use tokio::net::TcpListener;

use agent_runner::app::{self, Extensions};
use agent_runner::cli;
use agent_runner::config::{Cli, Command, Config, KeysArgs, LogFormat, ServeArgs};
use agent_runner::telemetry::traces;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Cli { command } = Cli::parse();
    match command {
        Command::Serve(args) => serve(args).await,
        Command::Health(args) => {
            cli::check_health(&args).await?;
            println!("SERVING");
            Ok(())
        }
        Command::Keys(args) => keys(args).await,
    }
}

async fn keys(args: KeysArgs) -> anyhow::Result<()> {
    let token = std::env::var(cli::ADMIN_TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .with_context(|| format!("set {} to the server's admin token", cli::ADMIN_TOKEN_ENV))?;
    for line in cli::keys(&args.client, token.trim(), args.command).await? {
        println!("{line}");
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    return_large_allocations();
    let config = Config::load(&args)?;
    let tracing = traces::init(config.server.log_format == LogFormat::Json)?;
    if tracing.exports() {
        tracing::info!("exporting spans over OTLP");
    }
    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let served = app::serve(listener, config, Extensions::default(), shutdown_signal()).await;
    tracing.shutdown();
    Ok(served?)
}

/// Makes glibc give large buffers back to the system when they are freed.
///
/// glibc raises its mmap threshold each time a large mapped block is freed, after which
/// blocks of a few megabytes (a long answer, an event batch) come from the heap and stay
/// there: resident memory then keeps what the largest answers once needed. Fixing the
/// threshold (and trimming) keeps such blocks mapped and returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_large_allocations() {
    // SAFETY: mallopt only sets allocator parameters; called once, before any other thread
    // of ours allocates in earnest.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_large_allocations() {}

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
