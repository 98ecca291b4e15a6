//! `agents`: stored agents from the command line. A file (TOML or JSON) describes an agent
//! in the form the server keeps a version in, so `agents show` prints what `agents create`
//! reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::args::{AgentsCommand, ClientArgs};
use super::connection::{library, status_error};
use crate::api::convert::agent::{definition, export};
use crate::pb;
use crate::runner::{AgentDefinition, AgentSpec};
use crate::tools::ClientToolSpec;

/// An agent as a file describes it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    agent: AgentSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    client_tools: Vec<ClientToolSpec>,
}

/// `ID`, `ID@VERSION` or `ID:ALIAS` as the id, a version (0: none) and an alias.
pub fn parse_reference(text: &str) -> anyhow::Result<(String, u32, String)> {
    if let Some((id, version)) = text.split_once('@') {
        let version = version
            .parse()
            .with_context(|| format!("{text:?}: the version after @ must be a number"))?;
        return Ok((id.to_owned(), version, String::new()));
    }
    if let Some((id, alias)) = text.split_once(':') {
        return Ok((id.to_owned(), 0, alias.to_owned()));
    }
    Ok((text.to_owned(), 0, String::new()))
}

fn read_file(path: &Path) -> anyhow::Result<AgentFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json = path.extension().is_some_and(|ext| ext == "json");
    if json {
        serde_json::from_str(&text).with_context(|| format!("{} is not an agent", path.display()))
    } else {
        toml::from_str(&text).with_context(|| format!("{} is not an agent", path.display()))
    }
}

/// Runs an `agents` command; returns what to print.
pub async fn agents(args: &ClientArgs, command: AgentsCommand) -> anyhow::Result<String> {
    let mut client = library(args).await?;
    match command {
        AgentsCommand::Create { file } => create(&mut client, &file).await,
        AgentsCommand::List { labels } => {
            let labels = labels
                .iter()
                .map(|label| {
                    label
                        .split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .with_context(|| format!("--label {label:?} must be key=value"))
                })
                .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
            list(&mut client, labels).await
        }
        AgentsCommand::Show { agent } => show(&mut client, &agent).await,
        AgentsCommand::Versions { agent_id } => versions(&mut client, agent_id).await,
        AgentsCommand::Alias {
            agent_id,
            alias,
            version,
            expect,
        } => {
            client
                .set_alias(pb::SetAliasRequest {
                    agent_id: agent_id.clone(),
                    alias: alias.clone(),
                    version,
                    expected_version: expect,
                })
                .await
                .map_err(status_error)?;
            Ok(format!("{agent_id}:{alias} → {version}\n"))
        }
        AgentsCommand::Delete { agent_id } => {
            client
                .delete_agent(pb::DeleteAgentRequest {
                    agent_id: agent_id.clone(),
                })
                .await
                .map_err(status_error)?;
            Ok(format!("deleted {agent_id}\n"))
        }
    }
}

type Library = crate::pb::agent_registry_client::AgentRegistryClient<super::connection::Authed>;

/// Creates the agent `file` describes, or adds its config as a new version when the agent
/// exists: prints `id@version`.
async fn create(client: &mut Library, file: &Path) -> anyhow::Result<String> {
    let file = read_file(file)?;
    let (config, client_tools) = export(AgentDefinition {
        agent: file.agent,
        client_tools: file.client_tools,
    });
    let created = client
        .create_agent(pb::CreateAgentRequest {
            agent_id: file.id.clone(),
            name: file.name,
            description: file.description,
            labels: file.labels,
            config: Some(config.clone()),
            client_tools: client_tools.clone(),
        })
        .await;
    let version = match created {
        Ok(agent) => agent.into_inner().latest_version,
        Err(status) if status.code() == tonic::Code::AlreadyExists => {
            client
                .create_agent_version(pb::CreateAgentVersionRequest {
                    agent_id: file.id.clone(),
                    config: Some(config),
                    client_tools,
                })
                .await
                .map_err(status_error)?
                .into_inner()
                .version
        }
        Err(status) => return Err(status_error(status)),
    };
    Ok(format!("{}@{version}\n", file.id))
}

/// The agent `agent` names (`id`, `id@version` or `id:alias`) as a file `create` takes,
/// with its version and aliases.
async fn show(client: &mut Library, agent: &str) -> anyhow::Result<String> {
    let (agent_id, version, alias) = parse_reference(agent)?;
    let record = client
        .get_agent(pb::GetAgentRequest {
            agent_id: agent_id.clone(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let found = client
        .get_agent_version(pb::GetAgentVersionRequest {
            agent_id,
            version,
            alias,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let shown = definition(found.config, found.client_tools).map_err(status_error)?;
    let file = AgentFile {
        id: record.id,
        name: record.name,
        description: record.description,
        labels: record.labels,
        agent: shown.agent,
        client_tools: shown.client_tools,
    };
    let mut text = serde_json::to_string_pretty(&serde_json::json!({
        "version": found.version,
        "aliases": record.aliases,
        "file": file,
    }))?;
    text.push('\n');
    Ok(text)
}

async fn list(client: &mut Library, labels: BTreeMap<String, String>) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_agents(pb::ListAgentsRequest {
                page_size: 0,
                page_token,
                labels: labels.clone(),
            })
            .await
            .map_err(status_error)?
            .into_inner();
        for agent in &page.agents {
            let aliases: Vec<String> = agent
                .aliases
                .iter()
                .map(|(alias, version)| format!("{alias}={version}"))
                .collect();
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}",
                agent.id,
                agent.latest_version,
                aliases.join(","),
                agent.name
            );
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

async fn versions(client: &mut Library, agent_id: String) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_agent_versions(pb::ListAgentVersionsRequest {
                agent_id: agent_id.clone(),
                page_size: 0,
                page_token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        for version in &page.versions {
            let model = version
                .config
                .as_ref()
                .and_then(|config| config.model.as_ref())
                .map(|model| format!("{}/{}", model.provider, model.name))
                .unwrap_or_default();
            let created = version
                .created_at
                .as_ref()
                .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
                .map(|t| t.to_rfc3339())
                .unwrap_or_default();
            let _ = writeln!(out, "{}\t{created}\t{model}", version.version);
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_version_or_an_alias() {
        assert_eq!(
            parse_reference("helper").unwrap(),
            ("helper".into(), 0, String::new())
        );
        assert_eq!(
            parse_reference("helper@3").unwrap(),
            ("helper".into(), 3, String::new())
        );
        assert_eq!(
            parse_reference("helper:prod").unwrap(),
            ("helper".into(), 0, "prod".into())
        );
        assert!(parse_reference("helper@x").is_err());
    }

    #[test]
    fn a_toml_file_describes_an_agent() {
        let file: AgentFile = toml::from_str(
            r#"
            id = "helper"
            name = "Helper"
            [labels]
            team = "support"
            [agent]
            instruction = "Be brief."
            max_iteration = 4
            [agent.model]
            provider = "openai"
            name = "gpt-4o-mini"
            [[agent.tools]]
            provider = "time"
            name = "current_time"
            "#,
        )
        .unwrap();
        assert_eq!(file.agent.model.name, "gpt-4o-mini");
        assert_eq!(file.agent.tools[0].name, "current_time");
        let (config, _) = export(AgentDefinition {
            agent: file.agent,
            client_tools: file.client_tools,
        });
        assert_eq!(config.max_iteration, 4);
    }
}
