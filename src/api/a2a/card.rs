//! Agent cards: `/agents/{agent_id}/.well-known/agent-card.json` on the metrics listener,
//! one per stored agent, served only to callers of its tenant (authenticated as on the
//! gRPC port). The card names the gRPC interface, the routing string its requests carry,
//! streaming, the security scheme, and the tool-calls extension — required where the
//! agent's newest version has approvals or client tools.

use serde_json::{json, Value};
use tonic::metadata::MetadataMap;
use tonic::{Code, Request};

use super::route::{PROTOCOL_VERSION, TOOL_CALLS_EXTENSION};
use crate::api::auth::{caller_of, Gate, TENANT_HEADER};
use crate::domain::agent::check_slug;
use crate::domain::{AgentRecord, Tenant, VersionPick};
use crate::runner::{AgentDefinition, AgentReference, RunError, Runner};
use crate::store::Store;
use crate::telemetry::{Page, Pages};

/// Serves the agent cards.
pub struct CardPages {
    runner: Runner,
    store: Store,
    gate: Gate,
    public_url: String,
}

impl CardPages {
    /// Cards naming the gRPC interface at `public_url`, for callers `gate` admits.
    pub fn new(runner: Runner, store: Store, gate: Gate, public_url: String) -> Self {
        Self {
            runner,
            store,
            gate,
            public_url,
        }
    }

    async fn card(&self, agent_id: &str, headers: &http::HeaderMap) -> Page {
        let mut request = Request::new(());
        *request.metadata_mut() = MetadataMap::from_headers(headers.clone());
        let tenant = match self.gate.admit(request).and_then(|r| caller_of(&r)) {
            Ok(caller) => caller.tenant,
            Err(status) => {
                let code = if status.code() == Code::Unauthenticated {
                    http::StatusCode::UNAUTHORIZED
                } else if status.code() == Code::PermissionDenied {
                    http::StatusCode::FORBIDDEN
                } else {
                    http::StatusCode::BAD_REQUEST
                };
                return error(code, status.message());
            }
        };
        if check_slug("agent_id", agent_id).is_err() {
            return not_found();
        }
        match self.describe(&tenant, agent_id).await {
            Ok(Some(card)) => Page {
                status: http::StatusCode::OK,
                content_type: "application/json",
                body: card.to_string(),
            },
            Ok(None) => not_found(),
            Err(err) => {
                tracing::warn!(error = %err, "an agent card could not be read");
                error(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    "the agent could not be read; try again",
                )
            }
        }
    }

    /// The card of `agent_id` of `tenant`; `None` when it has no such agent (or no version).
    async fn describe(&self, tenant: &Tenant, agent_id: &str) -> Result<Option<Value>, RunError> {
        let Some(record) = self.store.get_agent(tenant, agent_id).await? else {
            return Ok(None);
        };
        let reference = AgentReference {
            agent_id: agent_id.to_owned(),
            pick: VersionPick::Latest,
            overrides: Default::default(),
        };
        let (version, definition) = match self.runner.read_version(tenant, &reference).await {
            Ok(found) => found,
            Err(RunError::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let waits = self.runner.tree_waits_on_caller(tenant, &definition).await;
        Ok(Some(card_json(
            &record,
            version,
            &definition,
            &self.public_url,
            self.gate.required,
            waits,
        )))
    }
}

#[async_trait::async_trait]
impl Pages for CardPages {
    async fn get(&self, path: &str, headers: &http::HeaderMap) -> Option<Page> {
        let agent_id = path
            .strip_prefix("/agents/")?
            .strip_suffix("/.well-known/agent-card.json")?;
        Some(self.card(agent_id, headers).await)
    }
}

fn not_found() -> Page {
    error(http::StatusCode::NOT_FOUND, "no such agent")
}

fn error(status: http::StatusCode, message: &str) -> Page {
    Page {
        status,
        content_type: "application/json",
        body: json!({ "error": message }).to_string(),
    }
}

/// The card of version `version` of `record`, in the JSON form A2A clients read; `keys_required`
/// says how callers authenticate, `waits` whether its tree may wait on the caller (then
/// the tool-calls extension is required).
pub fn card_json(
    record: &AgentRecord,
    version: u32,
    definition: &AgentDefinition,
    public_url: &str,
    keys_required: bool,
    waits: bool,
) -> Value {
    let name = if record.name.is_empty() {
        record.id.as_str()
    } else {
        record.name.as_str()
    };
    let description = if record.description.is_empty() {
        format!("The stored agent {}.", record.id)
    } else {
        record.description.clone()
    };
    let (scheme_name, scheme) = match keys_required {
        true => (
            "bearer",
            json!({"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "An API key of the agent's tenant, as `authorization: Bearer <key>`.",
            }}),
        ),
        false => (
            "tenant",
            json!({"apiKeySecurityScheme": {
                "location": "header",
                "name": TENANT_HEADER,
                "description": "Names the tenant on a trusted network; absent means `default`.",
            }}),
        ),
    };
    let mut output_modes = vec!["text/plain"];
    if definition.agent.output.is_some() {
        output_modes.push("application/json");
    }
    json!({
        "name": name,
        "description": description,
        "supportedInterfaces": [{
            "url": public_url,
            "protocolBinding": "GRPC",
            "tenant": record.id,
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "version": version.to_string(),
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": false,
            "extensions": [{
                "uri": TOOL_CALLS_EXTENSION,
                "description": "Approvals and client tools: an input-required task names the \
                    waiting calls in a data part ({\"approval_required\": [...]} or \
                    {\"tool_outputs_required\": [...]}); answer with a message to the task \
                    holding {\"decisions\": [...]} or {\"outputs\": [...]}.",
                "required": waits,
            }],
        },
        "securitySchemes": { scheme_name: scheme },
        "securityRequirements": [{ "schemes": { scheme_name: { "list": [] } } }],
        "defaultInputModes": ["text/plain", "application/json", "image/png", "image/jpeg",
            "image/gif", "image/webp"],
        "defaultOutputModes": output_modes,
        "skills": [{
            "id": record.id,
            "name": name,
            "description": description,
            "tags": record.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        }],
    })
}
