//! What operators and tool authors rely on: health, reflection and the tool registry.

use agent_runner::pb;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

use crate::support::FakeOpenAi;
use crate::support::TestServer;

/// A mesh health check sees both services, and the whole server (`""`), SERVING once the
/// store is open.
#[tokio::test]
async fn health_reports_both_services_serving() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in [
        "",
        "agentrunner.v1.AgentService",
        "agentrunner.v1.ToolRegistry",
    ] {
        let response = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.status, ServingStatus::Serving as i32, "{service}");
    }
}

/// grpcurl can list the services without .proto files, over reflection v1 and over the
/// v1alpha that grpcurl 1.8 speaks.
#[tokio::test]
async fn reflection_lists_both_services() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let names = reflected_services(&server).await;
    assert!(
        names.contains(&"agentrunner.v1.AgentService".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"agentrunner.v1.ToolRegistry".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.contains(&"lf.a2a.v1.A2AService".to_owned()),
        "A2A is listed only where it is served: {names:?}"
    );
    let with_a2a =
        TestServer::start_edited(&llm.base_url(), |config| config.a2a.enabled = true).await;
    let names = reflected_services(&with_a2a).await;
    assert!(
        names.contains(&"lf.a2a.v1.A2AService".to_owned()),
        "{names:?}"
    );
}

/// The services reflection lists.
async fn reflected_services(server: &TestServer) -> Vec<String> {
    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(futures::stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    list.service.into_iter().map(|s| s.name).collect()
}

/// The built-in providers are listed with their tools' JSON Schemas, and a tool can be run
/// directly exactly as an agent would run it.
#[tokio::test]
async fn builtin_tools_are_listed_and_invocable() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;

    let providers = tools
        .list_providers(pb::ListProvidersRequest {})
        .await
        .unwrap()
        .into_inner()
        .providers;
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"time") && names.contains(&"maths"),
        "{names:?}"
    );
    assert!(providers
        .iter()
        .all(|p| p.kind == pb::ProviderKind::Builtin as i32));

    let listed = tools
        .list_tools(pb::ListToolsRequest {
            provider: "time".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .tools;
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["current_time", "timezone_conversion", "weekday"]
    );
    let schema = listed[2].parameters_schema.as_ref().unwrap();
    assert!(schema.fields.contains_key("required"));

    let invoked = tools
        .invoke_tool(pb::InvokeToolRequest {
            provider: "time".into(),
            name: "weekday".into(),
            arguments: r#"{"year": 2024, "month": 2, "day": 29}"#.into(),
            parameters: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(invoked.observation, "February 29, 2024 is a Thursday.");
    assert_eq!(invoked.meta.unwrap().error, "");

    let failed = tools
        .invoke_tool(pb::InvokeToolRequest {
            provider: "maths".into(),
            name: "eval_expression".into(),
            arguments: "{}".into(),
            parameters: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        failed
            .observation
            .contains("\"expression\" is a required property"),
        "{}",
        failed.observation
    );

    let missing = tools
        .invoke_tool(pb::InvokeToolRequest {
            provider: "maths".into(),
            name: "integrate".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
}
