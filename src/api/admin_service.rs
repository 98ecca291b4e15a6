//! `agentrunner.v1.AdminService`: API keys, for operators holding the admin token.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert::budget::amount;
use super::convert::timestamp;
use super::status::from_error;
use crate::access::Keys;
use crate::domain::{ApiKeyRecord, TenantLimits};
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use crate::store::Store;

/// Implements `AdminService`.
pub struct AdminApi {
    keys: Arc<Keys>,
    store: Store,
}

impl AdminApi {
    /// Handlers over the keys, and the store for its replicas.
    pub fn new(keys: Arc<Keys>, store: Store) -> Self {
        Self { keys, store }
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn create_api_key(
        &self,
        request: Request<pb::CreateApiKeyRequest>,
    ) -> Result<Response<pb::CreateApiKeyResponse>, Status> {
        let pb::CreateApiKeyRequest {
            tenant,
            name,
            limits,
        } = request.into_inner();
        let limits = limits.map(tenant_limits).transpose()?.unwrap_or_default();
        let (record, secret) = self
            .keys
            .create(&tenant, &name, limits)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::CreateApiKeyResponse {
            key: Some(api_key(record)),
            secret,
        }))
    }

    async fn list_api_keys(
        &self,
        request: Request<pb::ListApiKeysRequest>,
    ) -> Result<Response<pb::ListApiKeysResponse>, Status> {
        let pb::ListApiKeysRequest { tenant } = request.into_inner();
        Ok(Response::new(pb::ListApiKeysResponse {
            keys: self.keys.list(&tenant).into_iter().map(api_key).collect(),
        }))
    }

    async fn revoke_api_key(
        &self,
        request: Request<pb::RevokeApiKeyRequest>,
    ) -> Result<Response<pb::RevokeApiKeyResponse>, Status> {
        let pb::RevokeApiKeyRequest { id } = request.into_inner();
        self.keys.revoke(&id).await.map_err(from_error)?;
        Ok(Response::new(pb::RevokeApiKeyResponse {}))
    }

    async fn list_replicas(
        &self,
        _request: Request<pb::ListReplicasRequest>,
    ) -> Result<Response<pb::ListReplicasResponse>, Status> {
        let me = self.store.fence().owner;
        let replicas = self.store.replicas().await.map_err(from_error)?;
        Ok(Response::new(pb::ListReplicasResponse {
            replicas: replicas
                .into_iter()
                .map(|replica| pb::Replica {
                    answering: replica.id == me,
                    id: replica.id,
                    started_at: Some(timestamp(replica.started_at)),
                    lease_until: replica.lease_until.map(timestamp),
                    live: replica.live,
                    runs_held: replica.runs_held,
                })
                .collect(),
        }))
    }
}

fn tenant_limits(limits: pb::TenantLimits) -> Result<TenantLimits, Status> {
    let pb::TenantLimits {
        max_concurrent_runs,
        runs_per_minute,
        tokens_per_day,
        max_run_tokens,
        max_run_cost,
        max_run_seconds,
        max_run_tool_calls,
        max_concurrent_child_runs,
        max_follow_streams,
        max_queued_per_conversation,
    } = limits;
    let max_run_cost = amount("limits.max_run_cost", &max_run_cost)?.unwrap_or_default();
    Ok(TenantLimits {
        max_concurrent_runs,
        runs_per_minute,
        tokens_per_day,
        max_run_tokens,
        max_run_cost,
        max_run_seconds,
        max_run_tool_calls,
        max_concurrent_child_runs,
        max_follow_streams,
        max_queued_per_conversation,
    })
}

fn api_key(record: ApiKeyRecord) -> pb::ApiKey {
    let ApiKeyRecord {
        id,
        tenant,
        name,
        // Never leaves the store.
        secret_hash: _,
        created_at,
        last_used_at,
        limits,
    } = record;
    pb::ApiKey {
        id,
        tenant: tenant.as_str().to_owned(),
        name,
        created_at: Some(timestamp(created_at)),
        last_used_at: last_used_at.map(timestamp),
        limits: Some(limits.into()),
    }
}
