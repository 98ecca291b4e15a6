//! Stored agents: an agent defined once, its immutable versions and the aliases that point
//! at them. The rules of their changes live here, so both stores apply the same ones.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::FieldError;

/// The alias that always follows an agent's newest version.
pub const LATEST: &str = "latest";
/// Most aliases one agent has, `latest` aside.
pub const MAX_ALIASES: usize = 32;
/// Most labels one agent carries.
pub const MAX_LABELS: usize = 32;
/// Most versions one agent has.
pub const MAX_VERSIONS: u32 = 10_000;
/// Most agents one tenant has.
pub const MAX_AGENTS: u64 = 10_000;

/// An agent as stored: what describes it and where its aliases point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Chosen at create; `[a-z0-9-]`, unique per tenant.
    pub id: String,
    /// A display name.
    pub name: String,
    /// What it does; a parent model reads it when the agent is its tool.
    pub description: String,
    /// Labels listings filter on.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The newest version, 0 before the first: versions are 1 ..= this, none missing.
    pub latest_version: u32,
    /// Aliases other than `latest`, to their versions.
    #[serde(default)]
    pub aliases: BTreeMap<String, u32>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed (a new version or an alias moved counts).
    pub updated_at: DateTime<Utc>,
}

/// One immutable version: the agent's whole configuration as the runner reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentVersionRecord {
    /// Its agent.
    pub agent_id: String,
    /// 1, 2, 3 … per agent.
    pub version: u32,
    /// The configuration, in the runner's own form (the store does not read it).
    pub config: serde_json::Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// Which version of a stored agent a caller names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionPick {
    /// The newest.
    Latest,
    /// This number.
    Number(u32),
    /// Where this alias points.
    Alias(String),
}

/// The stored agent a run runs, resolved once as it starts: resuming, attaching and
/// recovery use this version, never where an alias points later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedAgent {
    /// The agent.
    pub agent_id: String,
    /// Its version.
    pub version: u32,
    /// What the run changed of it.
    #[serde(default, skip_serializing_if = "RunOverrides::is_empty")]
    pub overrides: RunOverrides,
}

/// Where a sub-agent's run sits: the run and call that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run's message.
    pub message_id: super::MessageId,
    /// The parent's call that started this run.
    pub tool_call_id: String,
    /// 1 for a child of a top run.
    pub depth: u32,
    /// The parent's round (its thought's position) and the call's place in it: with the
    /// call's id and arguments they name the call, however the model numbers its ids.
    /// `None` on children started by releases that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_at: Option<CallAt>,
}

/// Where a call sits in its run: the round's position and the call's index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAt {
    /// The round (its thought's position).
    pub position: u32,
    /// The call's index in the round.
    pub index: u32,
}

