//! Building a registered provider's tools from its stored definition.

use std::sync::Arc;

use super::cache::CachedTool;
use super::http_api::{self, openapi, ApiSettings, Auth};
use super::knowledge::{KnowledgeSettings, KnowledgeTool};
use super::mcp::{McpConnection, McpTool};
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
}

impl ProviderError {
    /// Failures of the definition are the caller's; an unreachable server may come back.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Spec(_) | Self::NoServerUrl | Self::Schema(_) => ErrorKind::InvalidArgument,
            Self::Mcp(_) => ErrorKind::FailedPrecondition,
        }
    }
}

/// Limits shared by the tools of registered providers.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Longest observation a tool returns, in bytes.
    pub max_output_bytes: usize,
}

/// Reads what a definition needs from outside before it is stored: an MCP server's tools.
pub async fn discover(
    mut record: ProviderRecord,
    settings: &ProviderSettings,
) -> Result<ProviderRecord, ProviderError> {
    if let ProviderSource::Mcp { url } = &record.source {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ProviderError::Mcp("must be an http(s) URL".to_owned()));
        }
        let connection = McpConnection::new(
            url,
            record.credentials.get("bearer_token").cloned(),
            settings.max_output_bytes,
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
    let (description, tools): (String, Vec<Arc<dyn ErasedTool>>) = match &record.source {
        ProviderSource::OpenApi { spec, server_url } => {
            let document = openapi::parse(spec)?;
            let base_url = Some(server_url.clone())
                .filter(|url| !url.is_empty())
                .or(document.server_url.clone())
                .ok_or(ProviderError::NoServerUrl)?;
            let api = ApiSettings {
                base_url,
                auth: Auth::from_credentials(&record.credentials, document.api_key.as_ref()),
                max_output_bytes: settings.max_output_bytes,
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
            };
            let tool =
                KnowledgeTool::new(&record.name, &record.description, knowledge, http.clone());
            (String::new(), vec![Arc::new(tool) as Arc<dyn ErasedTool>])
        }
        ProviderSource::Mcp { url } => {
            let connection = Arc::new(McpConnection::new(
                url,
                record.credentials.get("bearer_token").cloned(),
                settings.max_output_bytes,
            ));
            let tools = record
                .mcp_tools
                .iter()
                .map(|def| {
                    Arc::new(McpTool::new(&record.name, def, Arc::clone(&connection)))
                        as Arc<dyn ErasedTool>
                })
                .collect();
            (String::new(), tools)
        }
    };
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
