//! The stored agent a run names (`agent_ref`) and the overrides it applies, checked
//! field by field; shared by `Run` and the registry.

use tonic::Status;

use crate::api::status::invalid;
use crate::domain::agent::{check_slug, LATEST};
use crate::domain::{RunOverrides, VersionPick};
use crate::pb;
use crate::runner::{AgentReference, MAX_ITERATION_LIMIT};

/// Longest instruction a run's overrides append.
pub const MAX_ADDITIONAL_INSTRUCTION: usize = 64 * 1024;

/// The stored agent a run names, with its overrides, checked field by field.
pub fn reference(
    agent_ref: pb::AgentRef,
    overrides: Option<pb::RunOverrides>,
) -> Result<AgentReference, Status> {
    let pb::AgentRef {
        agent_id,
        version,
        alias,
    } = agent_ref;
    check_slug("agent_ref.agent_id", &agent_id).map_err(crate::api::status::from_error)?;
    let pick = pick("agent_ref.alias", version, alias)?;
    Ok(AgentReference {
        agent_id,
        pick,
        overrides: run_overrides(overrides.unwrap_or_default())?,
    })
}

/// A version by number or alias (the field `alias_field`); neither is `latest`.
pub fn pick(alias_field: &str, version: u32, alias: String) -> Result<VersionPick, Status> {
    match (version, alias.is_empty()) {
        (0, true) => Ok(VersionPick::Latest),
        (0, false) => {
            check_slug(alias_field, &alias).map_err(crate::api::status::from_error)?;
            Ok(if alias == LATEST {
                VersionPick::Latest
            } else {
                VersionPick::Alias(alias)
            })
        }
        (n, true) => Ok(VersionPick::Number(n)),
        (_, false) => Err(invalid(
            alias_field,
            "must not be given with a version: give one of the two",
        )),
    }
}

fn run_overrides(overrides: pb::RunOverrides) -> Result<RunOverrides, Status> {
    let pb::RunOverrides {
        model,
        max_iteration,
        additional_instruction,
        budget,
    } = overrides;
    let model = match model {
        None => None,
        Some(pb::ModelRef { provider, name }) if provider.is_empty() || name.is_empty() => {
            return Err(invalid(
                "overrides.model",
                "needs both a provider and a name",
            ))
        }
        Some(pb::ModelRef { provider, name }) => Some((provider, name)),
    };
    if max_iteration > MAX_ITERATION_LIMIT {
        return Err(invalid(
            "overrides.max_iteration",
            &format!("must be between 1 and {MAX_ITERATION_LIMIT}"),
        ));
    }
    if additional_instruction.len() > MAX_ADDITIONAL_INSTRUCTION {
        return Err(invalid(
            "overrides.additional_instruction",
            &format!("must be at most {MAX_ADDITIONAL_INSTRUCTION} bytes"),
        ));
    }
    Ok(RunOverrides {
        model,
        max_iteration,
        additional_instruction,
        budget: super::budget::run_budget(budget, "overrides.budget")?,
    })
}

/// The overrides a run applied, as a message shows them.
pub fn overrides_pb(overrides: RunOverrides) -> pb::RunOverrides {
    let RunOverrides {
        model,
        max_iteration,
        additional_instruction,
        budget,
    } = overrides;
    pb::RunOverrides {
        model: model.map(|(provider, name)| pb::ModelRef { provider, name }),
        max_iteration,
        additional_instruction,
        budget: super::budget::budget_pb(budget),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_names_its_bad_fields() {
        let bad = |agent_ref: pb::AgentRef, overrides: Option<pb::RunOverrides>| {
            reference(agent_ref, overrides)
                .unwrap_err()
                .message()
                .to_owned()
        };
        let id = |id: &str| pb::AgentRef {
            agent_id: id.into(),
            ..Default::default()
        };
        assert_eq!(
            bad(id("Bad_Id"), None),
            "agent_ref.agent_id must be 1 to 63 characters of a-z, 0-9 and -"
        );
        assert_eq!(
            bad(
                pb::AgentRef {
                    version: 2,
                    alias: "prod".into(),
                    ..id("helper")
                },
                None
            ),
            "agent_ref.alias must not be given with a version: give one of the two"
        );
        assert_eq!(
            bad(
                id("helper"),
                Some(pb::RunOverrides {
                    max_iteration: 100,
                    ..Default::default()
                })
            ),
            "overrides.max_iteration must be between 1 and 99"
        );
        assert_eq!(
            bad(
                id("helper"),
                Some(pb::RunOverrides {
                    additional_instruction: "x".repeat(MAX_ADDITIONAL_INSTRUCTION + 1),
                    ..Default::default()
                })
            ),
            "overrides.additional_instruction must be at most 65536 bytes"
        );
    }
}
