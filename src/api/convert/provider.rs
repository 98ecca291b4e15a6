//! Tool providers: protobuf ↔ catalog entries. Credentials go in, never out.

use tonic::Status;

use super::json::json_to_struct;
use crate::api::status::invalid;
use crate::catalog::Entry;
use crate::domain::{ProviderKind, ProviderRecord, ProviderSource};
use crate::pb;
use crate::tools::ToolDescriptor;

/// Passages a knowledge tool retrieves when the request does not say.
const DEFAULT_TOP_K: u32 = 3;

/// A create request's provider as a definition to store.
pub fn provider_record(provider: pb::ToolProvider) -> Result<ProviderRecord, Status> {
    let pb::ToolProvider {
        name,
        kind,
        description,
        // Output only: the tools come from the source.
        tools: _,
        source,
        credentials,
        // Output only.
        credential_keys: _,
        cache_ttl_secs,
        idempotent_tools,
    } = provider;
    let source = provider_source(source)?;
    check_idempotent_tools(&idempotent_tools)?;
    let record = ProviderRecord {
        name,
        description,
        source,
        credentials: credentials.into_iter().collect(),
        cache_ttl_secs: u64::from(cache_ttl_secs),
        mcp_tools: Vec::new(),
        idempotent_tools,
    };
    check_kind(kind, record.kind())?;
    Ok(record)
}

/// The most tools a provider may declare idempotent.
const MAX_IDEMPOTENT_TOOLS: usize = 256;

/// Bounds the declared idempotent tools (whether each is a tool of the provider is checked
/// once its tools are built).
fn check_idempotent_tools(names: &[String]) -> Result<(), Status> {
    if names.len() > MAX_IDEMPOTENT_TOOLS {
        return Err(invalid(
            "provider.idempotent_tools",
            &format!(
                "has {} names, more than {MAX_IDEMPOTENT_TOOLS}",
                names.len()
            ),
        ));
    }
    if let Some(index) = names
        .iter()
        .position(|name| name.is_empty() || name.len() > 256)
    {
        return Err(invalid(
            &format!("provider.idempotent_tools[{index}]"),
            "must be 1 to 256 bytes",
        ));
    }
    Ok(())
}

fn check_kind(requested: i32, implied: ProviderKind) -> Result<(), Status> {
    let requested = pb::ProviderKind::try_from(requested)
        .map_err(|_| invalid("provider.kind", &format!("has unknown value {requested}")))?;
    match requested {
        pb::ProviderKind::Unspecified => Ok(()),
        pb::ProviderKind::Builtin => Err(invalid(
            "provider.kind",
            "BUILTIN providers cannot be created",
        )),
        other @ (pb::ProviderKind::Api | pb::ProviderKind::Knowledge | pb::ProviderKind::Mcp) => {
            if other == kind(implied) {
                Ok(())
            } else {
                Err(invalid("provider.kind", "does not match provider.source"))
            }
        }
    }
}

fn provider_source(source: Option<pb::ProviderSource>) -> Result<ProviderSource, Status> {
    use pb::provider_source::Source;
    let source = source.and_then(|s| s.source);
    match source {
        Some(Source::Openapi(pb::OpenApiSource { spec, server_url })) => {
            if spec.trim().is_empty() {
                return Err(invalid("provider.source.openapi.spec", "must not be empty"));
            }
            Ok(ProviderSource::OpenApi { spec, server_url })
        }
        Some(Source::Knowledge(pb::KnowledgeSource {
            endpoint,
            knowledge_id,
            top_k,
            score_threshold,
        })) => {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(invalid(
                    "provider.source.knowledge.endpoint",
                    "must be an http(s) URL",
                ));
            }
            if knowledge_id.is_empty() {
                return Err(invalid(
                    "provider.source.knowledge.knowledge_id",
                    "is required",
                ));
            }
            Ok(ProviderSource::Knowledge {
                endpoint,
                knowledge_id,
                top_k: if top_k == 0 { DEFAULT_TOP_K } else { top_k },
                score_threshold,
            })
        }
        Some(Source::Mcp(pb::McpSource { url })) => Ok(ProviderSource::Mcp { url }),
        None => Err(invalid("provider.source", "is required")),
    }
}

/// The protobuf value of a provider kind.
pub fn kind(kind: ProviderKind) -> pb::ProviderKind {
    match kind {
        ProviderKind::Builtin => pb::ProviderKind::Builtin,
        ProviderKind::Api => pb::ProviderKind::Api,
        ProviderKind::Knowledge => pb::ProviderKind::Knowledge,
        ProviderKind::Mcp => pb::ProviderKind::Mcp,
        // Client tools belong to a run, never to a listed provider.
        ProviderKind::Client => pb::ProviderKind::Unspecified,
    }
}

/// A tool as listed.
pub fn descriptor(tool: &ToolDescriptor) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        provider: tool.provider.clone(),
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters_schema: tool.parameters.as_object().map(json_to_struct),
        original_name: tool.original_name.clone().unwrap_or_default(),
        idempotent: tool.idempotent,
    }
}

fn source(record: &ProviderRecord) -> pb::ProviderSource {
    use pb::provider_source::Source;
    let source = match &record.source {
        ProviderSource::OpenApi { spec, server_url } => Source::Openapi(pb::OpenApiSource {
            spec: spec.clone(),
            server_url: server_url.clone(),
        }),
        ProviderSource::Knowledge {
            endpoint,
            knowledge_id,
            top_k,
            score_threshold,
        } => Source::Knowledge(pb::KnowledgeSource {
            endpoint: endpoint.clone(),
            knowledge_id: knowledge_id.clone(),
            top_k: *top_k,
            score_threshold: *score_threshold,
        }),
        ProviderSource::Mcp { url } => Source::Mcp(pb::McpSource { url: url.clone() }),
    };
    pb::ProviderSource {
        source: Some(source),
    }
}

/// A provider as returned: its tools and source, and which credential keys are set.
pub fn provider(entry: &Entry) -> pb::ToolProvider {
    let provider = &entry.provider;
    pb::ToolProvider {
        name: provider.name.clone(),
        kind: kind(provider.kind).into(),
        description: provider.description.clone(),
        tools: provider
            .tools
            .values()
            .map(|t| descriptor(t.tool.descriptor()))
            .collect(),
        source: entry.record.as_ref().map(source),
        credentials: Default::default(),
        credential_keys: entry
            .record
            .as_ref()
            .map(|r| r.credentials.keys().cloned().collect())
            .unwrap_or_default(),
        cache_ttl_secs: entry
            .record
            .as_ref()
            .map_or(0, |r| u32::try_from(r.cache_ttl_secs).unwrap_or(u32::MAX)),
        idempotent_tools: entry
            .record
            .as_ref()
            .map(|r| r.idempotent_tools.clone())
            .unwrap_or_default(),
    }
}
