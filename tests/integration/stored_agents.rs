//! Stored agents through the real server: created, versioned without gaps, aliased with
//! compare-and-set, run by reference with overrides, pinned for the life of a run (also
//! across a restart while it waits), exported, kept apart per tenant, and refused with a
//! status naming the field.

use std::collections::BTreeMap;

use agent_runner::pb;
use agent_runner::pb::agent_registry_client::AgentRegistryClient;
use agent_runner::pb::run_event::Event;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::support::{
    message, read_rest, run_request, run_to_end, start, FakeOpenAi, Reply, RunRequestExt,
    ScriptedCall, TestServer,
};

type Library = AgentRegistryClient<Channel>;

/// The inline config of the scripted model with `instruction`.
fn config(instruction: &str) -> pb::AgentConfig {
    let mut request = run_request("unused", &[]);
    let agent = request.agent_mut();
    agent.instruction = instruction.to_owned();
    agent.clone()
}

async fn create(library: &mut Library, id: &str, instruction: Option<&str>) -> pb::Agent {
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: id.into(),
            name: format!("The {id}"),
            description: "Answers questions.".into(),
            config: instruction.map(config),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn add_version(library: &mut Library, id: &str, config: pb::AgentConfig) -> u32 {
    library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: id.into(),
            config: Some(config),
            client_tools: vec![],
        })
        .await
        .unwrap()
        .into_inner()
        .version
}

async fn set_alias(
    library: &mut Library,
    id: &str,
    alias: &str,
    version: u32,
    expected: Option<u32>,
) -> Result<pb::Agent, tonic::Status> {
    library
        .set_alias(pb::SetAliasRequest {
            agent_id: id.into(),
            alias: alias.into(),
            version,
            expected_version: expected,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// A run of stored agent `id` picked by `version` or `alias`.
fn by_reference(query: &str, id: &str, version: u32, alias: &str) -> pb::RunRequest {
    pb::RunRequest {
        query: query.into(),
        agent_ref: Some(pb::AgentRef {
            agent_id: id.into(),
            version,
            alias: alias.into(),
        }),
        ..Default::default()
    }
}

fn started(events: &[pb::RunEvent]) -> pb::RunStarted {
    events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Started(started)) => Some(started.clone()),
            _ => None,
        })
        .expect("a started event")
}

