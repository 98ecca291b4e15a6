//! The agent library: agents a tenant stores, versions and aliases, checked as a run would
//! resolve them before they are kept. Records live in the store only (nothing is cached),
//! so a new version or a moved alias is in force on every replica at once.

use std::collections::BTreeMap;

use crate::domain::agent::{check_alias, check_labels, check_slug};
use crate::domain::{
    AgentChange, AgentRecord, AgentRefusal, AgentVersionRecord, ErrorKind, FieldError, Tenant,
    VersionPick,
};
use crate::runner::{AgentDefinition, AgentReference, RunError, Runner};
use crate::store::{Page, PageSize, Store, StoreError};

/// Longest agent name.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest agent description.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;

/// Why a library request failed.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// A field is invalid.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The store refused the change.
    #[error(transparent)]
    Refused(#[from] AgentRefusal),
    /// The version does not resolve as a run would; the text names the request's field.
    #[error("{text}")]
    Unresolvable {
        /// What is wrong, naming the field under `config` or `client_tools`.
        text: String,
        /// Its class.
        kind: ErrorKind,
    },
    /// Looking the version up failed.
    #[error(transparent)]
    Lookup(#[from] RunError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LibraryError {
    /// The class of failure, for the API layer's mapping.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidField(_) => ErrorKind::InvalidArgument,
            Self::Refused(refusal) => refusal.kind(),
            Self::Unresolvable { kind, .. } => *kind,
            Self::Lookup(err) => err.kind(),
            Self::Store(err) => err.kind(),
        }
    }
}

/// What describes an agent, as a caller gives it.
#[derive(Debug, Clone, Default)]
pub struct Description {
    /// A display name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Labels to list it by.
    pub labels: BTreeMap<String, String>,
}

/// Stored agents over the store, checked by the runner.
#[derive(Clone)]
pub struct Library {
    store: Store,
    runner: Runner,
}

impl Library {
    /// A library over `store`, whose versions `runner` checks.
    pub fn new(store: Store, runner: Runner) -> Self {
        Self { store, runner }
    }

    /// Creates agent `id`, with its first version when `first` is given.
    pub async fn create(
        &self,
        tenant: &Tenant,
        id: &str,
        description: Description,
        first: Option<AgentDefinition>,
    ) -> Result<AgentRecord, LibraryError> {
        check_slug("agent_id", id)?;
        check_description(&description)?;
        let now = crate::domain::now();
        let first = match first {
            Some(definition) => Some(AgentVersionRecord {
                agent_id: id.to_owned(),
                version: 1,
                config: self.checked(tenant, id, definition).await?,
                created_at: now,
            }),
            None => None,
        };
        let record = AgentRecord {
            id: id.to_owned(),
            name: description.name,
            description: description.description,
            labels: description.labels,
            latest_version: u32::from(first.is_some()),
            aliases: BTreeMap::new(),
            created_at: now,
            updated_at: now,
        };
        self.store
            .create_agent(tenant, &record, first.as_ref())
            .await??;
        Ok(record)
    }

    /// Reads an agent.
    pub async fn get(&self, tenant: &Tenant, id: &str) -> Result<AgentRecord, LibraryError> {
        check_slug("agent_id", id)?;
        self.store
            .get_agent(tenant, id)
            .await?
            .ok_or_else(|| AgentRefusal::NoAgent(id.to_owned()).into())
    }

    /// The tenant's agents after `after`, carrying every label of `labels`.
    pub async fn list(
        &self,
        tenant: &Tenant,
        after: &str,
        labels: &BTreeMap<String, String>,
        limit: usize,
    ) -> Result<Page<AgentRecord>, LibraryError> {
        check_labels("labels", labels)?;
        Ok(self.store.list_agents(tenant, after, labels, limit).await?)
    }

    /// Changes what describes an agent (`None` keeps each part).
    pub async fn describe(
        &self,
        tenant: &Tenant,
        id: &str,
        name: Option<String>,
        description: Option<String>,
        labels: Option<BTreeMap<String, String>>,
    ) -> Result<AgentRecord, LibraryError> {
        check_slug("agent_id", id)?;
        check_description(&Description {
            name: name.clone().unwrap_or_default(),
            description: description.clone().unwrap_or_default(),
            labels: labels.clone().unwrap_or_default(),
        })?;
        let change = AgentChange::Describe {
            name,
            description,
            labels,
        };
        Ok(self.store.change_agent(tenant, id, &change).await??)
    }

    /// Deletes an agent with its versions.
    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<(), LibraryError> {
        check_slug("agent_id", id)?;
        if self.store.delete_agent(tenant, id).await? {
            Ok(())
        } else {
            Err(AgentRefusal::NoAgent(id.to_owned()).into())
        }
    }

    /// Adds a version, checked first.
    pub async fn add_version(
        &self,
        tenant: &Tenant,
        id: &str,
        definition: AgentDefinition,
    ) -> Result<(AgentVersionRecord, AgentDefinition), LibraryError> {
        check_slug("agent_id", id)?;
        let config = self.checked(tenant, id, definition).await?;
        let record = self.store.add_version(tenant, id, &config).await??;
        let definition = decode(&record.config)?;
        Ok((record, definition))
    }

