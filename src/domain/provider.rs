//! Tool providers a tenant registers: where their tools come from and how to reach them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a provider's tools come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Shipped with the service.
    Builtin,
    /// Operations of an HTTP API from an OpenAPI document.
    Api,
    /// A knowledge base behind the External Knowledge API.
    Knowledge,
    /// Tools of an MCP server.
    Mcp,
    /// Tools the caller of a run executes itself.
    Client,
}

impl ProviderKind {
    /// The name used in `tool_config.tool_provider_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Api => "api",
            Self::Knowledge => "knowledge",
            Self::Mcp => "mcp",
            Self::Client => "client",
        }
    }
}

/// The definition a provider was created from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProviderSource {
    /// An OpenAPI 3 document (JSON or YAML) and an optional server URL override.
    OpenApi {
        /// The document text.
        spec: String,
        /// Overrides the document's first server.
        server_url: String,
    },
    /// An External Knowledge API endpoint and the knowledge base to search.
    Knowledge {
        /// Base URL; `/retrieval` is appended.
        endpoint: String,
        /// The knowledge base.
        knowledge_id: String,
        /// Passages to retrieve.
        top_k: u32,
        /// Lowest score kept.
        score_threshold: f64,
    },
    /// An MCP server over streamable HTTP.
    Mcp {
        /// The server's URL.
        url: String,
    },
}

/// A registered provider as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderRecord {
    /// Unique name within the tenant.
    pub name: String,
    /// What the provider offers, for people.
    pub description: String,
    /// Where its tools come from.
    pub source: ProviderSource,
    /// Secrets used when calling it; never returned to callers.
    pub credentials: BTreeMap<String, String>,
    /// Seconds a successful result is reused for the same tool and arguments; 0 disables.
    #[serde(default)]
    pub cache_ttl_secs: u64,
    /// An MCP server's tools as last listed (on create or refresh).
    #[serde(default)]
    pub mcp_tools: Vec<McpToolDef>,
    /// Tools the provider declares may be called twice with the effect of once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idempotent_tools: Vec<String>,
}

/// A tool an MCP server offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
    /// Whether the server annotates it read-only or idempotent: a call cut by the loss of
    /// its run's owner may then be made again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
}

impl ProviderRecord {
    /// The kind its source implies.
    pub fn kind(&self) -> ProviderKind {
        match self.source {
            ProviderSource::OpenApi { .. } => ProviderKind::Api,
            ProviderSource::Knowledge { .. } => ProviderKind::Knowledge,
            ProviderSource::Mcp { .. } => ProviderKind::Mcp,
        }
    }
}
