//! Who a call acts for: the interceptors in front of the services.
//!
//! With auth required, a call needs `authorization: Bearer <key>` and acts for the key's
//! tenant (an `x-tenant-id` naming another one is refused). Without it, the `x-tenant-id`
//! header names the tenant, as a trusted network would; a key sent anyway is still checked.
//! Admin calls need the admin token. Health is never behind either.

use std::sync::Arc;

use tonic::metadata::MetadataMap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::status::{from_error, invalid};
use crate::access::{AccessError, AdminToken, Caller, Keys};
use crate::domain::{Tenant, TenantLimits};

/// Metadata key naming the tenant; absent means `default`.
pub const TENANT_HEADER: &str = "x-tenant-id";

/// How calls are authenticated.
#[derive(Clone)]
pub struct Gate {
    /// The API keys.
    pub keys: Arc<Keys>,
    /// Whether every call needs a key.
    pub required: bool,
    /// Limits of tenants whose key sets none (and of every tenant without auth).
    pub defaults: TenantLimits,
}

impl Gate {
    /// Resolves the caller of `request` and keeps it in the request's extensions.
    pub fn admit(&self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let named = named_tenant(request.metadata())?;
        let caller = match bearer(request.metadata()) {
            Some(token) => {
                let caller = self.keys.verify(token).map_err(from_error)?;
                if let Some(named) = named.filter(|named| *named != caller.tenant) {
                    return Err(from_error(AccessError::OtherTenant {
                        key: caller.tenant.as_str().to_owned(),
                        requested: named.as_str().to_owned(),
                    }));
                }
                Caller {
                    limits: caller.limits.or(self.defaults),
                    ..caller
                }
            }
            None if self.required => return Err(from_error(AccessError::Missing)),
            None => Caller {
                tenant: named.unwrap_or_else(Tenant::default_tenant),
                limits: self.defaults,
            },
        };
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

impl Interceptor for Gate {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.admit(request)
    }
}

/// Checks the admin token of admin calls.
#[derive(Clone)]
pub struct AdminGate(pub AdminToken);

impl Interceptor for AdminGate {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.admit(request)
    }
}

impl AdminGate {
    /// Lets `request` through only with the admin token.
    pub fn admit(&self, request: Request<()>) -> Result<Request<()>, Status> {
        self.0
            .check(bearer(request.metadata()))
            .map_err(from_error)?;
        Ok(request)
    }
}

/// The token of an `authorization: Bearer <token>` header.
fn bearer(metadata: &MetadataMap) -> Option<&str> {
    let value = metadata.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn named_tenant(metadata: &MetadataMap) -> Result<Option<Tenant>, Status> {
    let Some(value) = metadata.get(TENANT_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(Tenant::parse)
        .map(Some)
        .ok_or_else(|| invalid(TENANT_HEADER, Tenant::RULE))
}

/// The tenant a request acts for.
pub fn tenant_of<T>(request: &Request<T>) -> Result<Tenant, Status> {
    caller_of(request).map(|caller| caller.tenant)
}

/// The caller a request acts for, as the gate resolved it.
pub fn caller_of<T>(request: &Request<T>) -> Result<Caller, Status> {
    if let Some(caller) = request.extensions().get::<Caller>() {
        return Ok(caller.clone());
    }
    // Not behind a gate (a service built without one): the header names the tenant.
    Ok(Caller {
        tenant: named_tenant(request.metadata())?.unwrap_or_else(Tenant::default_tenant),
        limits: TenantLimits::default(),
    })
}
