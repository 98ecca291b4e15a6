//! Building a registered provider's tools from its stored definition.

use std::sync::Arc;

use super::cache::CachedTool;
use super::http_api::{self, openapi, ApiSettings, Auth};
use super::knowledge::{KnowledgeSettings, KnowledgeTool};
use super::mcp::{McpConnection, McpSettings, McpTool};
use super::outbound::{OutboundError, OutboundPolicy};
use super::{ErasedTool, Provider, RegistryError};
use crate::domain::{ErrorKind, ProviderRecord, ProviderSource};

/// A provider definition that cannot be turned into tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The OpenAPI document is unusable.
    #[error("provider.source.openapi.spec {0}")]
    Spec(#[from] openapi::SpecError),
    /// No absolute server URL in the request or the document.
    #[error(
        "provider.source.openapi.server_url is required: the document names no absolute server URL"
    )]
    NoServerUrl,
    /// A tool's schema does not compile.
    #[error("provider.source: {0}")]
    Schema(#[from] RegistryError),
    /// The MCP server could not be reached or listed.
    #[error("provider.source.mcp.url: {0}")]
    Mcp(String),
    /// `idempotent_tools` names a tool the provider does not have.
    #[error("provider.idempotent_tools[{index}]: the provider has no tool \"{name}\"")]
    UnknownIdempotentTool {
        /// Where in the list.
        index: usize,
        /// The name given.
        name: String,
    },
    /// A URL the outbound policy refuses.
    #[error("{field} {source}")]
    Outbound {
        /// The request field holding the URL.
        field: &'static str,
        /// Why it is refused.
        source: OutboundError,
    },
}

impl ProviderError {
    /// Failures of the definition are the caller's; an unreachable server may come back.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Spec(_)
            | Self::NoServerUrl
            | Self::Schema(_)
            | Self::Outbound { .. }
            | Self::UnknownIdempotentTool { .. } => ErrorKind::InvalidArgument,
            Self::Mcp(_) => ErrorKind::FailedPrecondition,
        }
    }
}

/// Limits shared by the tools of registered providers.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Longest observation a tool returns, in bytes.
    pub max_output_bytes: usize,
    /// Largest file (or structured answer) a tool call may return, in bytes.
    pub max_file_bytes: usize,
    /// Largest OpenAPI document accepted, in bytes.
    pub max_spec_bytes: usize,
    /// Most operations (tools) one OpenAPI document may define.
    pub max_operations: usize,
    /// Largest JSON Schema of one tool once its `$ref`s are inlined, in bytes.
    pub max_schema_bytes: usize,
    /// Longest any step with an MCP server may take (connect, initialize, list, call).
    pub mcp_timeout: std::time::Duration,
    /// Where tools may send requests.
    pub outbound: Arc<OutboundPolicy>,
}

impl ProviderSettings {
    /// How MCP connections reach their servers.
    pub fn mcp(&self, http: &reqwest::Client) -> McpSettings {
        McpSettings {
            max_output_bytes: self.max_output_bytes,
            max_file_bytes: self.max_file_bytes,
            timeout: self.mcp_timeout,
            http: http.clone(),
        }
    }

    /// The bounds on an OpenAPI document.
    pub fn spec_limits(&self) -> openapi::SpecLimits {
        openapi::SpecLimits {
            max_bytes: self.max_spec_bytes,
            max_operations: self.max_operations,
            max_schema_bytes: self.max_schema_bytes,
        }
    }
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            max_output_bytes: 16 * 1024,
            max_file_bytes: 10 * 1024 * 1024,
            max_spec_bytes: 2 * 1024 * 1024,
            max_operations: 256,
            max_schema_bytes: 64 * 1024,
            mcp_timeout: std::time::Duration::from_secs(30),
            outbound: Arc::default(),
        }
    }
}

/// Refuses a source whose URL the outbound policy forbids before any request is made.
fn check_urls(source: &ProviderSource, settings: &ProviderSettings) -> Result<(), ProviderError> {
    let (field, url) = match source {
        ProviderSource::OpenApi { server_url, .. } if server_url.is_empty() => return Ok(()),
        ProviderSource::OpenApi { server_url, .. } => {
            ("provider.source.openapi.server_url", server_url)
        }
        ProviderSource::Knowledge { endpoint, .. } => {
            ("provider.source.knowledge.endpoint", endpoint)
        }
        ProviderSource::Mcp { url } => ("provider.source.mcp.url", url),
    };
    settings
        .outbound
        .check_url(url)
        .map_err(|source| ProviderError::Outbound { field, source })
}

/// Reads what a definition needs from outside before it is stored: an MCP server's tools.
pub async fn discover(
    mut record: ProviderRecord,
    settings: &ProviderSettings,
    http: &reqwest::Client,
) -> Result<ProviderRecord, ProviderError> {
    check_urls(&record.source, settings)?;
    if let ProviderSource::Mcp { url } = &record.source {
        let connection = McpConnection::new(
            url,
            record.credentials.get("bearer_token").cloned(),
            settings.mcp(http),
        );
        record.mcp_tools = connection
            .list_tools()
            .await
            .map_err(|err| ProviderError::Mcp(err.to_string()))?;
    }
    Ok(record)
}

