//! The client side of the command line: `health` and `keys` against a running server.
//!
//! Errors are for a person at a terminal, so they are `anyhow` chains; the server's status
//! code leads each one.

use anyhow::Context;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Request;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::config::{ClientArgs, KeysCommand};
use crate::pb;
use crate::pb::admin_service_client::AdminServiceClient;

/// The environment variable holding the admin token.
pub const ADMIN_TOKEN_ENV: &str = "AGENT_RUNNER_ADMIN_TOKEN";

/// A channel to the server `args` name, over TLS when a CA is given.
pub async fn connect(args: &ClientArgs) -> anyhow::Result<Channel> {
    let host = reachable(&args.addr);
    let scheme = if args.tls_ca.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{host}"))
        .with_context(|| format!("--addr {:?} is not host:port", args.addr))?;
    if let Some(ca) = &args.tls_ca {
        let read = |path: &std::path::PathBuf| {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        };
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let Some(name) = &args.tls_server_name {
            tls = tls.domain_name(name.clone());
        }
        if let (Some(cert), Some(key)) = (&args.tls_client_cert, &args.tls_client_key) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("cannot connect to {host}"))
}

/// `host:port` to dial: a wildcard listen address is not something to connect to, so it
/// becomes loopback on the same port.
fn reachable(addr: &str) -> String {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(socket) if socket.ip().is_unspecified() => {
            let loopback: std::net::IpAddr = if socket.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            };
            std::net::SocketAddr::new(loopback, socket.port()).to_string()
        }
        _ => addr.to_owned(),
    }
}

/// Succeeds when both services answer `SERVING`.
pub async fn check_health(args: &ClientArgs) -> anyhow::Result<()> {
    let mut client = HealthClient::new(connect(args).await?);
    for service in ["agentrunner.v1.AgentService", "agentrunner.v1.ToolRegistry"] {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .map_err(status_error)?
            .into_inner()
            .status;
        anyhow::ensure!(
            status == ServingStatus::Serving as i32,
            "{service} is not serving"
        );
    }
    Ok(())
}

/// Runs a `keys` command with `admin_token`; returns the lines to print.
pub async fn keys(
    args: &ClientArgs,
    admin_token: &str,
    command: KeysCommand,
) -> anyhow::Result<Vec<String>> {
    let mut client = AdminServiceClient::new(connect(args).await?);
    let bearer: MetadataValue<_> = format!("Bearer {admin_token}")
        .parse()
        .context("the admin token has characters a header cannot carry")?;
    match command {
        KeysCommand::Create {
            tenant,
            name,
            max_concurrent_runs,
            runs_per_minute,
            tokens_per_day,
        } => {
            let created = client
                .create_api_key(with_token(
                    pb::CreateApiKeyRequest {
                        tenant,
                        name,
                        limits: Some(pb::TenantLimits {
                            max_concurrent_runs,
                            runs_per_minute,
                            tokens_per_day,
                        }),
                    },
                    &bearer,
                ))
                .await
                .map_err(status_error)?
                .into_inner();
            let key = created.key.unwrap_or_default();
            Ok(vec![
                format!(
                    "created key {} for tenant {}; it is shown only now:",
                    key.id, key.tenant
                ),
                created.secret,
            ])
        }
        KeysCommand::List { tenant } => {
            let listed = client
                .list_api_keys(with_token(pb::ListApiKeysRequest { tenant }, &bearer))
                .await
                .map_err(status_error)?
                .into_inner();
            Ok(listed.keys.iter().map(key_line).collect())
        }
        KeysCommand::Revoke { id } => {
            client
                .revoke_api_key(with_token(
                    pb::RevokeApiKeyRequest { id: id.clone() },
                    &bearer,
                ))
                .await
                .map_err(status_error)?;
            Ok(vec![format!("revoked key {id}")])
        }
    }
}

fn with_token<T>(message: T, bearer: &MetadataValue<Ascii>) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", bearer.clone());
    request
}

/// `id  name  created  last-used  limits`, tab-separated.
fn key_line(key: &pb::ApiKey) -> String {
    let time = |t: &Option<prost_types::Timestamp>| {
        t.as_ref()
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
            .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339())
    };
    let limits = key.limits.unwrap_or_default();
    let name = if key.name.is_empty() { "-" } else { &key.name };
    format!(
        "{}\t{name}\tcreated {}\tlast used {}\tlimits concurrent={} per_minute={} tokens_per_day={}",
        key.id,
        time(&key.created_at),
        time(&key.last_used_at),
        limits.max_concurrent_runs,
        limits.runs_per_minute,
        limits.tokens_per_day
    )
}

fn status_error(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", status.code(), status.message())
}
