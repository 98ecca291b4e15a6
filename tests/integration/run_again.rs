//! `ExportRun`: the request that started a run, as `Run` accepts it, so a run can be run
//! again. An inline agent's run comes back with its agent, query, inputs, user and client
//! tools, values that may be credentials removed and named; a stored agent's run names the
//! version it ran with its overrides. Run as is, it asks the model the same prompt.

use agent_runner::pb;
use agent_runner::pb::agent_registry_client::AgentRegistryClient;
use tonic::Code;

use crate::support::conversation::turns;
use crate::support::{end_of, run_request, run_to_end, start, Reply, RunRequestExt};

const SECRET: &str = "sk-live-never-shown-0123456789";

async fn export(
    agents: &mut crate::support::Agents,
    message_id: &str,
) -> Result<pb::ExportRunResponse, tonic::Status> {
    agents
        .export_run(pb::ExportRunRequest {
            message_id: message_id.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// An inline agent's run: exported with its query, inputs, user, client tools and agent,
/// the model parameter named like a key removed (and named), no conversation; run again
/// as is, the model is sent the same messages.
#[tokio::test]
async fn an_inline_run_comes_back_as_its_request_without_its_credentials() {
    let (llm, _server, mut agents) = start(vec![
        Reply::text(&["Hello Ada."], (1, 1)),
        Reply::text(&["Hello again, Ada."], (1, 1)),
    ])
    .await;
    let mut request = run_request("Greet {{name}}", &[]);
    request.inputs.insert("name".into(), "Ada".into());
    request.user = "user-7".into();
    request.client_tools.push(pb::ClientTool {
        name: "lookup_order".into(),
        description: "The caller's orders".into(),
        parameters_schema: None,
        require_approval: false,
    });
    let agent = request.agent_mut();
    agent.instruction = "Greet {{name}} warmly.".into();
    let parameters = agent.model.as_mut().unwrap();
    parameters.parameters = Some(agent_runner::api::convert::json_to_struct(
        serde_json::json!({"temperature": 0.2, "api_key": SECRET})
            .as_object()
            .unwrap(),
    ));
    let first = run_to_end(&mut agents, request.clone()).await;

    let exported = export(&mut agents, &first[0].message_id).await.unwrap();
    assert!(
        !format!("{exported:?}").contains(SECRET),
        "no credential travels"
    );
    assert_eq!(exported.removed, ["agent.model.parameters.api_key"]);
    let again = exported.request.expect("a request");
    assert_eq!(again.query, "Greet {{name}}");
    assert_eq!(again.inputs, request.inputs);
    assert_eq!(again.user, "user-7");
    assert!(
        again.conversation_id.is_empty(),
        "a run again starts afresh"
    );
    assert_eq!(again.client_tools.len(), 1);
    assert_eq!(again.client_tools[0].name, "lookup_order");
    assert_eq!(again.client_tools[0].description, "The caller's orders");
    let agent = again.agent.clone().expect("the inline agent");
    assert_eq!(agent.instruction, "Greet {{name}} warmly.");
    let kept = agent.model.unwrap().parameters.unwrap();
    assert!(kept.fields.contains_key("temperature"));
    assert!(!kept.fields.contains_key("api_key"));

    let second = run_to_end(&mut agents, again).await;
    assert_eq!(end_of(&second).answer, "Hello again, Ada.");
    let requests = llm.requests();
    assert_eq!(turns(&requests[1], "system"), turns(&requests[0], "system"));
    assert_eq!(turns(&requests[1], "user"), turns(&requests[0], "user"));
    assert_eq!(requests[1]["temperature"], 0.2);
}

/// A stored agent's run names the agent and the version it ran (not its alias, which may
/// have moved), with the run's overrides; its config stays the registry's.
#[tokio::test]
async fn a_stored_agents_run_names_the_version_it_ran_with_its_overrides() {
    let (_llm, server, mut agents) = start(vec![Reply::text(&["Done."], (1, 1))]).await;
    let mut library = AgentRegistryClient::new(server.channel().await);
    let config = run_request("unused", &[]).agent.unwrap();
    library
        .create_agent(pb::CreateAgentRequest {
            agent_id: "helper".into(),
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap();
    let events = run_to_end(
        &mut agents,
        pb::RunRequest {
            query: "hi".into(),
            agent_ref: Some(pb::AgentRef {
                agent_id: "helper".into(),
                version: 0,
                alias: "latest".into(),
            }),
            overrides: Some(pb::RunOverrides {
                additional_instruction: "Answer in French.".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let again = export(&mut agents, &events[0].message_id)
        .await
        .unwrap()
        .request
        .unwrap();
    assert!(again.agent.is_none(), "the config stays the registry's");
    let reference = again.agent_ref.unwrap();
    assert_eq!(
        (reference.agent_id.as_str(), reference.version),
        ("helper", 1)
    );
    assert!(reference.alias.is_empty());
    assert_eq!(
        again.overrides.unwrap().additional_instruction,
        "Answer in French."
    );
}

/// An id that is no message id is refused naming its field; an unknown run is NOT_FOUND.
#[tokio::test]
async fn an_unknown_run_is_not_found_and_a_bad_id_names_its_field() {
    let (_llm, _server, mut agents) = start(vec![]).await;
    let bad = export(&mut agents, "not-an-id").await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("message_id"), "{bad:?}");
    let unknown = export(&mut agents, "01a21dd8-0000-7000-8000-000000000000")
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}
