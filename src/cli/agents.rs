//! `agents`: stored agents from the command line. A file (TOML or JSON) describes an agent
//! as a `CreateAgentRequest` in protobuf's JSON mapping, the form the console and grpcurl
//! speak, so `agents show` prints what `agents create` reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::args::{AgentsCommand, ClientArgs};
use super::connection::{library, status_error};
use super::proto_json;
use crate::pb;

/// The protobuf message an agent file holds.
const FILE_MESSAGE: &str = "agentrunner.v1.CreateAgentRequest";

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

fn read_file(path: &Path) -> anyhow::Result<pb::CreateAgentRequest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json = path.extension().is_some_and(|ext| ext == "json");
    let value: serde_json::Value = if json {
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?
    } else {
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?
    };
    proto_json::from_json(FILE_MESSAGE, value)
        .with_context(|| format!("{} is not an agent", path.display()))
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
    let created = client.create_agent(file.clone()).await;
    let version = match created {
        Ok(agent) => agent.into_inner().latest_version,
        Err(status) if status.code() == tonic::Code::AlreadyExists => {
            client
                .create_agent_version(pb::CreateAgentVersionRequest {
                    agent_id: file.agent_id.clone(),
                    config: file.config,
                    client_tools: file.client_tools,
                })
                .await
                .map_err(status_error)?
                .into_inner()
                .version
        }
        Err(status) => return Err(status_error(status)),
    };
    Ok(format!("{}@{version}\n", file.agent_id))
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
    let file = pb::CreateAgentRequest {
        agent_id: record.id,
        name: record.name,
        description: record.description,
        labels: record.labels,
        config: found.config,
        client_tools: found.client_tools,
    };
    let mut text = serde_json::to_string_pretty(&serde_json::json!({
        "version": found.version,
        "aliases": record.aliases,
        "file": proto_json::to_json(FILE_MESSAGE, &file)?,
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
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.toml");
        std::fs::write(
            &path,
            r#"
            agent_id = "helper"
            name = "Helper"
            [labels]
            team = "support"
            [config]
            instruction = "Be brief."
            max_iteration = 4
            strategy = "STRATEGY_CHAIN_OF_THOUGHT"
            [config.model]
            provider = "openai"
            name = "gpt-4o-mini"
            [[config.tools]]
            provider = "time"
            name = "current_time"
            "#,
        )
        .unwrap();
        let file = read_file(&path).unwrap();
        assert_eq!(file.labels["team"], "support");
        let config = file.config.unwrap();
        assert_eq!(config.model.as_ref().unwrap().name, "gpt-4o-mini");
        assert_eq!(config.tools[0].name, "current_time");
        assert_eq!(config.max_iteration, 4);
        assert_eq!(config.strategy(), pb::Strategy::ChainOfThought);
    }

    #[test]
    fn the_example_agents_are_agent_files() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/a2a");
        for name in ["helper.json", "gatekeeper.json"] {
            let file = read_file(&examples.join(name)).unwrap();
            assert!(
                file.config.is_some_and(|config| config.model.is_some()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_file_in_another_form_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("helper.json");
        std::fs::write(&path, r#"{"agent_id": "helper", "agent": {}}"#).unwrap();
        let err = format!("{:#}", read_file(&path).unwrap_err());
        assert!(err.contains("helper.json is not an agent"), "{err}");
        assert!(err.contains("agent"), "{err}");
    }
}
