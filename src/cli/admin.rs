//! Operator commands: `health` for container probes and `keys` for API keys.

use anyhow::Context;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::Request;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::args::{ClientArgs, KeysCommand};
use super::connection::{connect, status_error, Unreachable};
use super::proto_json::set_fields;
use crate::pb;
use crate::pb::admin_service_client::AdminServiceClient;

/// The environment variable holding the admin token.
pub const ADMIN_TOKEN_ENV: &str = "AGENT_RUNNER_ADMIN_TOKEN";

/// How long a health check waits for its answer.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Succeeds when both services answer `SERVING`.
pub async fn check_health(args: &ClientArgs) -> anyhow::Result<()> {
    let mut client = HealthClient::new(connect(args).await?);
    for service in ["agentrunner.v1.AgentService", "agentrunner.v1.ToolRegistry"] {
        let check = client.check(HealthCheckRequest {
            service: service.to_owned(),
        });
        // A probe answers within its time or fails: one that hangs holds its caller.
        let status = tokio::time::timeout(HEALTH_TIMEOUT, check)
            .await
            .map_err(|_| {
                anyhow::Error::new(Unreachable(format!(
                    "at {} (no answer within {} s)",
                    args.addr,
                    HEALTH_TIMEOUT.as_secs()
                )))
            })?
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
            limits,
        } => {
            let created = client
                .create_api_key(with_token(
                    pb::CreateApiKeyRequest {
                        tenant,
                        name,
                        limits: Some(limits.message()?),
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

/// The limits a key sets beyond the three a key line always shows, as ` name=value`
/// pairs in the message's JSON; empty when none.
fn optional_limits(limits: &pb::TenantLimits) -> String {
    let shown = ["max_concurrent_runs", "runs_per_minute", "tokens_per_day"];
    set_fields("agentrunner.v1.TenantLimits", limits)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| !shown.contains(&name.as_str()))
        .map(|(name, value)| {
            // A string (a 64-bit number, a decimal) shows without its quotes.
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            format!(" {name}={value}")
        })
        .collect()
}

/// `id  name  created  last-used  limits`, tab-separated.
fn key_line(key: &pb::ApiKey) -> String {
    let time = |t: &Option<prost_types::Timestamp>| {
        t.as_ref()
            .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
            .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339())
    };
    let limits = key.limits.clone().unwrap_or_default();
    let name = if key.name.is_empty() { "-" } else { &key.name };
    format!(
        "{}\t{name}\tcreated {}\tlast used {}\tlimits concurrent={} per_minute={} tokens_per_day={}{}",
        key.id,
        time(&key.created_at),
        time(&key.last_used_at),
        limits.max_concurrent_runs,
        limits.runs_per_minute,
        limits.tokens_per_day,
        optional_limits(&limits)
    )
}
