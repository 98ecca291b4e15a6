//! `agent-runner`: `serve` runs the service; `health` probes a running one (for container
//! health checks, with no extra binary in the image).

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use tokio::net::TcpListener;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use agent_runner::app::{self, Extensions};
use agent_runner::config::{Cli, Command, Config, LogFormat, ServeArgs};
use agent_runner::telemetry::traces;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Cli { command } = Cli::parse();
    match command {
        Command::Serve(args) => serve(args).await,
        Command::Health(args) => check_health(args.addr).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
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

async fn check_health(addr: SocketAddr) -> anyhow::Result<()> {
    // A wildcard listen address is not something to connect to; probe loopback instead.
    let host = if addr.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{host}"))?
        .connect()
        .await
        .with_context(|| format!("cannot connect to {host}"))?;
    let mut client = HealthClient::new(channel);
    for service in ["agentrunner.v1.AgentService", "agentrunner.v1.ToolRegistry"] {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await?
            .into_inner()
            .status;
        anyhow::ensure!(
            status == ServingStatus::Serving as i32,
            "{service} is not serving"
        );
    }
    println!("SERVING");
    Ok(())
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