/// What one run of a stored agent changes of its version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunOverrides {
    /// Another model: provider and name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<(String, String)>,
    /// Another iteration limit (0: the version's).
    #[serde(skip_serializing_if = "is_zero")]
    pub max_iteration: u32,
    /// Appended to the version's instruction.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub additional_instruction: String,
    /// Lowers the version's budget.
    #[serde(default, skip_serializing_if = "super::RunBudget::is_unset")]
    pub budget: super::RunBudget,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl RunOverrides {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

impl AgentRecord {
    /// The version `pick` names now, if there is one.
    pub fn version_of(&self, pick: &VersionPick) -> Option<u32> {
        match pick {
            VersionPick::Latest => Some(self.latest_version).filter(|v| *v > 0),
            VersionPick::Number(n) => Some(*n).filter(|n| (1..=self.latest_version).contains(n)),
            VersionPick::Alias(alias) if alias == LATEST => {
                Some(self.latest_version).filter(|v| *v > 0)
            }
            VersionPick::Alias(alias) => self.aliases.get(alias).copied(),
        }
    }

    /// Adds the version one past the newest, holding `config`, at `now`: `latest` moves to
    /// it. Refused past [`MAX_VERSIONS`].
    pub fn next_version(
        &mut self,
        config: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<AgentVersionRecord, AgentRefusal> {
        if self.latest_version >= MAX_VERSIONS {
            return Err(AgentRefusal::TooManyVersions(self.id.clone()));
        }
        self.latest_version += 1;
        self.updated_at = now;
        Ok(AgentVersionRecord {
            agent_id: self.id.clone(),
            version: self.latest_version,
            config: config.clone(),
            created_at: now,
        })
    }

    /// The first of its descriptive fields that holds NUL (U+0000), if any: refused by
    /// both stores alike, since PostgreSQL cannot keep it in the record it indexes labels on.
    pub fn field_with_nul(&self) -> Option<&'static str> {
        field_with_nul(
            Some(&self.name),
            Some(&self.description),
            Some(&self.labels),
        )
    }

    /// Every alias with its version, `latest` included when there is a version.
    pub fn all_aliases(&self) -> BTreeMap<String, u32> {
        let mut all = self.aliases.clone();
        if self.latest_version > 0 {
            all.insert(LATEST.to_owned(), self.latest_version);
        }
        all
    }
}

/// The first of the given fields that holds NUL (U+0000).
fn field_with_nul(
    name: Option<&String>,
    description: Option<&String>,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<&'static str> {
    let nul = |text: &str| text.contains('\0');
    if name.is_some_and(|name| nul(name)) {
        return Some("name");
    }
    if description.is_some_and(|description| nul(description)) {
        return Some("description");
    }
    labels
        .is_some_and(|labels| labels.iter().any(|(key, value)| nul(key) || nul(value)))
        .then_some("labels")
}

/// Why a change to an agent was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentRefusal {
    /// No such agent.
    #[error("agent {0} not found")]
    NoAgent(String),
    /// An agent with that id exists.
    #[error("agent {0:?} already exists")]
    Exists(String),
    /// The tenant has as many agents as it may.
    #[error("the tenant has {MAX_AGENTS} agents, the most it may have")]
    TooManyAgents,
    /// The agent has as many versions as it may.
    #[error("agent {0:?} has {MAX_VERSIONS} versions, the most one may have")]
    TooManyVersions(String),
    /// The agent has as many aliases as it may.
    #[error("agent {0:?} has {MAX_ALIASES} aliases, the most one may have")]
    TooManyAliases(String),
    /// The version named does not exist.
    #[error("agent {agent:?} has no version {version}")]
    NoVersion {
        /// The agent.
        agent: String,
        /// The version asked for.
        version: u32,
    },
    /// The alias named does not exist.
    #[error("agent {agent:?} has no alias {alias:?}")]
    NoAlias {
        /// The agent.
        agent: String,
        /// The alias asked for.
        alias: String,
    },
    /// A descriptive field holds NUL (U+0000).
    #[error("{0} must not contain NUL (U+0000)")]
    HoldsNul(&'static str),
    /// A compare-and-set found the alias elsewhere.
    #[error("alias {alias:?} points at {}, not at the expected version {expected}", describe(*.current))]
    Moved {
        /// The alias.
        alias: String,
        /// Where the caller expected it (0: nowhere).
        expected: u32,
        /// Where it points (`None`: nowhere).
        current: Option<u32>,
    },
}

impl AgentRefusal {
    /// The class of failure, for the API layer's mapping.
    pub fn kind(&self) -> super::ErrorKind {
        use super::ErrorKind;
        match self {
            Self::NoAgent(_) | Self::NoVersion { .. } | Self::NoAlias { .. } => ErrorKind::NotFound,
            Self::Exists(_) => ErrorKind::AlreadyExists,
            Self::TooManyAgents | Self::TooManyVersions(_) | Self::TooManyAliases(_) => {
                ErrorKind::ResourceExhausted
            }
            Self::Moved { .. } => ErrorKind::FailedPrecondition,
            Self::HoldsNul(_) => ErrorKind::InvalidArgument,
        }
    }
}

fn describe(version: Option<u32>) -> String {
    version.map_or_else(|| "no version".to_owned(), |v| format!("version {v}"))
}

/// A change to an agent record, applied by the store under its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentChange {
    /// New name, description or labels (`None` keeps each).
    Describe {
        /// The new name.
        name: Option<String>,
        /// The new description.
        description: Option<String>,
        /// The new labels, replacing all.
        labels: Option<BTreeMap<String, String>>,
    },
    /// Points `alias` at `version`, if it points at `expected` (0: nowhere) when given.
    SetAlias {
        /// The alias.
        alias: String,
        /// The version.
        version: u32,
        /// Compare-and-set on where it points now.
        expected: Option<u32>,
    },
    /// Removes `alias`.
    DeleteAlias {
        /// The alias.
        alias: String,
    },
}

