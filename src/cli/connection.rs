//! Reaching a running server: the channel (plain or TLS), the caller's credentials on
//! every call, and the errors a person at a terminal reads.

use anyhow::Context;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use super::args::ClientArgs;
use crate::pb::agent_registry_client::AgentRegistryClient;
use crate::pb::agent_service_client::AgentServiceClient;
use crate::pb::tool_registry_client::ToolRegistryClient;

/// The server could not be reached at all: exit code 3, so a script can tell it from a
/// refusal.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the server {0}")]
pub struct Unreachable(pub String);

/// How long reaching the server may take: a command never hangs on an address that
/// swallows packets.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
        .connect_timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .map_err(|err| anyhow::Error::new(Unreachable(format!("at {host}: {}", source_text(&err)))))
}

/// The innermost cause of a transport error: "tcp connect error: Connection refused".
fn source_text(err: &dyn std::error::Error) -> String {
    let mut texts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        texts.push(cause.to_string());
        source = cause.source();
    }
    texts.retain(|t| t != "transport error");
    // Each layer tends to repeat its cause's words; keep only what a layer adds.
    let mut kept: Vec<String> = Vec::new();
    for text in texts {
        if !kept.last().is_some_and(|last| last.contains(&text)) {
            kept.push(text);
        }
    }
    kept.join(": ")
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

/// Puts the caller's API key (and tenant, for servers without keys) on every call.
#[derive(Clone)]
pub struct Credentials {
    bearer: Option<MetadataValue<Ascii>>,
    tenant: Option<MetadataValue<Ascii>>,
}

impl Credentials {
    /// From `--api-key` and `--tenant-id`; refuses values a header cannot carry.
    pub fn of(args: &ClientArgs) -> anyhow::Result<Self> {
        let bearer = args
            .api_key
            .as_deref()
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .map(|key| format!("Bearer {key}").parse())
            .transpose()
            .map_err(|_| anyhow::anyhow!("the API key has characters a header cannot carry"))?;
        let tenant = args
            .tenant_id
            .as_deref()
            .filter(|tenant| !tenant.is_empty())
            .map(str::parse)
            .transpose()
            .map_err(|_| anyhow::anyhow!("--tenant-id has characters a header cannot carry"))?;
        Ok(Self { bearer, tenant })
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(bearer) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
        }
        if let Some(tenant) = &self.tenant {
            request.metadata_mut().insert("x-tenant-id", tenant.clone());
        }
        Ok(request)
    }
}

/// A channel whose calls carry the caller's credentials.
pub type Authed = InterceptedService<Channel, Credentials>;

/// A client of the agent service for `args`.
pub async fn agents(args: &ClientArgs) -> anyhow::Result<AgentServiceClient<Authed>> {
    let credentials = Credentials::of(args)?;
    let channel = connect(args).await?;
    Ok(AgentServiceClient::with_interceptor(channel, credentials))
}

/// A client of the tool registry for `args`.
pub async fn registry(args: &ClientArgs) -> anyhow::Result<ToolRegistryClient<Authed>> {
    let credentials = Credentials::of(args)?;
    let channel = connect(args).await?;
    Ok(ToolRegistryClient::with_interceptor(channel, credentials))
}

/// A client of the agent registry for `args`.
pub async fn library(args: &ClientArgs) -> anyhow::Result<AgentRegistryClient<Authed>> {
    let credentials = Credentials::of(args)?;
    let channel = connect(args).await?;
    Ok(AgentRegistryClient::with_interceptor(channel, credentials))
}

/// A refusal as a person reads it, the gRPC code first (`INVALID_ARGUMENT: …`); a server
/// that went away is [`Unreachable`].
pub fn status_error(status: Status) -> anyhow::Error {
    if status.code() == tonic::Code::Unavailable {
        return anyhow::Error::new(Unreachable(format!(
            "(it is unavailable: {})",
            status.message()
        )));
    }
    anyhow::anyhow!("{}: {}", code_name(status.code()), status.message())
}

/// `InvalidArgument` → `INVALID_ARGUMENT`, as gRPC documents its codes.
pub fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_as_grpc_documents_them() {
        assert_eq!(code_name(tonic::Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(tonic::Code::NotFound), "NOT_FOUND");
        assert_eq!(code_name(tonic::Code::Unauthenticated), "UNAUTHENTICATED");
    }
}
