//! `agentrunner.v1.ToolRegistry`: the providers and tools agents may use.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::auth::tenant_of;
use super::convert::json::struct_to_json;
use super::convert::provider::{descriptor, provider, provider_record};
use super::status::{from_error, invalid};
use crate::catalog::{Catalog, CatalogError};
use crate::pb;
use crate::pb::tool_registry_server::ToolRegistry as ToolRegistryService;
use crate::tools::{FileContent, ToolFile, ToolRef, ToolRegistry, ToolSet};

/// Implements `ToolRegistry`.
pub struct ToolRegistryApi {
    catalog: Catalog,
    tools: Arc<ToolRegistry>,
    timeout: Duration,
}

impl ToolRegistryApi {
    /// Handlers over the catalog; `timeout` bounds `InvokeTool` as it bounds agent calls.
    pub fn new(catalog: Catalog, tools: Arc<ToolRegistry>, timeout: Duration) -> Self {
        Self {
            catalog,
            tools,
            timeout,
        }
    }
}

/// The most file bytes one `InvokeTool` answer carries inline.
const MAX_INLINE_FILE_BYTES: usize = 2 * 1024 * 1024;

/// A direct call's files, their bytes inline while they fit the answer's cap.
fn inline_files(files: Vec<ToolFile>) -> Vec<pb::ToolFile> {
    let mut budget = MAX_INLINE_FILE_BYTES;
    files
        .into_iter()
        .map(|file| {
            let ToolFile {
                name,
                mime_type,
                content,
            } = file;
            match content {
                FileContent::Url(url) => pb::ToolFile {
                    name,
                    mime_type,
                    url,
                    ..Default::default()
                },
                FileContent::Bytes(bytes) => {
                    let size = bytes.len() as u64;
                    let fits = bytes.len() <= budget;
                    budget = budget.saturating_sub(if fits { bytes.len() } else { 0 });
                    pb::ToolFile {
                        name,
                        mime_type,
                        content: if fits { bytes } else { Vec::new() },
                        size,
                        omitted: !fits,
                        ..Default::default()
                    }
                }
            }
        })
        .collect()
}

#[tonic::async_trait]
impl ToolRegistryService for ToolRegistryApi {
    async fn create_provider(
        &self,
        request: Request<pb::CreateProviderRequest>,
    ) -> Result<Response<pb::ToolProvider>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::CreateProviderRequest { provider: given } = request.into_inner();
        let record = provider_record(given.ok_or_else(|| invalid("provider", "is required"))?)?;
        let entry = self
            .catalog
            .create(&tenant, record)
            .await
            .map_err(from_error)?;
        Ok(Response::new(provider(&entry)))
    }

    async fn get_provider(
        &self,
        request: Request<pb::GetProviderRequest>,
    ) -> Result<Response<pb::ToolProvider>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetProviderRequest { name } = request.into_inner();
        let entry = self.catalog.get(&tenant, &name).await.map_err(from_error)?;
        Ok(Response::new(provider(&entry)))
    }

    async fn list_providers(
        &self,
        request: Request<pb::ListProvidersRequest>,
    ) -> Result<Response<pb::ListProvidersResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let entries = self.catalog.list(&tenant).await.map_err(from_error)?;
        Ok(Response::new(pb::ListProvidersResponse {
            providers: entries.iter().map(provider).collect(),
        }))
    }

    async fn delete_provider(
        &self,
        request: Request<pb::DeleteProviderRequest>,
    ) -> Result<Response<pb::DeleteProviderResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::DeleteProviderRequest { name } = request.into_inner();
        self.catalog
            .delete(&tenant, &name)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::DeleteProviderResponse {}))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ListToolsRequest { provider: name } = request.into_inner();
        let entries = if name.is_empty() {
            self.catalog.list(&tenant).await
        } else {
            self.catalog
                .get(&tenant, &name)
                .await
                .map(|entry| vec![entry])
        }
        .map_err(from_error)?;
        let tools = entries
            .iter()
            .flat_map(|entry| {
                entry
                    .provider
                    .tools
                    .values()
                    .map(|t| descriptor(t.tool.descriptor()))
            })
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }

    async fn refresh_provider(
        &self,
        request: Request<pb::RefreshProviderRequest>,
    ) -> Result<Response<pb::ToolProvider>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::RefreshProviderRequest { name } = request.into_inner();
        let entry = self
            .catalog
            .refresh(&tenant, &name)
            .await
            .map_err(from_error)?;
        Ok(Response::new(provider(&entry)))
    }

    async fn invoke_tool(
        &self,
        request: Request<pb::InvokeToolRequest>,
    ) -> Result<Response<pb::InvokeToolResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::InvokeToolRequest {
            provider: provider_name,
            name,
            arguments,
            parameters,
        } = request.into_inner();
        if provider_name.is_empty() {
            return Err(invalid("provider", "is required"));
        }
        if name.is_empty() {
            return Err(invalid("name", "is required"));
        }
        let tool = ToolRef {
            provider: provider_name.clone(),
            name: name.clone(),
            preset: parameters.map(struct_to_json).unwrap_or_default(),
            // A direct call is the caller's own decision.
            require_approval: false,
        };
        let set = ToolSet::bind(&self.tools.snapshot(&tenant), &[tool])
            .map_err(|_| from_error(CatalogError::NotFound(format!("{provider_name}/{name}"))))?;
        // The tool may have been named by its original name; the set knows its valid one.
        let name = set.offered().first().map_or(name, |tool| tool.name.clone());
        let invocation = set.invoke(&name, &arguments, self.timeout).await;
        Ok(Response::new(pb::InvokeToolResponse {
            observation: invocation.observation,
            meta: Some(invocation.meta.into()),
            files: inline_files(invocation.files),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(name: &str, size: usize) -> ToolFile {
        ToolFile {
            name: name.to_owned(),
            mime_type: "image/png".to_owned(),
            content: FileContent::Bytes(vec![7; size]),
        }
    }

    #[test]
    fn inline_bytes_stop_at_the_cap_and_later_files_are_listed_as_omitted() {
        let half = MAX_INLINE_FILE_BYTES / 2;
        let files = inline_files(vec![
            bytes("a.png", half),
            bytes("b.png", half + 1),
            bytes("c.png", half),
            ToolFile {
                name: "d.png".to_owned(),
                mime_type: "image/png".to_owned(),
                content: FileContent::Url("https://example.com/d.png".to_owned()),
            },
        ]);
        let shown: Vec<(&str, usize, u64, bool, &str)> = files
            .iter()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.content.len(),
                    f.size,
                    f.omitted,
                    f.url.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("a.png", half, half as u64, false, ""),
                ("b.png", 0, half as u64 + 1, true, ""),
                ("c.png", half, half as u64, false, ""),
                ("d.png", 0, 0, false, "https://example.com/d.png"),
            ]
        );
    }
}