impl AgentChange {
    /// Applies the change to `record` as it is stored now, at `now`.
    pub fn apply(&self, record: &mut AgentRecord, now: DateTime<Utc>) -> Result<(), AgentRefusal> {
        match self {
            Self::Describe {
                name,
                description,
                labels,
            } => {
                if let Some(field) =
                    field_with_nul(name.as_ref(), description.as_ref(), labels.as_ref())
                {
                    return Err(AgentRefusal::HoldsNul(field));
                }
                if let Some(name) = name {
                    record.name.clone_from(name);
                }
                if let Some(description) = description {
                    record.description.clone_from(description);
                }
                if let Some(labels) = labels {
                    record.labels.clone_from(labels);
                }
            }
            Self::SetAlias {
                alias,
                version,
                expected,
            } => {
                let current = record.aliases.get(alias).copied();
                if let Some(expected) = *expected {
                    if current.unwrap_or(0) != expected {
                        return Err(AgentRefusal::Moved {
                            alias: alias.clone(),
                            expected,
                            current,
                        });
                    }
                }
                if !(1..=record.latest_version).contains(version) {
                    return Err(AgentRefusal::NoVersion {
                        agent: record.id.clone(),
                        version: *version,
                    });
                }
                if current.is_none() && record.aliases.len() >= MAX_ALIASES {
                    return Err(AgentRefusal::TooManyAliases(record.id.clone()));
                }
                record.aliases.insert(alias.clone(), *version);
            }
            Self::DeleteAlias { alias } => {
                if record.aliases.remove(alias).is_none() {
                    return Err(AgentRefusal::NoAlias {
                        agent: record.id.clone(),
                        alias: alias.clone(),
                    });
                }
            }
        }
        record.updated_at = now;
        Ok(())
    }
}

/// Checks an agent id or alias: `[a-z0-9-]`, 1 to 63 characters.
pub fn check_slug(field: &str, value: &str) -> Result<(), FieldError> {
    let fits = (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if fits {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be 1 to 63 characters of a-z, 0-9 and -",
        ))
    }
}

/// Checks an alias a caller sets: a slug, and not `latest`.
pub fn check_alias(field: &str, alias: &str) -> Result<(), FieldError> {
    check_slug(field, alias)?;
    if alias == LATEST {
        return Err(FieldError::new(
            field,
            "`latest` is reserved: it follows the newest version",
        ));
    }
    Ok(())
}

/// Checks an agent's labels: at most [`MAX_LABELS`], keys `[a-z0-9_.-]` of 1 to 63
/// characters, values up to 256 bytes without control characters.
pub fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), FieldError> {
    if labels.len() > MAX_LABELS {
        return Err(FieldError::new(
            field,
            format!("may hold at most {MAX_LABELS} labels"),
        ));
    }
    for (key, value) in labels {
        let key_fits = (1..=63).contains(&key.len())
            && key.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
            });
        if !key_fits {
            return Err(FieldError::new(
                field,
                format!("key {key:?} must be 1 to 63 characters of a-z, 0-9, -, _ and ."),
            ));
        }
        if value.len() > 256 || value.chars().any(char::is_control) {
            return Err(FieldError::new(
                format!("{field}.{key}"),
                "must be at most 256 bytes without control characters",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AgentRecord {
        let now = Utc::now();
        AgentRecord {
            id: "helper".into(),
            name: String::new(),
            description: String::new(),
            labels: BTreeMap::new(),
            latest_version: 2,
            aliases: BTreeMap::new(),
            created_at: now,
            updated_at: now,
        }
    }

    fn set(alias: &str, version: u32, expected: Option<u32>) -> AgentChange {
        AgentChange::SetAlias {
            alias: alias.into(),
            version,
            expected,
        }
    }

    #[test]
    fn an_alias_moves_only_where_it_was_expected() {
        let mut agent = record();
        let now = Utc::now();
        set("prod", 1, Some(0)).apply(&mut agent, now).unwrap();
        assert_eq!(
            set("prod", 2, Some(0)).apply(&mut agent, now),
            Err(AgentRefusal::Moved {
                alias: "prod".into(),
                expected: 0,
                current: Some(1)
            })
        );
        set("prod", 2, Some(1)).apply(&mut agent, now).unwrap();
        set("prod", 1, None).apply(&mut agent, now).unwrap();
        assert_eq!(
            agent.version_of(&VersionPick::Alias("prod".into())),
            Some(1)
        );
        assert_eq!(
            agent.version_of(&VersionPick::Alias("latest".into())),
            Some(2)
        );
    }

    #[test]
    fn an_alias_points_only_at_a_version_that_exists() {
        let mut agent = record();
        let refused = set("prod", 3, None).apply(&mut agent, Utc::now());
        assert!(matches!(
            refused,
            Err(AgentRefusal::NoVersion { version: 3, .. })
        ));
        assert_eq!(agent.version_of(&VersionPick::Number(3)), None);
        assert_eq!(agent.version_of(&VersionPick::Number(0)), None);
    }

    #[test]
    fn slugs_and_the_reserved_alias_are_checked() {
        assert!(check_slug("agent_id", "helper-2").is_ok());
        for bad in ["", "Helper", "a_b", &"a".repeat(64)] {
            assert!(check_slug("agent_id", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_alias("alias", "latest").unwrap_err().to_string(),
            "alias `latest` is reserved: it follows the newest version"
        );
    }
}
