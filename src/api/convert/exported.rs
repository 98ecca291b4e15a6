//! A run's request as `Run` accepts it, rebuilt from its message and the spec kept with it,
//! so it can be run again: values that may be credentials are removed and named.

use serde_json::{Map, Value};

use super::agent::export;
use crate::domain::Message;
use crate::pb;
use crate::runner::{AgentDefinition, ImageSource, InputImage, StoredSpec};

/// Words that mark a preset or model parameter as a possible credential.
const CREDENTIAL_WORDS: [&str; 8] = [
    "key",
    "token",
    "secret",
    "password",
    "auth",
    "credential",
    "cookie",
    "session",
];

/// The request that started `message`, whose spec was kept as `stored`.
pub fn exported_run(message: Message, stored: StoredSpec) -> pb::ExportRunResponse {
    let StoredSpec {
        mut agent,
        files,
        client_tools,
        cancel_on_disconnect,
        ..
    } = stored;
    let mut removed = remove_credentials("agent.model.parameters", &mut agent.model.parameters);
    for (index, tool) in agent.tools.iter_mut().enumerate() {
        let field = format!("agent.tools[{index}].preset");
        removed.extend(remove_credentials(&field, &mut tool.preset));
    }
    let (config, client_tools) = export(AgentDefinition {
        agent,
        client_tools,
    });
    let (agent, agent_ref, overrides) = match message.agent {
        // A stored agent's run names the version it ran: its config is the registry's.
        Some(pinned) => {
            let crate::domain::PinnedAgent {
                agent_id,
                version,
                overrides,
            } = *pinned;
            let overrides =
                (!overrides.is_empty()).then(|| super::reference::overrides_pb(overrides));
            let reference = pb::AgentRef {
                agent_id,
                version,
                alias: String::new(),
            };
            (None, Some(reference), overrides)
        }
        None => (Some(config), None, None),
    };
    // A stored agent's preset values are the registry's, not the request's.
    if agent_ref.is_some() {
        removed.clear();
    }
    pb::ExportRunResponse {
        request: Some(pb::RunRequest {
            conversation_id: String::new(),
            query: message.query,
            inputs: message.inputs.into_iter().collect(),
            files: files.into_iter().map(input_file).collect(),
            agent,
            user: message.user,
            idempotency_key: String::new(),
            client_tools,
            cancel_on_disconnect,
            agent_ref,
            overrides,
            conversation_policy: pb::ConversationPolicy::Unspecified.into(),
        }),
        removed,
    }
}

/// Takes the values of `values` whose names say they may be credentials; returns their
/// field paths under `field`.
fn remove_credentials(field: &str, values: &mut Map<String, Value>) -> Vec<String> {
    let names: Vec<String> = values
        .keys()
        .filter(|name| {
            let name = name.to_ascii_lowercase();
            CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
        })
        .cloned()
        .collect();
    let mut names = names;
    names.sort();
    for name in &names {
        values.remove(name);
    }
    names
        .into_iter()
        .map(|name| format!("{field}.{name}"))
        .collect()
}

fn input_file(image: InputImage) -> pb::InputFile {
    let detail = match image.detail.as_str() {
        "high" => pb::ImageDetail::High,
        _ => pb::ImageDetail::Low,
    };
    let (source, mime_type) = match image.source {
        ImageSource::Url(url) => (pb::input_file::Source::Url(url), String::new()),
        ImageSource::Data { mime_type, bytes } => (pb::input_file::Source::Data(bytes), mime_type),
    };
    pb::InputFile {
        source: Some(source),
        mime_type,
        detail: detail.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_named_like_credentials_are_removed_and_named() {
        let mut preset = Map::new();
        preset.insert("api_key".into(), Value::from("sk-live-123"));
        preset.insert("Authorization".into(), Value::from("Bearer x"));
        preset.insert("city".into(), Value::from("Paris"));
        let removed = remove_credentials("agent.tools[0].preset", &mut preset);
        assert_eq!(
            removed,
            [
                "agent.tools[0].preset.Authorization",
                "agent.tools[0].preset.api_key"
            ]
        );
        assert_eq!(preset.len(), 1);
        assert_eq!(preset["city"], "Paris");
    }
}
