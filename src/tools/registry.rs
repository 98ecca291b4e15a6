//! The providers and their tools, shared by every run.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::{ErasedTool, ProviderKind, RegistryError};

/// A tool with its argument validator compiled once, at registration.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The tool.
    pub tool: Arc<dyn ErasedTool>,
    /// Validator for [`super::ToolDescriptor::parameters`].
    pub validator: Arc<jsonschema::Validator>,
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
    /// A provider with `tools`, compiling each tool's argument schema; fails on a schema
    /// that is not valid JSON Schema.
    pub fn new(
        name: &str,
        kind: ProviderKind,
        description: &str,
        tools: Vec<Arc<dyn ErasedTool>>,
    ) -> Result<Self, RegistryError> {
        let tools = tools
            .into_iter()
            .map(|tool| {
                let descriptor = tool.descriptor();
                let validator =
                    jsonschema::validator_for(&descriptor.parameters).map_err(|err| {
                        RegistryError::InvalidSchema {
                            tool: descriptor.name.clone(),
                            reason: err.to_string(),
                        }
                    })?;
                Ok((
                    descriptor.name.clone(),
                    RegisteredTool {
                        tool: Arc::clone(&tool),
                        validator: Arc::new(validator),
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

/// An immutable view of the registry, taken once per run so a provider deleted mid-run
/// cannot pull a tool from under it.
pub type ToolSnapshot = Arc<BTreeMap<String, Arc<Provider>>>;

/// Every provider, by name.
///
/// Copy-on-write behind a `std` `RwLock`: reads (one per run) clone an `Arc` and never wait
/// on a writer for long, and the lock is never held across an await.
#[derive(Default)]
pub struct ToolRegistry {
    providers: RwLock<ToolSnapshot>,
}

impl ToolRegistry {
    /// A registry with the built-in providers.
    pub fn with_builtins() -> Result<Self, RegistryError> {
        let registry = Self::default();
        for provider in super::builtin::providers()? {
            registry.register(provider);
        }
        Ok(registry)
    }

    /// Adds or replaces a provider.
    pub fn register(&self, provider: Provider) {
        let mut guard = self
            .providers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = (**guard).clone();
        next.insert(provider.name.clone(), Arc::new(provider));
        *guard = Arc::new(next);
    }

    /// The providers as they are now.
    pub fn snapshot(&self) -> ToolSnapshot {
        let guard = self
            .providers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&guard)
    }
}