    /// The version `pick` names now, with its definition.
    pub async fn version(
        &self,
        tenant: &Tenant,
        id: &str,
        pick: VersionPick,
    ) -> Result<(AgentVersionRecord, AgentDefinition), LibraryError> {
        check_slug("agent_id", id)?;
        let reference = AgentReference {
            agent_id: id.to_owned(),
            pick,
            overrides: Default::default(),
        };
        let (number, definition) = self.runner.read_version(tenant, &reference).await?;
        let record = self
            .store
            .get_version(tenant, id, number)
            .await?
            .ok_or_else(|| AgentRefusal::NoVersion {
                agent: id.to_owned(),
                version: number,
            })?;
        Ok((record, definition))
    }

    /// An agent's versions, newest first, below `before`.
    pub async fn versions(
        &self,
        tenant: &Tenant,
        id: &str,
        before: u32,
        size: PageSize,
    ) -> Result<Page<(AgentVersionRecord, AgentDefinition)>, LibraryError> {
        // An unknown agent is NOT_FOUND rather than an empty list.
        self.get(tenant, id).await?;
        let page = self.store.list_versions(tenant, id, before, size).await?;
        let items = page
            .items
            .into_iter()
            .map(|record| {
                let definition = decode(&record.config)?;
                Ok((record, definition))
            })
            .collect::<Result<_, LibraryError>>()?;
        Ok(Page {
            items,
            more: page.more,
        })
    }

    /// Points `alias` at `version`, if it points at `expected` (0: nowhere) when given.
    pub async fn set_alias(
        &self,
        tenant: &Tenant,
        id: &str,
        alias: &str,
        version: u32,
        expected: Option<u32>,
    ) -> Result<AgentRecord, LibraryError> {
        check_slug("agent_id", id)?;
        check_alias("alias", alias)?;
        if version == 0 {
            return Err(FieldError::new("version", "is required").into());
        }
        let change = AgentChange::SetAlias {
            alias: alias.to_owned(),
            version,
            expected,
        };
        Ok(self.store.change_agent(tenant, id, &change).await??)
    }

    /// Removes `alias`.
    pub async fn delete_alias(
        &self,
        tenant: &Tenant,
        id: &str,
        alias: &str,
    ) -> Result<AgentRecord, LibraryError> {
        check_slug("agent_id", id)?;
        check_alias("alias", alias)?;
        let change = AgentChange::DeleteAlias {
            alias: alias.to_owned(),
        };
        Ok(self.store.change_agent(tenant, id, &change).await??)
    }

    /// `definition` of agent `id` checked as a run would resolve it, in the form kept: the
    /// sub-agents it names exist (and are not `id` itself).
    async fn checked(
        &self,
        tenant: &Tenant,
        id: &str,
        definition: AgentDefinition,
    ) -> Result<serde_json::Value, LibraryError> {
        for (index, sub) in definition.agent.sub_agents.iter().enumerate() {
            let field = format!("config.sub_agents[{index}]");
            if sub.agent_id == id {
                return Err(FieldError::new(
                    format!("{field}.agent_id"),
                    "names this agent itself; an agent cannot be its own sub-agent",
                )
                .into());
            }
            check_slug(&format!("{field}.agent_id"), &sub.agent_id)?;
            let Some(record) = self.store.get_agent(tenant, &sub.agent_id).await? else {
                return Err(FieldError::new(
                    format!("{field}.agent_id"),
                    format!("names agent {:?}, which does not exist", sub.agent_id),
                )
                .into());
            };
            if record.version_of(&sub.pick()).is_none() {
                return Err(FieldError::new(
                    field,
                    format!(
                        "names a version of agent {:?} it does not have",
                        sub.agent_id
                    ),
                )
                .into());
            }
        }
        let definition = self
            .runner
            .check_definition(tenant, definition)
            .map_err(|err| LibraryError::Unresolvable {
                kind: err.kind(),
                text: under_config(&err.to_string()),
            })?;
        serde_json::to_value(definition).map_err(|source| {
            StoreError::Codec {
                record: "agent_versions",
                source,
            }
            .into()
        })
    }
}

/// A run's field names (`agent.…`) as a version's request spells them (`config.…`).
fn under_config(text: &str) -> String {
    match text.strip_prefix("agent.") {
        Some(rest) => format!("config.{rest}"),
        None => text.to_owned(),
    }
}

fn decode(config: &serde_json::Value) -> Result<AgentDefinition, LibraryError> {
    serde_json::from_value(config.clone()).map_err(|source| {
        StoreError::Codec {
            record: "agent_versions",
            source,
        }
        .into()
    })
}

fn check_description(description: &Description) -> Result<(), FieldError> {
    if description.name.len() > MAX_NAME_BYTES || description.name.chars().any(char::is_control) {
        return Err(FieldError::new(
            "name",
            format!("must be at most {MAX_NAME_BYTES} bytes without control characters"),
        ));
    }
    if description.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(FieldError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION_BYTES} bytes"),
        ));
    }
    check_labels("labels", &description.labels)
}