/// The provider a stored definition describes.
pub fn build(
    record: &ProviderRecord,
    settings: &ProviderSettings,
    http: &reqwest::Client,
) -> Result<Provider, ProviderError> {
    check_urls(&record.source, settings)?;
    let (description, tools): (String, Vec<Arc<dyn ErasedTool>>) = match &record.source {
        ProviderSource::OpenApi { spec, server_url } => {
            let document = openapi::parse(spec, &settings.spec_limits())?;
            let base_url = Some(server_url.clone())
                .filter(|url| !url.is_empty())
                .or(document.server_url.clone())
                .ok_or(ProviderError::NoServerUrl)?;
            settings
                .outbound
                .check_url(&base_url)
                .map_err(|source| ProviderError::Outbound {
                    field: "provider.source.openapi.server_url",
                    source,
                })?;
            let api = ApiSettings {
                base_url,
                auth: Auth::from_credentials(&record.credentials, document.api_key.as_ref()),
                max_output_bytes: settings.max_output_bytes,
                max_file_bytes: settings.max_file_bytes,
            };
            let tools = http_api::operation_tools(&record.name, document.operations, api, http);
            (document.description, tools)
        }
        ProviderSource::Knowledge {
            endpoint,
            knowledge_id,
            top_k,
            score_threshold,
        } => {
            let knowledge = KnowledgeSettings {
                endpoint: endpoint.clone(),
                knowledge_id: knowledge_id.clone(),
                top_k: *top_k,
                score_threshold: *score_threshold,
                api_key: record.credentials.get("api_key").cloned(),
                max_output_bytes: settings.max_output_bytes,
                max_answer_bytes: settings.max_file_bytes,
            };
            let tool =
                KnowledgeTool::new(&record.name, &record.description, knowledge, http.clone());
            (String::new(), vec![Arc::new(tool) as Arc<dyn ErasedTool>])
        }
        ProviderSource::Mcp { url } => {
            let connection = Arc::new(McpConnection::new(
                url,
                record.credentials.get("bearer_token").cloned(),
                settings.mcp(http),
            ));
            // Server names like `files.read` are refused by model APIs: each tool gets a
            // valid, unique name, and calls go out under the server's own.
            let mut names = super::names::UniqueNames::default();
            let tools = record
                .mcp_tools
                .iter()
                .map(|def| {
                    let name = names.claim(&def.name);
                    Arc::new(McpTool::new(
                        &record.name,
                        def,
                        name,
                        Arc::clone(&connection),
                    )) as Arc<dyn ErasedTool>
                })
                .collect();
            (String::new(), tools)
        }
    };
    let tools = declare_idempotent(tools, &record.idempotent_tools)?;
    let redactor = super::redacting::redactor_for(&record.credentials);
    let tools: Vec<Arc<dyn ErasedTool>> = tools
        .into_iter()
        .map(|tool| super::redacting::RedactingTool::wrap(tool, &redactor))
        .collect();
    let tools = if record.cache_ttl_secs > 0 {
        let ttl = std::time::Duration::from_secs(record.cache_ttl_secs);
        tools
            .into_iter()
            .map(|tool| Arc::new(CachedTool::new(tool, ttl)) as Arc<dyn ErasedTool>)
            .collect()
    } else {
        tools
    };
    let description = if record.description.is_empty() {
        description
    } else {
        record.description.clone()
    };
    Ok(Provider::new(
        &record.name,
        record.kind(),
        &description,
        tools,
    )?)
}

/// `tools` with those `names` lists marked idempotent; a name that is none of them is
/// refused.
fn declare_idempotent(
    tools: Vec<Arc<dyn ErasedTool>>,
    names: &[String],
) -> Result<Vec<Arc<dyn ErasedTool>>, ProviderError> {
    for (index, name) in names.iter().enumerate() {
        let known = tools.iter().any(|tool| {
            let descriptor = tool.descriptor();
            descriptor.name == *name || descriptor.original_name.as_deref() == Some(name)
        });
        if !known {
            return Err(ProviderError::UnknownIdempotentTool {
                index,
                name: name.clone(),
            });
        }
    }
    Ok(tools
        .into_iter()
        .map(|tool| {
            let descriptor = tool.descriptor();
            let declared = names.iter().any(|name| {
                descriptor.name == *name || descriptor.original_name.as_deref() == Some(name)
            });
            match declared && !descriptor.idempotent {
                true => Arc::new(Idempotent::wrap(tool)) as Arc<dyn ErasedTool>,
                false => tool,
            }
        })
        .collect())
}

/// A tool its provider declares idempotent.
struct Idempotent {
    descriptor: super::ToolDescriptor,
    inner: Arc<dyn ErasedTool>,
}

impl Idempotent {
    fn wrap(inner: Arc<dyn ErasedTool>) -> Self {
        let descriptor = super::ToolDescriptor {
            idempotent: true,
            ..inner.descriptor().clone()
        };
        Self { descriptor, inner }
    }
}

#[async_trait::async_trait]
impl ErasedTool for Idempotent {
    fn descriptor(&self) -> &super::ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<super::ToolOutput, super::ToolError> {
        self.inner.call(arguments).await
    }
}
