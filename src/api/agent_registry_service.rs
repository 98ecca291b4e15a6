//! `agentrunner.v1.AgentRegistry`: stored agents, their versions and aliases.

use tonic::{Request, Response, Status};

use super::auth::tenant_of;
use super::convert::agent::{agent_pb, definition, version_pb};
use super::convert::reference::pick;
use super::status::{from_error, invalid};
use crate::library::{Description, Library};
use crate::pb;
use crate::pb::agent_registry_server::AgentRegistry;
use crate::store::PageSize;

/// Largest page of agents.
const MAX_AGENTS_PAGE: u32 = 1000;
/// Largest page of versions: each holds a whole agent config.
const MAX_VERSIONS_PAGE: u32 = 100;
/// Most bytes of versions in one page, under what a gRPC client accepts by default.
const VERSIONS_PAGE_BYTES: usize = 3 * 1024 * 1024;

/// Implements `AgentRegistry`.
pub struct AgentRegistryApi {
    library: Library,
}

impl AgentRegistryApi {
    /// Handlers over `library`.
    pub fn new(library: Library) -> Self {
        Self { library }
    }
}

/// A page size within `1..=max`, `default` for 0.
fn page_size(field: &str, size: u32, default: u32, max: u32) -> Result<usize, Status> {
    match size {
        0 => Ok(default as usize),
        n if n <= max => Ok(n as usize),
        _ => Err(invalid(field, &format!("must be at most {max}"))),
    }
}

#[tonic::async_trait]
impl AgentRegistry for AgentRegistryApi {
    async fn create_agent(
        &self,
        request: Request<pb::CreateAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::CreateAgentRequest {
            agent_id,
            name,
            description,
            labels,
            config,
            client_tools,
        } = request.into_inner();
        let first = match config {
            Some(config) => Some(definition(Some(config), client_tools)?),
            None if !client_tools.is_empty() => {
                return Err(invalid("client_tools", "needs a config to belong to"))
            }
            None => None,
        };
        let description = Description {
            name,
            description,
            labels,
        };
        let record = self
            .library
            .create(&tenant, &agent_id, description, first)
            .await
            .map_err(from_error)?;
        Ok(Response::new(agent_pb(record)))
    }

    async fn get_agent(
        &self,
        request: Request<pb::GetAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetAgentRequest { agent_id } = request.into_inner();
        let record = self
            .library
            .get(&tenant, &agent_id)
            .await
            .map_err(from_error)?;
        Ok(Response::new(agent_pb(record)))
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ListAgentsRequest {
            page_size: size,
            page_token,
            labels,
        } = request.into_inner();
        let limit = page_size("page_size", size, 100, MAX_AGENTS_PAGE)?;
        if !page_token.is_empty() {
            crate::domain::agent::check_slug("page_token", &page_token).map_err(from_error)?;
        }
        let page = self
            .library
            .list(&tenant, &page_token, &labels, limit)
            .await
            .map_err(from_error)?;
        let next_page_token = match (page.more, page.items.last()) {
            (true, Some(last)) => last.id.clone(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListAgentsResponse {
            agents: page.items.into_iter().map(agent_pb).collect(),
            next_page_token,
        }))
    }

    async fn update_agent(
        &self,
        request: Request<pb::UpdateAgentRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::UpdateAgentRequest {
            agent_id,
            name,
            description,
            labels,
            update_mask,
        } = request.into_inner();
        let paths = update_mask.map(|mask| mask.paths).unwrap_or_default();
        if let Some(unknown) = paths
            .iter()
            .find(|path| !["name", "description", "labels"].contains(&path.as_str()))
        {
            return Err(invalid(
                "update_mask",
                &format!("names {unknown:?}; only name, description and labels can change"),
            ));
        }
        let changes = |field: &str| paths.is_empty() || paths.iter().any(|path| path == field);
        let record = self
            .library
            .describe(
                &tenant,
                &agent_id,
                changes("name").then_some(name),
                changes("description").then_some(description),
                changes("labels").then_some(labels),
            )
            .await
            .map_err(from_error)?;
        Ok(Response::new(agent_pb(record)))
    }

    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::DeleteAgentRequest { agent_id } = request.into_inner();
        self.library
            .delete(&tenant, &agent_id)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::DeleteAgentResponse {}))
    }

    async fn create_agent_version(
        &self,
        request: Request<pb::CreateAgentVersionRequest>,
    ) -> Result<Response<pb::AgentVersion>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::CreateAgentVersionRequest {
            agent_id,
            config,
            client_tools,
        } = request.into_inner();
        let definition = definition(config, client_tools)?;
        let (record, definition) = self
            .library
            .add_version(&tenant, &agent_id, definition)
            .await
            .map_err(from_error)?;
        Ok(Response::new(version_pb(record, definition)))
    }

    async fn get_agent_version(
        &self,
        request: Request<pb::GetAgentVersionRequest>,
    ) -> Result<Response<pb::AgentVersion>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetAgentVersionRequest {
            agent_id,
            version,
            alias,
        } = request.into_inner();
        let pick = pick("alias", version, alias)?;
        let (record, definition) = self
            .library
            .version(&tenant, &agent_id, pick)
            .await
            .map_err(from_error)?;
        Ok(Response::new(version_pb(record, definition)))
    }

    async fn list_agent_versions(
        &self,
        request: Request<pb::ListAgentVersionsRequest>,
    ) -> Result<Response<pb::ListAgentVersionsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ListAgentVersionsRequest {
            agent_id,
            page_size: size,
            page_token,
        } = request.into_inner();
        let limit = page_size("page_size", size, 20, MAX_VERSIONS_PAGE)?;
        let before = match page_token.as_str() {
            "" => u32::MAX,
            token => token
                .parse()
                .map_err(|_| invalid("page_token", "is not a token this service gave"))?,
        };
        let size = PageSize {
            limit,
            max_bytes: VERSIONS_PAGE_BYTES,
        };
        let page = self
            .library
            .versions(&tenant, &agent_id, before, size)
            .await
            .map_err(from_error)?;
        let next_page_token = match (page.more, page.items.last()) {
            (true, Some((last, _))) => last.version.to_string(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListAgentVersionsResponse {
            versions: page
                .items
                .into_iter()
                .map(|(record, definition)| version_pb(record, definition))
                .collect(),
            next_page_token,
        }))
    }

    async fn set_alias(
        &self,
        request: Request<pb::SetAliasRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::SetAliasRequest {
            agent_id,
            alias,
            version,
            expected_version,
        } = request.into_inner();
        let record = self
            .library
            .set_alias(&tenant, &agent_id, &alias, version, expected_version)
            .await
            .map_err(from_error)?;
        Ok(Response::new(agent_pb(record)))
    }

    async fn delete_alias(
        &self,
        request: Request<pb::DeleteAliasRequest>,
    ) -> Result<Response<pb::Agent>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::DeleteAliasRequest { agent_id, alias } = request.into_inner();
        let record = self
            .library
            .delete_alias(&tenant, &agent_id, &alias)
            .await
            .map_err(from_error)?;
        Ok(Response::new(agent_pb(record)))
    }
}
