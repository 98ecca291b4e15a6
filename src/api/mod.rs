//! The gRPC transport: the only code that knows tonic and protobuf.
//!
//! Handlers convert the request, call the core and convert the result; errors go through
//! the one mapping in [`status`]. [`router`] assembles the whole server (our services,
//! health and reflection) so `main` and the tests serve the same thing.

pub mod agent_service;
pub mod convert;
pub mod decode_status;
pub mod status;
pub mod stream;
pub mod tool_registry_service;

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::server::Router;
use tonic::transport::Server;
use tonic::{Request, Status};
use tonic_health::server::HealthReporter;
use tower::layer::util::{Identity, Stack};
use tower::util::MapResponseLayer;

use crate::catalog::Catalog;
use crate::domain::Tenant;
use crate::pb;
use crate::pb::agent_service_server::AgentServiceServer;
use crate::pb::tool_registry_server::ToolRegistryServer;
use crate::runner::Runner;
use crate::store::Store;
use crate::tools::ToolRegistry;
use agent_service::AgentApi;
use tool_registry_service::ToolRegistryApi;

/// Metadata key naming the tenant; absent means `default`.
pub const TENANT_HEADER: &str = "x-tenant-id";

/// The tenant a request acts for.
pub fn tenant_of<T>(request: &Request<T>) -> Result<Tenant, Status> {
    let Some(value) = request.metadata().get(TENANT_HEADER) else {
        return Ok(Tenant::default_tenant());
    };
    value
        .to_str()
        .ok()
        .and_then(Tenant::parse)
        .ok_or_else(|| status::invalid(TENANT_HEADER, "must be 1 to 64 printable characters"))
}

/// The caller's deadline from the `grpc-timeout` header (`<digits><unit>`, units H M S m u n).
pub fn deadline_of<T>(request: &Request<T>) -> Option<Duration> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    match unit {
        "H" => Some(Duration::from_secs(amount.saturating_mul(3600))),
        "M" => Some(Duration::from_secs(amount.saturating_mul(60))),
        "S" => Some(Duration::from_secs(amount)),
        "m" => Some(Duration::from_millis(amount)),
        "u" => Some(Duration::from_micros(amount)),
        "n" => Some(Duration::from_nanos(amount)),
        _ => None,
    }
}

/// Marks both services serving; called once the store is open.
pub async fn set_serving(reporter: &HealthReporter) {
    reporter.set_serving::<AgentServiceServer<AgentApi>>().await;
    reporter
        .set_serving::<ToolRegistryServer<ToolRegistryApi>>()
        .await;
}

/// Marks both services not serving; called as shutdown begins.
pub async fn set_not_serving(reporter: &HealthReporter) {
    reporter
        .set_not_serving::<AgentServiceServer<AgentApi>>()
        .await;
    reporter
        .set_not_serving::<ToolRegistryServer<ToolRegistryApi>>()
        .await;
}

/// Errors building the server.
#[derive(Debug, thiserror::Error)]
#[error("could not build the reflection service: {0}")]
pub struct RouterError(#[from] tonic_reflection::server::Error);

/// The assembled server: our services, health and reflection behind the layer that gives
/// undecodable requests their proper status.
pub type ApiRouter = Router<Stack<MapResponseLayer<ReclassifyFn>, Identity>>;

/// The response mapping of [`decode_status::reclassify`], as a nameable type.
pub type ReclassifyFn = fn(http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body>;

/// Transport settings of the API.
#[derive(Debug, Clone, Copy)]
pub struct ApiSettings {
    /// Longest a directly invoked tool may take.
    pub tool_timeout: Duration,
    /// Largest request message accepted; larger ones are `RESOURCE_EXHAUSTED`.
    pub max_request_bytes: usize,
}

/// Our services, health and reflection (v1 and v1alpha, since grpcurl 1.8 speaks v1alpha).
pub fn router(
    runner: Runner,
    store: Store,
    catalog: Catalog,
    tools: Arc<ToolRegistry>,
    settings: ApiSettings,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> Result<ApiRouter, RouterError> {
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let limit = settings.max_request_bytes;
    let reclassify: ReclassifyFn = decode_status::reclassify;
    Ok(Server::builder()
        .layer(MapResponseLayer::new(reclassify))
        .add_service(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(
            AgentServiceServer::new(AgentApi::new(runner, store)).max_decoding_message_size(limit),
        )
        .add_service(
            ToolRegistryServer::new(ToolRegistryApi::new(catalog, tools, settings.tool_timeout))
                .max_decoding_message_size(limit),
        ))
}