/// The system prompt of the model's `n`th request.
fn system_prompt(llm: &FakeOpenAi, n: usize) -> String {
    llm.requests()[n]["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn answers(n: usize) -> Vec<Reply> {
    (0..n).map(|_| Reply::text(&["Done."], (5, 2))).collect()
}

/// The stored agents' main path: an agent created, given versions and an alias, and run by
/// reference to each.
#[tokio::test]
async fn an_agent_is_versioned_aliased_and_run_by_reference() {
    let (llm, server, mut agents) = start(answers(4)).await;
    let mut library = server.library().await;
    let created = create(&mut library, "helper", Some("You are version one.")).await;
    assert_eq!(created.latest_version, 1);
    assert_eq!(created.aliases, BTreeMap::from([("latest".into(), 1)]));
    let two = add_version(&mut library, "helper", config("You are version two.")).await;
    assert_eq!(two, 2);
    let agent = set_alias(&mut library, "helper", "prod", 1, Some(0))
        .await
        .unwrap();
    assert_eq!(
        agent.aliases,
        BTreeMap::from([("latest".into(), 2), ("prod".into(), 1)])
    );

    let events = run_to_end(&mut agents, by_reference("hi", "helper", 0, "prod")).await;
    let first = started(&events);
    assert_eq!(
        (first.agent_id.as_str(), first.agent_version),
        ("helper", 1)
    );
    assert!(system_prompt(&llm, 0).contains("You are version one."));
    let stored = message(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(
        (stored.agent_id.as_str(), stored.agent_version),
        ("helper", 1)
    );

    let events = run_to_end(&mut agents, by_reference("hi", "helper", 0, "")).await;
    assert_eq!(started(&events).agent_version, 2, "no pick means latest");
    assert!(system_prompt(&llm, 1).contains("You are version two."));

    set_alias(&mut library, "helper", "prod", 2, Some(1))
        .await
        .unwrap();
    let events = run_to_end(&mut agents, by_reference("hi", "helper", 0, "prod")).await;
    assert_eq!(
        started(&events).agent_version,
        2,
        "the moved alias is in force"
    );
    let events = run_to_end(&mut agents, by_reference("hi", "helper", 1, "")).await;
    assert_eq!(started(&events).agent_version, 1, "a number pins a version");
}

/// Twenty versions created at once are numbered 1 to 20 with no gap and no repeat.
#[tokio::test]
async fn twenty_concurrent_version_creates_are_numbered_without_gaps() {
    let (_llm, server, _agents) = start(vec![]).await;
    let mut library = server.library().await;
    create(&mut library, "busy", None).await;
    let creates: Vec<_> = (0..20)
        .map(|n| {
            let mut library = library.clone();
            tokio::spawn(async move {
                add_version(&mut library, "busy", config(&format!("writer {n}"))).await
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for create in creates {
        numbers.push(create.await.unwrap());
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=20).collect::<Vec<u32>>());
    let mut listed = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = library
            .list_agent_versions(pb::ListAgentVersionsRequest {
                agent_id: "busy".into(),
                page_size: 7,
                page_token,
            })
            .await
            .unwrap()
            .into_inner();
        listed.extend(page.versions.iter().map(|v| v.version));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(listed, (1..=20).rev().collect::<Vec<u32>>());
}

/// Moving an alias with an expected version fails when another caller moved it first, so
/// two deployers cannot overwrite each other unseen.
#[tokio::test]
async fn an_alias_moves_only_from_where_the_caller_expects() {
    let (_llm, server, _agents) = start(vec![]).await;
    let mut library = server.library().await;
    create(&mut library, "helper", Some("one")).await;
    add_version(&mut library, "helper", config("two")).await;
    set_alias(&mut library, "helper", "prod", 1, Some(0))
        .await
        .unwrap();
    let stale = set_alias(&mut library, "helper", "prod", 2, Some(0))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::FailedPrecondition);
    assert_eq!(
        stale.message(),
        "alias \"prod\" points at version 1, not at the expected version 0"
    );
    let missing = set_alias(&mut library, "helper", "prod", 3, None)
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let reserved = set_alias(&mut library, "helper", "latest", 1, None)
        .await
        .unwrap_err();
    assert_eq!(
        (reserved.code(), reserved.message()),
        (
            Code::InvalidArgument,
            "alias `latest` is reserved: it follows the newest version"
        )
    );
    let agent = library
        .delete_alias(pb::DeleteAliasRequest {
            agent_id: "helper".into(),
            alias: "prod".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(agent.aliases, BTreeMap::from([("latest".into(), 2)]));
}

/// A run keeps the version it resolved at its start, even when its alias moves while it
/// waits and the server restarts under it.
#[tokio::test]
async fn an_alias_moved_while_a_run_waits_and_the_server_restarts_never_changes_the_run() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "c1",
                "eval_expression",
                &[r#"{"expression":"2+2"}"#],
            )],
            (5, 2),
        ),
        Reply::text(&["Four."], (5, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut library = server.library().await;
    let mut gated =
        run_request("unused", &[("maths", "eval_expression")]).needs_approval("eval_expression");
    gated.agent_mut().instruction = "You are version one.".into();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "calc".into(),
            config: gated.agent.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    set_alias(&mut library, "calc", "prod", 1, None)
        .await
        .unwrap();
    let mut agents = server.agents().await;
    let mut stream = agents
        .run(by_reference("what is 2+2?", "calc", 0, "prod"))
        .await
        .unwrap()
        .into_inner();
    let mut message_id = String::new();
    while let Some(event) = stream.message().await.unwrap() {
        message_id.clone_from(&event.message_id);
        if matches!(event.event, Some(Event::ApprovalRequired(_))) {
            break;
        }
    }
    drop(stream);
    server.stop().await;

    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut library = server.library().await;
    let mut other = config("You are version two.");
    other.tools.clear();
    add_version(&mut library, "calc", other).await;
    set_alias(&mut library, "calc", "prod", 2, Some(1))
        .await
        .unwrap();
    let mut agents = server.agents().await;
    agents
        .approve_tool_calls(pb::ApproveToolCallsRequest {
            message_id: message_id.clone(),
            decisions: vec![pb::ToolCallDecision {
                tool_call_id: "c1".into(),
                approve: true,
                reason: String::new(),
                message_id: String::new(),
            }],
        })
        .await
        .unwrap();
    let mut follow = agents
        .attach(pb::AttachRequest {
            message_id: message_id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let events = read_rest(&mut follow).await;
    assert!(matches!(
        events.last().and_then(|e| e.event.as_ref()),
        Some(Event::End(_))
    ));
    assert_eq!(started(&events).agent_version, 1);
    let second = &llm.requests()[1];
    assert!(
        second["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("You are version one."),
        "the resumed round still runs version 1"
    );
    assert!(second["tools"].is_array(), "with version 1's tools");
    let stored = message(&mut agents, message_id).await;
    assert_eq!(
        (stored.agent_id.as_str(), stored.agent_version),
        ("calc", 1)
    );
    assert_eq!(stored.answer, "Four.");
    server.stop().await;
}

/// Overrides given with a reference change that one run only, and are kept on its message,
/// so what ran can be read back.
#[tokio::test]
async fn overrides_change_one_run_and_are_kept_on_its_message() {
    let (llm, server, mut agents) = start(answers(1)).await;
    let mut library = server.library().await;
    create(&mut library, "helper", Some("Be brief.")).await;
    let mut request = by_reference("hi", "helper", 1, "");
    request.overrides = Some(pb::RunOverrides {
        model: Some(pb::ModelRef {
            provider: crate::support::PROVIDER.into(),
            name: crate::support::PLAIN_MODEL.into(),
        }),
        max_iteration: 3,
        additional_instruction: "Answer in French.".into(),
        budget: None,
    });
    let events = run_to_end(&mut agents, request).await;
    let first = started(&events);
    assert_eq!(first.model, crate::support::PLAIN_MODEL);
    assert_eq!(first.max_iteration, 3);
    assert!(system_prompt(&llm, 0).contains("Be brief.\n\nAnswer in French."));
    assert_eq!(llm.requests()[0]["model"], crate::support::PLAIN_MODEL);
    let stored = message(&mut agents, events[0].message_id.clone()).await;
    let kept = stored.overrides.expect("the overrides are kept");
    assert_eq!(kept.max_iteration, 3);
    assert_eq!(kept.additional_instruction, "Answer in French.");
    let version = library
        .get_agent_version(pb::GetAgentVersionRequest {
            agent_id: "helper".into(),
            version: 1,
            alias: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        version.config.unwrap().instruction,
        "Be brief.",
        "the version itself is unchanged"
    );
}

/// A version read back with `GetAgentVersion` runs inline as `agent` with the same result,
/// so an agent can be moved between deployments.
#[tokio::test]
async fn an_exported_version_runs_inline_unchanged() {
    let (llm, server, mut agents) = start(answers(1)).await;
    let mut library = server.library().await;
    let mut config = config("Export me.");
    config.tools.push(pb::AgentTool {
        provider: "time".into(),
        name: "current_time".into(),
        parameters: Some(agent_runner::api::convert::json_to_struct(
            serde_json::json!({"timezone": "UTC"}).as_object().unwrap(),
        )),
        require_approval: false,
    });
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "exported".into(),
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap();
    let version = library
        .get_agent_version(pb::GetAgentVersionRequest {
            agent_id: "exported".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let exported = version.config.unwrap();
    assert_eq!(
        exported.tools[0].parameters.as_ref().unwrap().fields["timezone"],
        prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue("UTC".into()))
        },
        "presets come back through reads"
    );
    let inline = pb::RunRequest {
        query: "hi".into(),
        agent: Some(exported),
        ..Default::default()
    };
    let events = run_to_end(&mut agents, inline).await;
    assert!(matches!(
        events.last().and_then(|e| e.event.as_ref()),
        Some(Event::End(_))
    ));
    assert!(system_prompt(&llm, 0).contains("Export me."));
    assert_eq!(
        started(&events).agent_id,
        "",
        "an inline run names no agent"
    );
}

fn as_tenant<T>(tenant: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("x-tenant-id", tenant.parse().unwrap());
    request
}

/// A tenant cannot read, run, list or change another tenant's agents.
#[tokio::test]
async fn tenants_never_see_each_others_agents() {
    let (_llm, server, mut agents) = start(answers(1)).await;
    let mut library = server.library().await;
    library
        .create_agent(as_tenant(
            "acme",
            pb::CreateAgentRequest {
                agent_id: "secret".into(),
                config: Some(config("Acme only.")),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    let get = library
        .get_agent(as_tenant(
            "globex",
            pb::GetAgentRequest {
                agent_id: "secret".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(get.code(), Code::NotFound);
    let run = agents
        .run(as_tenant("globex", by_reference("hi", "secret", 0, "")))
        .await
        .unwrap_err();
    assert_eq!(run.code(), Code::NotFound);
    let listed = library
        .list_agents(as_tenant("globex", pb::ListAgentsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.agents.is_empty());
    let same_id = library
        .create_agent(as_tenant(
            "globex",
            pb::CreateAgentRequest {
                agent_id: "secret".into(),
                ..Default::default()
            },
        ))
        .await;
    assert!(same_id.is_ok(), "ids are unique per tenant only");
    let mine = library
        .list_agents(as_tenant("acme", pb::ListAgentsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mine.agents.len(), 1);
    assert_eq!(mine.agents[0].latest_version, 1);
}

/// Bad agents and references are `INVALID_ARGUMENT` or `NOT_FOUND` naming the field, before
/// anything is stored or run.
#[tokio::test]
async fn bad_agents_and_references_are_refused_naming_the_field() {
    let (_llm, server, mut agents) = start(vec![]).await;
    let mut library = server.library().await;
    create(&mut library, "helper", Some("hi")).await;
    let refused = |status: tonic::Status| (status.code(), status.message().to_owned());

    let bad_id = library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "Not_Valid".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused(bad_id),
        (
            Code::InvalidArgument,
            "agent_id must be 1 to 63 characters of a-z, 0-9 and -".into()
        )
    );
    let taken = library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "helper".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists);

    let mut unknown_provider = config("x");
    unknown_provider.model.as_mut().unwrap().provider = "nowhere".into();
    let status = library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: "helper".into(),
            config: Some(unknown_provider),
            client_tools: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("config.model.provider"),
        "{}",
        status.message()
    );
    let mut unknown_tool = config("x");
    unknown_tool.tools.push(pb::AgentTool {
        provider: "nowhere".into(),
        name: "nothing".into(),
        ..Default::default()
    });
    let status = library
        .create_agent_version(pb::CreateAgentVersionRequest {
            agent_id: "helper".into(),
            config: Some(unknown_tool),
            client_tools: vec![],
        })
        .await
        .unwrap_err();
    assert!(
        status.message().starts_with("config.tools[0].provider"),
        "{}",
        status.message()
    );
    let too_many_labels = library
        .update_agent(pb::UpdateAgentRequest {
            agent_id: "helper".into(),
            labels: (0..33).map(|n| (format!("k{n}"), "v".into())).collect(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused(too_many_labels),
        (
            Code::InvalidArgument,
            "labels may hold at most 32 labels".into()
        )
    );

    // NUL cannot be kept by every store: refused alike on both, naming the field (names
    // and labels refuse every control character already).
    let nul_description = library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "with-nul".into(),
            description: "says\0more".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused(nul_description),
        (
            Code::InvalidArgument,
            "description must not contain NUL (U+0000)".into()
        )
    );
    let mut both = run_request("hi", &[]);
    both.agent_ref = Some(pb::AgentRef {
        agent_id: "helper".into(),
        ..Default::default()
    });
    assert_eq!(
        refused(agents.run(both).await.unwrap_err()),
        (
            Code::InvalidArgument,
            "agent must not be given with agent_ref: give one of the two".into()
        )
    );
    let missing = agents
        .run(by_reference("hi", "helper", 9, ""))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let unknown_alias = agents
        .run(by_reference("hi", "helper", 0, "canary"))
        .await
        .unwrap_err();
    assert_eq!(unknown_alias.code(), Code::NotFound);
}

/// Client tools given with a run by reference add to the version's own; one that repeats a
/// version's client tool is refused naming it.
#[tokio::test]
async fn client_tools_add_to_the_versions_and_may_not_repeat_them() {
    let (_llm, server, mut agents) = start(vec![]).await;
    let mut library = server.library().await;
    let lookup = pb::ClientTool {
        name: "lookup".into(),
        description: "Looks up.".into(),
        parameters_schema: None,
        require_approval: false,
    };
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "helper".into(),
            config: Some(config("hi")),
            client_tools: vec![lookup.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut request = by_reference("hi", "helper", 0, "");
    request.client_tools = vec![lookup];
    let status = agents.run(request).await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "client_tools[0].name \"lookup\" is already a client tool of agent helper"
        )
    );
}

/// Deleting an agent keeps the messages its runs wrote, still naming the agent and version
/// they ran; a new run of it is `NOT_FOUND`.
#[tokio::test]
async fn a_deleted_agent_leaves_its_messages_naming_it() {
    let (_llm, server, mut agents) = start(answers(1)).await;
    let mut library = server.library().await;
    create(&mut library, "gone", Some("hi")).await;
    let events = run_to_end(&mut agents, by_reference("hi", "gone", 0, "")).await;
    library
        .delete_agent(pb::DeleteAgentRequest {
            agent_id: "gone".into(),
        })
        .await
        .unwrap();
    let stored = message(&mut agents, events[0].message_id.clone()).await;
    assert_eq!(
        (stored.agent_id.as_str(), stored.agent_version),
        ("gone", 1)
    );
    let status = agents
        .run(by_reference("hi", "gone", 0, ""))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.message(), "agent gone not found");
}
