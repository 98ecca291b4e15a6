//! What a caller adds to the configured service.

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::llm::{ChatModel, ModelEntry};
use crate::store::Store;
use crate::tools::Provider;

/// Additions to what the configuration describes; how tests plug in scripted models and
/// deterministic tools while serving the real API.
#[derive(Default)]
pub struct Extensions {
    /// Extra tool providers, registered beside the built-in ones.
    pub tool_providers: Vec<Provider>,
    /// Extra LLM providers: name, client, known models.
    pub model_providers: Vec<(String, Arc<dyn ChatModel>, Vec<ModelEntry>)>,
    /// A listener for `/metrics` bound by the caller (tests bind port 0 and read it back);
    /// otherwise `server.metrics_listen` is bound, if set.
    pub metrics_listener: Option<TcpListener>,
    /// A store the caller opened (with [`super::open_store`]) and keeps a handle to; otherwise the
    /// configured one is opened.
    pub store: Option<Store>,
}
