//! The providers and their tools, shared by every run.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use super::schema::{PatternBudget, Schema, SchemaError};
use super::{ErasedTool, ProviderKind, RegistryError};
use crate::domain::Tenant;

/// A tool with its argument schema checked at registration; the compiled validator lives
/// in the bounded schema cache, not with the tool.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The tool.
    pub tool: Arc<dyn ErasedTool>,
    /// [`super::ToolDescriptor::parameters`], checked.
    pub schema: Schema,
}

/// A named group of tools.
#[derive(Clone)]
pub struct Provider {
    /// Unique name.
    pub name: String,
    /// Where the tools come from.
    pub kind: ProviderKind,
    /// What the provider offers, for people.
    pub description: String,
    /// Its tools by name.
    pub tools: BTreeMap<String, RegisteredTool>,
}

impl Provider {
    /// The tool called `name`, or whose document or server name is `name`.
    pub fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name).or_else(|| {
            self.tools
                .values()
                .find(|tool| tool.tool.descriptor().original_name.as_deref() == Some(name))
        })
    }

    /// A provider with `tools`, checking each tool's argument schema; fails on a schema
    /// that is not valid JSON Schema or, with the tools before it, passes a bound.
    pub fn new(
        name: &str,
        kind: ProviderKind,
        description: &str,
        tools: Vec<Arc<dyn ErasedTool>>,
    ) -> Result<Self, RegistryError> {
        Self::within(name, kind, description, tools, &mut PatternBudget::new())
    }

    /// [`Self::new`], counting patterns against `budget` (which a request shares with its
    /// other schemas).
    pub fn within(
        name: &str,
        kind: ProviderKind,
        description: &str,
        tools: Vec<Arc<dyn ErasedTool>>,
        budget: &mut PatternBudget,
    ) -> Result<Self, RegistryError> {
        let tools = tools
            .into_iter()
            .map(|tool| {
                let descriptor = tool.descriptor();
                let schema = Schema::check(&descriptor.parameters, budget).map_err(|err| {
                    let tool = descriptor.name.clone();
                    match err {
                        SchemaError::Invalid(reason) => {
                            RegistryError::InvalidSchema { tool, reason }
                        }
                        bound @ (SchemaError::TooManyPatterns { .. }
                        | SchemaError::TooLarge { .. }) => RegistryError::SchemaBound {
                            tool,
                            source: bound,
                        },
                    }
                })?;
                Ok((
                    descriptor.name.clone(),
                    RegisteredTool {
                        tool: Arc::clone(&tool),
                        schema,
                    },
                ))
            })
            .collect::<Result<_, RegistryError>>()?;
        Ok(Self {
            name: name.to_owned(),
            kind,
            description: description.to_owned(),
            tools,
        })
    }
}

/// An immutable view of the providers a tenant can use, taken once per run so a provider
/// deleted mid-run cannot pull a tool from under it.
pub type ToolSnapshot = Arc<BTreeMap<String, Arc<Provider>>>;

/// Built-in providers, shared by every tenant, and each tenant's registered ones.
///
/// Copy-on-write behind `std` `RwLock`s: reads (one per run) clone `Arc`s and never wait on
/// a writer for long, and no lock is held across an await.
#[derive(Default)]
pub struct ToolRegistry {
    builtins: RwLock<ToolSnapshot>,
    tenants: RwLock<HashMap<Tenant, ToolSnapshot>>,
}

fn with_inserted(map: &ToolSnapshot, provider: Provider) -> ToolSnapshot {
    let mut next = (**map).clone();
    next.insert(provider.name.clone(), Arc::new(provider));
    Arc::new(next)
}

impl ToolRegistry {
    /// A registry with the built-in providers.
    pub fn with_builtins() -> Result<Self, RegistryError> {
        let registry = Self::default();
        for provider in super::builtin::providers()? {
            registry.register_builtin(provider);
        }
        Ok(registry)
    }

    /// Adds (or replaces) a provider every tenant sees.
    pub fn register_builtin(&self, provider: Provider) {
        let mut builtins = self
            .builtins
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *builtins = with_inserted(&builtins, provider);
    }

    /// Whether `name` is a built-in provider (which cannot be created over or deleted).
    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtins
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
    }

    /// Adds (or replaces) a tenant's provider.
    pub fn register(&self, tenant: &Tenant, provider: Provider) {
        let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        let current = tenants.get(tenant).cloned().unwrap_or_default();
        tenants.insert(tenant.clone(), with_inserted(&current, provider));
    }

    /// Removes a tenant's provider; returns whether it was there.
    pub fn remove(&self, tenant: &Tenant, name: &str) -> bool {
        let mut tenants = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        let Some(current) = tenants.get(tenant) else {
            return false;
        };
        if !current.contains_key(name) {
            return false;
        }
        let mut next = (**current).clone();
        next.remove(name);
        tenants.insert(tenant.clone(), Arc::new(next));
        true
    }

    /// The providers `tenant` can use now: the built-in ones and its own.
    pub fn snapshot(&self, tenant: &Tenant) -> ToolSnapshot {
        let builtins = Arc::clone(&self.builtins.read().unwrap_or_else(PoisonError::into_inner));
        let own = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned();
        match own {
            Some(own) if !own.is_empty() => {
                let mut merged = (*builtins).clone();
                merged.extend(own.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
                Arc::new(merged)
            }
            Some(_) | None => builtins,
        }
    }
}
