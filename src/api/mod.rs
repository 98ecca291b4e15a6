//! The gRPC transport: the only code that knows tonic and protobuf.
//!
//! Handlers convert the request, call the core and convert the result; errors go through
//! the one mapping in [`status`]. [`router`] assembles the whole server (our services,
//! health and reflection) so `main` and the tests serve the same thing.

pub mod a2a;
pub mod admin_service;
pub mod agent_registry_service;
pub mod agent_service;
pub mod auth;
mod console;
pub mod convert;
pub mod deadline;
pub mod decode_status;
pub mod front_door;
mod health;
pub mod incoming;
pub mod status;
pub mod stream;
pub mod tool_registry_service;

pub use health::{follow_health, set_not_serving, set_serving};

use std::sync::Arc;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::Router;
use tonic::transport::Server;
use tonic_web::GrpcWebLayer;
use tower::layer::util::{Identity, Stack};
use tower::util::MapResponseLayer;

use crate::a2a_pb;
use crate::a2a_pb::a2a_service_server::A2aServiceServer;
use crate::catalog::Catalog;
use crate::library::Library;
use crate::pb;
use crate::pb::admin_service_server::AdminServiceServer;
use crate::pb::agent_registry_server::AgentRegistryServer;
use crate::pb::agent_service_server::AgentServiceServer;
use crate::pb::tool_registry_server::ToolRegistryServer;
use crate::runner::Runner;
use crate::store::Store;
use crate::tools::ToolRegistry;
use admin_service::AdminApi;
use agent_registry_service::AgentRegistryApi;
use agent_service::AgentApi;
pub use auth::{caller_of, tenant_of, AdminGate, Gate, TENANT_HEADER};
pub use deadline::deadline_of;
use front_door::{BrowserSettings, FrontDoorLayer};
pub use incoming::{RouterError, TlsPem};
use tool_registry_service::ToolRegistryApi;

/// The assembled server: our services, health and reflection behind the front door (for
/// browsers), the gRPC-Web translation, and the layer that gives undecodable requests
/// their proper status.
pub type ApiRouter = Router<
    Stack<MapResponseLayer<ReclassifyFn>, Stack<GrpcWebLayer, Stack<FrontDoorLayer, Identity>>>,
>;

/// The response mapping of [`decode_status::reclassify`], as a nameable type.
pub type ReclassifyFn = fn(http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body>;

/// Transport settings of the API.
#[derive(Clone)]
pub struct ApiSettings {
    /// Longest a directly invoked tool may take.
    pub tool_timeout: Duration,
    /// Largest request message accepted; larger ones are `RESOURCE_EXHAUSTED`.
    pub max_request_bytes: usize,
    /// Who may call the agent and tool services.
    pub gate: Gate,
    /// Who may call the admin service.
    pub admin: AdminGate,
    /// Whether reflection is served.
    pub reflection: bool,
    /// Whether the A2A protocol's service is served (`[a2a] enabled`).
    pub a2a: bool,
    /// The gRPC address agent cards name.
    pub public_url: String,
    /// Which browsers may call, and by which hosts.
    pub browsers: BrowserSettings,
}

/// Our services, health and reflection (v1 and v1alpha, since grpcurl 1.8 speaks v1alpha),
/// over gRPC and gRPC-Web (HTTP/1.1 too, for browsers), with the A2A agent cards beside
/// them. The agent and tool services sit behind the API-key gate, the admin service behind
/// the admin token; health is open, so probes need no credential.
pub fn router(
    runner: Runner,
    store: Store,
    catalog: Catalog,
    tools: Arc<ToolRegistry>,
    library: Library,
    settings: ApiSettings,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> Result<ApiRouter, RouterError> {
    let reflection = || {
        let builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        match settings.a2a {
            true => builder.register_encoded_file_descriptor_set(a2a_pb::FILE_DESCRIPTOR_SET),
            false => builder,
        }
    };
    let limit = settings.max_request_bytes;
    let reclassify: ReclassifyFn = decode_status::reclassify;
    let cards = settings.a2a.then(|| {
        Arc::new(a2a::card::CardPages::new(
            runner.clone(),
            store.clone(),
            settings.gate.clone(),
            settings.public_url.clone(),
        )) as Arc<dyn crate::telemetry::Pages>
    });
    let server = Server::builder().accept_http1(true);
    let (v1, v1alpha) = if settings.reflection {
        (
            Some(reflection().build_v1()?),
            Some(reflection().build_v1alpha()?),
        )
    } else {
        (None, None)
    };
    let keys = Arc::clone(&settings.gate.keys);
    let a2a = settings.a2a.then(|| {
        InterceptedService::new(
            A2aServiceServer::new(a2a::A2aApi::new(runner.clone(), store.clone()))
                .max_decoding_message_size(limit),
            settings.gate.clone(),
        )
    });
    Ok(server
        .layer(FrontDoorLayer::new(settings.browsers, cards))
        .layer(GrpcWebLayer::new())
        .layer(MapResponseLayer::new(reclassify))
        .add_service(health)
        .add_optional_service(v1)
        .add_optional_service(v1alpha)
        .add_optional_service(a2a)
        .add_service(InterceptedService::new(
            AgentServiceServer::new(AgentApi::new(runner, store.clone()))
                .max_decoding_message_size(limit),
            settings.gate.clone(),
        ))
        .add_service(InterceptedService::new(
            ToolRegistryServer::new(ToolRegistryApi::new(catalog, tools, settings.tool_timeout))
                .max_decoding_message_size(limit),
            settings.gate.clone(),
        ))
        .add_service(InterceptedService::new(
            AgentRegistryServer::new(AgentRegistryApi::new(library))
                .max_decoding_message_size(limit),
            settings.gate,
        ))
        .add_service(InterceptedService::new(
            AdminServiceServer::new(AdminApi::new(keys, store)).max_decoding_message_size(limit),
            settings.admin,
        )))
}
