//! `agentrunner.v1.ToolRegistry`: the providers and tools agents may use.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::convert::{json_to_struct, struct_to_json};
use super::status::{from_error, invalid};
use crate::pb;
use crate::pb::tool_registry_server::ToolRegistry as ToolRegistryService;
use crate::runner::RunError;
use crate::tools::{Provider, ProviderKind, ToolDescriptor, ToolRef, ToolRegistry, ToolSet};

/// Implements `ToolRegistry`.
pub struct ToolRegistryApi {
    tools: Arc<ToolRegistry>,
    timeout: Duration,
}

impl ToolRegistryApi {
    /// Handlers over `tools`; `timeout` bounds `InvokeTool` as it bounds agent calls.
    pub fn new(tools: Arc<ToolRegistry>, timeout: Duration) -> Self {
        Self { tools, timeout }
    }
}

fn kind(kind: ProviderKind) -> pb::ProviderKind {
    match kind {
        ProviderKind::Builtin => pb::ProviderKind::Builtin,
        ProviderKind::Api => pb::ProviderKind::Api,
        ProviderKind::Knowledge => pb::ProviderKind::Knowledge,
        ProviderKind::Mcp => pb::ProviderKind::Mcp,
    }
}

fn descriptor(tool: &ToolDescriptor) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        provider: tool.provider.clone(),
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters_schema: tool.parameters.as_object().map(json_to_struct),
    }
}

fn provider(provider: &Provider) -> pb::ToolProvider {
    pb::ToolProvider {
        name: provider.name.clone(),
        kind: kind(provider.kind).into(),
        description: provider.description.clone(),
        tools: provider
            .tools
            .values()
            .map(|t| descriptor(t.tool.descriptor()))
            .collect(),
        source: None,
        credentials: Default::default(),
        credential_keys: Vec::new(),
    }
}

impl ToolRegistryApi {
    fn find(&self, name: &str) -> Result<Arc<Provider>, Status> {
        self.tools
            .snapshot()
            .get(name)
            .cloned()
            .ok_or_else(|| from_error(RunError::not_found("tool provider", name)))
    }
}

#[tonic::async_trait]
impl ToolRegistryService for ToolRegistryApi {
    async fn create_provider(
        &self,
        _: Request<pb::CreateProviderRequest>,
    ) -> Result<Response<pb::ToolProvider>, Status> {
        Err(Status::unimplemented(
            "CreateProvider is not available in this build",
        ))
    }

    async fn get_provider(
        &self,
        request: Request<pb::GetProviderRequest>,
    ) -> Result<Response<pb::ToolProvider>, Status> {
        let pb::GetProviderRequest { name } = request.into_inner();
        let found = self.find(&name)?;
        Ok(Response::new(provider(&found)))
    }

    async fn list_providers(
        &self,
        _: Request<pb::ListProvidersRequest>,
    ) -> Result<Response<pb::ListProvidersResponse>, Status> {
        let providers = self
            .tools
            .snapshot()
            .values()
            .map(|p| provider(p))
            .collect();
        Ok(Response::new(pb::ListProvidersResponse { providers }))
    }

    async fn delete_provider(
        &self,
        _: Request<pb::DeleteProviderRequest>,
    ) -> Result<Response<pb::DeleteProviderResponse>, Status> {
        Err(Status::unimplemented(
            "DeleteProvider is not available in this build",
        ))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let pb::ListToolsRequest { provider } = request.into_inner();
        let providers: Vec<Arc<Provider>> = if provider.is_empty() {
            self.tools.snapshot().values().cloned().collect()
        } else {
            vec![self.find(&provider)?]
        };
        let tools = providers
            .iter()
            .flat_map(|p| p.tools.values().map(|t| descriptor(t.tool.descriptor())))
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }

    async fn invoke_tool(
        &self,
        request: Request<pb::InvokeToolRequest>,
    ) -> Result<Response<pb::InvokeToolResponse>, Status> {
        let pb::InvokeToolRequest {
            provider,
            name,
            arguments,
            parameters,
        } = request.into_inner();
        if provider.is_empty() {
            return Err(invalid("provider", "is required"));
        }
        if name.is_empty() {
            return Err(invalid("name", "is required"));
        }
        let tool = ToolRef {
            provider,
            name: name.clone(),
            preset: parameters.map(struct_to_json).unwrap_or_default(),
        };
        let set = ToolSet::bind(&self.tools.snapshot(), &[tool]).map_err(|err| {
            let text = err.to_string();
            let reason = text.split_once(": ").map_or(text.as_str(), |(_, r)| r);
            Status::not_found(reason.to_owned())
        })?;
        let invocation = set.invoke(&name, &arguments, self.timeout).await;
        Ok(Response::new(pb::InvokeToolResponse {
            observation: invocation.observation,
            meta: Some(invocation.meta.into()),
        }))
    }
}
