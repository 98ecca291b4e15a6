//! A stored agent named by a run, resolved once as the run starts: the version its alias
//! points at now, with the run's overrides applied. The result is kept with the message
//! (its spec and its pin), so a resumed, attached or recovered run never reads the alias
//! again.

use super::error::RunError;
use super::spec::{AgentDefinition, AgentReference, RunSpec, SubAgentRef};
use crate::domain::{FieldError, PinnedAgent, RunOverrides, Tenant, VersionPick};
use crate::store::{Store, StoreError};

/// Fills `spec.agent` and `spec.client_tools` from the stored agent `spec.reference`
/// names, and pins the version; a spec without a reference is returned as it is.
pub async fn pin(store: &Store, mut spec: RunSpec) -> Result<RunSpec, RunError> {
    let Some(reference) = spec.reference.take() else {
        return Ok(spec);
    };
    let (version, definition) = read_version(store, &spec.tenant, &reference).await?;
    let AgentDefinition {
        mut agent,
        mut client_tools,
    } = definition;
    apply(&mut agent, &reference.overrides)?;
    for (index, tool) in spec.client_tools.iter().enumerate() {
        if client_tools.iter().any(|own| own.name == tool.name) {
            return Err(FieldError::new(
                format!("client_tools[{index}].name"),
                format!(
                    "{:?} is already a client tool of agent {}",
                    tool.name, reference.agent_id
                ),
            )
            .into());
        }
    }
    client_tools.append(&mut spec.client_tools);
    spec.agent = agent;
    spec.client_tools = client_tools;
    spec.pinned = Some(PinnedAgent {
        agent_id: reference.agent_id,
        version,
        overrides: reference.overrides,
    });
    Ok(spec)
}

/// Most stored versions read when walking a tree of sub-agents: more than any tree
/// `runner.max_agent_depth` and the sub-agents a config may name reach in practice, few
/// enough that a check made at `Run` or for a card stays cheap.
const MAX_TREE_READS: usize = 64;

/// Every stored version below `sub_agents` as it resolves now, outermost first, each read
/// once: a version that cannot be read is given as its error and not walked below.
pub async fn tree_below(
    store: &Store,
    tenant: &Tenant,
    sub_agents: &[SubAgentRef],
) -> Vec<Result<AgentDefinition, RunError>> {
    let mut seen = std::collections::HashSet::new();
    let mut below: std::collections::VecDeque<SubAgentRef> = sub_agents.iter().cloned().collect();
    let mut found = Vec::new();
    while let Some(sub) = below.pop_front() {
        let key = format!("{}@{:?}", sub.agent_id, sub.pick());
        if seen.len() >= MAX_TREE_READS || !seen.insert(key) {
            continue;
        }
        let reference = AgentReference {
            agent_id: sub.agent_id.clone(),
            pick: sub.pick(),
            overrides: Default::default(),
        };
        let read = read_version(store, tenant, &reference).await;
        if let Ok((_, definition)) = &read {
            below.extend(definition.agent.sub_agents.iter().cloned());
        }
        found.push(read.map(|(_, definition)| definition));
    }
    found
}

/// The version `reference` names now, decoded.
pub async fn read_version(
    store: &Store,
    tenant: &Tenant,
    reference: &AgentReference,
) -> Result<(u32, AgentDefinition), RunError> {
    let id = &reference.agent_id;
    let agent = store
        .get_agent(tenant, id)
        .await?
        .ok_or_else(|| RunError::not_found("agent", id))?;
    let version = agent.version_of(&reference.pick).ok_or_else(|| {
        let what = match &reference.pick {
            VersionPick::Latest => "version (it has none yet)".to_owned(),
            VersionPick::Number(n) => format!("version {n}"),
            VersionPick::Alias(alias) => format!("alias {alias:?}"),
        };
        RunError::not_found("agent version", format!("{id}: no {what}"))
    })?;
    let stored = store
        .get_version(tenant, id, version)
        .await?
        .ok_or_else(|| RunError::not_found("agent version", format!("{id}@{version}")))?;
    let definition = serde_json::from_value(stored.config).map_err(|source| StoreError::Codec {
        record: "agent_versions",
        source,
    })?;
    Ok((version, definition))
}

/// The version's agent as one run changes it; a budget may be lowered, never raised.
fn apply(agent: &mut super::spec::AgentSpec, overrides: &RunOverrides) -> Result<(), FieldError> {
    agent.budget = agent
        .budget
        .lowered_by(&overrides.budget)
        .map_err(|raised| {
            FieldError::new(format!("overrides.{}", raised.field), raised.to_string())
        })?;
    // The version's fallbacks stay: they are its author's choice of what to try when a
    // model fails, whichever model runs first.
    if let Some((provider, name)) = &overrides.model {
        agent.model.provider.clone_from(provider);
        agent.model.name.clone_from(name);
    }
    if overrides.max_iteration > 0 {
        agent.max_iteration = overrides.max_iteration;
    }
    if !overrides.additional_instruction.is_empty() {
        if !agent.instruction.is_empty() {
            agent.instruction.push_str("\n\n");
        }
        agent
            .instruction
            .push_str(&overrides.additional_instruction);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::spec::{AgentSpec, ModelRef, ModelSpec};

    #[test]
    fn overrides_change_only_what_they_name() {
        let mut agent = AgentSpec {
            model: ModelSpec {
                provider: "openai".into(),
                name: "big".into(),
                fallbacks: vec![ModelRef {
                    provider: "anthropic".into(),
                    name: "other".into(),
                }],
                ..ModelSpec::default()
            },
            max_iteration: 5,
            instruction: "Be brief.".into(),
            ..AgentSpec::default()
        };
        apply(&mut agent, &RunOverrides::default()).unwrap();
        assert_eq!(agent.model.name, "big");
        assert_eq!(agent.model.fallbacks.len(), 1);
        apply(
            &mut agent,
            &RunOverrides {
                model: Some(("openai".into(), "small".into())),
                max_iteration: 2,
                additional_instruction: "Answer in French.".into(),
                ..RunOverrides::default()
            },
        )
        .unwrap();
        assert_eq!(agent.model.name, "small");
        assert_eq!(agent.model.fallbacks.len(), 1);
        assert_eq!(agent.max_iteration, 2);
        assert_eq!(agent.instruction, "Be brief.\n\nAnswer in French.");
    }
}
