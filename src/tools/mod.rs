//! Tools an agent may call: the registry of providers, the engine that runs one call, and
//! the built-in providers.
//!
//! Built-in tools are written against the typed [`Tool`] trait; the registry stores every
//! tool as an object-safe [`ErasedTool`], which HTTP, MCP and client-side tools implement
//! directly. This room knows neither tonic nor a database.

mod agents;
pub mod builtin;
pub mod cache;
mod client;
mod error;
pub mod http_api;
pub mod http_body;
pub mod knowledge;
pub mod mcp;
pub mod names;
pub mod nulls;
pub mod observation;
pub mod outbound;
pub mod providers;
pub mod records;
mod redacting;
mod registry;
pub mod schema;
mod toolset;

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use agents::{add_agent_tools, SubAgentTool, AGENT_PROVIDER};
pub use client::{add_client_tools, ClientToolSpec, CLIENT_PROVIDER};
pub use error::{RegistryError, ToolError};
pub use outbound::{OutboundError, OutboundPolicy};
pub use providers::{ProviderError, ProviderSettings};
pub use registry::{Provider, RegisteredTool, ToolRegistry, ToolSnapshot};
pub use toolset::{Invocation, OfferedTool, ToolRef, ToolSet, ToolSetError};

pub use crate::domain::ProviderKind;

/// What the model is told about a tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolDescriptor {
    /// Provider name.
    pub provider: String,
    /// Tool name, unique within its provider, valid for every model provider.
    pub name: String,
    /// The name in the document or on the server, when it is not a valid tool name (or
    /// was taken); calls may name the tool by it.
    pub original_name: Option<String>,
    /// Arguments that carry a file (base64, a `data:` URL, or the id of a file of the
    /// run, which the run replaces with the file).
    pub file_fields: Vec<String>,
    /// What the tool does, written for the model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
    /// Whether a call may be made again with the effect of once (a read, an idempotent
    /// write): a call cut by the loss of its run's owner is then made again; otherwise its
    /// outcome is reported unknown.
    pub idempotent: bool,
}

tokio::task_local! {
    /// The `Idempotency-Key` of the call being made, set by [`ToolSet::invoke_keyed`] for
    /// tools that forward it (HTTP APIs); kept out of [`ErasedTool::call`], which every
    /// other tool would carry unused.
    static CALL_KEY: String;
}

/// The key of the call being made, if the caller gave one.
fn call_key() -> Option<String> {
    CALL_KEY.try_with(Clone::clone).ok()
}

/// What a tool returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// The observation text the model sees.
    pub text: String,
    /// Files for the user (an image, a report …), announced and stored with the message.
    pub files: Vec<ToolFile>,
    /// Passages the answer is made of, as evidence (knowledge tools).
    pub resources: Vec<crate::domain::RetrieverResource>,
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self {
            text,
            ..Self::default()
        }
    }
}

/// A file a tool produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// A name for people.
    pub name: String,
    /// MIME type.
    pub mime_type: String,
    /// The bytes, or where they are.
    pub content: FileContent,
}

/// The file name extension for a MIME type, for names people and APIs see
/// (`image/png` → `png`, `text/plain` → `txt`).
pub fn extension_for(mime_type: &str) -> &str {
    let subtype = mime_type
        .split(';')
        .next()
        .and_then(|m| m.rsplit_once('/'))
        .map_or("", |(_, subtype)| subtype.trim());
    match subtype {
        "plain" => "txt",
        "jpeg" => "jpg",
        "svg+xml" => "svg",
        "mpeg" => "mp3",
        "octet-stream" | "" => "bin",
        other => other.rsplit('+').next().unwrap_or(other),
    }
}

/// A file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileContent {
    /// The bytes, stored by the service.
    Bytes(Vec<u8>),
    /// A URL the client fetches.
    Url(String),
}

/// A tool as the registry stores it: any implementation, called with JSON arguments that
/// the engine has already validated against [`ToolDescriptor::parameters`].
#[async_trait::async_trait]
pub trait ErasedTool: Send + Sync {
    /// Name, description and argument schema.
    fn descriptor(&self) -> &ToolDescriptor;

    /// Runs the tool.
    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError>;
}

/// A tool with typed arguments, for tools written in Rust.
pub trait Tool: Send + Sync + 'static {
    /// Name the model calls it by.
    const NAME: &'static str;
    /// Arguments, deserialized from the model's JSON.
    type Args: DeserializeOwned + Send;

    /// What the tool does, written for the model.
    fn description(&self) -> String;

    /// JSON Schema of [`Self::Args`].
    fn parameters(&self) -> Value;

    /// Whether a call may be made twice with the effect of once (true of tools that only
    /// read or compute).
    const IDEMPOTENT: bool = false;

    /// Runs the tool and returns the observation text.
    fn call(&self, args: Self::Args) -> impl Future<Output = Result<String, ToolError>> + Send;
}

/// Adapts a typed [`Tool`] to [`ErasedTool`].
pub struct Typed<T: Tool> {
    tool: T,
    descriptor: ToolDescriptor,
}

impl<T: Tool> Typed<T> {
    /// Wraps `tool` as a tool of `provider`.
    pub fn erase(provider: &str, tool: T) -> Arc<dyn ErasedTool> {
        let descriptor = ToolDescriptor {
            provider: provider.to_owned(),
            name: T::NAME.to_owned(),
            description: tool.description(),
            parameters: tool.parameters(),
            idempotent: T::IDEMPOTENT,
            ..ToolDescriptor::default()
        };
        Arc::new(Self { tool, descriptor })
    }
}

#[async_trait::async_trait]
impl<T: Tool> ErasedTool for Typed<T> {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let args = serde_json::from_value(Value::Object(arguments))
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        self.tool.call(args).await.map(ToolOutput::from)
    }
}
