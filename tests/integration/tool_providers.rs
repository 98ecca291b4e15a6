//! Registered tool providers: OpenAPI services and knowledge bases, created over gRPC,
//! called by agents, persisted across restarts.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use agent_runner::pb;
use agent_runner::pb::provider_source::Source;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tonic::Code;

use crate::support::{final_thoughts, first_file, run_request, run_to_end, TestServer};
use crate::support::{start, FakeOpenAi, Reply, ScriptedCall};

type Seen = Arc<Mutex<Vec<Value>>>;

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A pet API that wants `X-Pet-Key: s3cret` and records the keys it was sent.
async fn pet_service() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    async fn show(
        State(seen): State<Seen>,
        Path(id): Path<u64>,
        headers: HeaderMap,
    ) -> (StatusCode, Json<Value>) {
        let key = headers
            .get("x-pet-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        seen.lock().unwrap().push(json!(key));
        if key != "s3cret" {
            return (StatusCode::UNAUTHORIZED, Json(json!({"error": "bad key"})));
        }
        (StatusCode::OK, Json(json!({"id": id, "name": "Rex"})))
    }
    let router = Router::new()
        .route("/api/pets/{id}", get(show))
        .with_state(Arc::clone(&seen));
    (serve(router).await, seen)
}

fn pets_spec(addr: SocketAddr) -> String {
    format!(
        r#"
openapi: 3.0.3
info: {{title: Pets}}
servers: [{{url: "http://{addr}/api"}}]
components:
  securitySchemes:
    key: {{type: apiKey, in: header, name: X-Pet-Key}}
paths:
  /pets/{{petId}}:
    get:
      operationId: showPet
      summary: Show one pet
      parameters:
        - {{name: petId, in: path, required: true, schema: {{type: integer}}}}
  /pets:
    post:
      operationId: addPet
      requestBody:
        content:
          application/json:
            schema: {{type: object, properties: {{name: {{type: string}}}}, required: [name]}}
"#
    )
}

fn api_provider(name: &str, spec: String) -> pb::ToolProvider {
    pb::ToolProvider {
        name: name.into(),
        source: Some(pb::ProviderSource {
            source: Some(Source::Openapi(pb::OpenApiSource {
                spec,
                server_url: String::new(),
            })),
        }),
        credentials: [("api_key".to_owned(), "s3cret".to_owned())].into(),
        ..Default::default()
    }
}

/// An OpenAPI service that needs an API key becomes tools: listed with their schemas,
/// called by an agent with the key (which GetProvider never shows), still there after a
/// restart, and refused by runs once deleted. Bad arguments are an observation naming the
/// field, and the run goes on.
#[tokio::test]
async fn an_openapi_service_becomes_tools_an_agent_can_call() {
    let (pets, seen) = pet_service().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("p1", "showPet", &["{\"petId\": 7}"]),
                ScriptedCall::new("p2", "showPet", &["{\"petId\": \"seven\"}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["Pet 7 is Rex."], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut tools = server.tools().await;

    let created = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(api_provider("pets", pets_spec(pets))),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.kind, pb::ProviderKind::Api as i32);
    assert!(created.credentials.is_empty());
    assert_eq!(created.credential_keys, vec!["api_key"]);
    let listed = tools
        .list_tools(pb::ListToolsRequest {
            provider: "pets".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .tools;
    assert_eq!(
        listed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["addPet", "showPet"]
    );
    let schema = serde_json::to_value(agent_runner::api::convert::json::struct_to_json(
        listed[1].parameters_schema.clone().unwrap(),
    ))
    .unwrap();
    assert_eq!(schema["properties"]["petId"]["type"], "integer");
    assert_eq!(schema["required"], json!(["petId"]));

    let events = run_to_end(
        &mut server.agents().await,
        run_request("Who is pet 7?", &[("pets", "showPet")]),
    )
    .await;
    let calls = &final_thoughts(&events)[0].tool_calls;
    assert_eq!(calls[0].observation, "{\"id\":7,\"name\":\"Rex\"}");
    assert!(
        calls[1]
            .observation
            .starts_with("tool parameters validation error: petId: "),
        "{}",
        calls[1].observation
    );
    assert_eq!(seen.lock().unwrap().clone(), vec![json!("s3cret")]);

    let shown = tools
        .get_provider(pb::GetProviderRequest {
            name: "pets".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(shown.credentials.is_empty());
    assert_eq!(shown.credential_keys, vec!["api_key"]);
    assert!(!format!("{shown:?}").contains("s3cret"));
    server.stop().await;

    let restarted = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut tools = restarted.tools().await;
    let names: Vec<String> = tools
        .list_providers(pb::ListProvidersRequest {})
        .await
        .unwrap()
        .into_inner()
        .providers
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert!(names.contains(&"pets".to_owned()), "{names:?}");
    tools
        .delete_provider(pb::DeleteProviderRequest {
            name: "pets".into(),
        })
        .await
        .unwrap();
    let refused = restarted
        .agents()
        .await
        .run(run_request("again", &[("pets", "showPet")]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert_eq!(
        refused.message(),
        "agent.tools[0].provider: unknown tool provider \"pets\""
    );
}

/// Bad provider definitions are refused with the field named.
/// Which calls may be made again after their run's owner was lost: `GET` operations by
/// their method, others when the provider declares them in `idempotent_tools`, which must
/// name tools of the provider.
#[tokio::test]
async fn a_provider_says_which_tools_may_be_called_again() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;
    let (pets, _) = pet_service().await;
    let unknown = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(pb::ToolProvider {
                idempotent_tools: vec!["feedPet".into()],
                ..api_provider("pets", pets_spec(pets))
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::InvalidArgument);
    assert_eq!(
        unknown.message(),
        "provider.idempotent_tools[0]: the provider has no tool \"feedPet\""
    );
    let too_many = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(pb::ToolProvider {
                idempotent_tools: vec!["addPet".into(); 257],
                ..api_provider("pets", pets_spec(pets))
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert!(
        too_many.message().starts_with("provider.idempotent_tools"),
        "{too_many:?}"
    );
    let created = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(pb::ToolProvider {
                idempotent_tools: vec!["addPet".into()],
                ..api_provider("pets", pets_spec(pets))
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.idempotent_tools, vec!["addPet"]);
    let marked: Vec<(String, bool)> = created
        .tools
        .iter()
        .map(|t| (t.name.clone(), t.idempotent))
        .collect();
    assert_eq!(
        marked,
        [("addPet".to_owned(), true), ("showPet".to_owned(), true)]
    );
    let plain = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(api_provider("pets2", pets_spec(pets))),
        })
        .await
        .unwrap()
        .into_inner();
    let add = plain.tools.iter().find(|t| t.name == "addPet").unwrap();
    assert!(!add.idempotent, "a POST is not, unless declared");
}

/// Provider definitions that cannot work (a document that is not OpenAPI 3, a name already
/// taken …) are refused naming the field, and nothing is registered for them.
#[tokio::test]
async fn bad_provider_definitions_are_refused() {
    let llm = FakeOpenAi::start(vec![]).await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;
    let (pets, _) = pet_service().await;
    let create = |provider| pb::CreateProviderRequest {
        provider: Some(provider),
    };

    let not_openapi = tools
        .create_provider(create(api_provider(
            "swagger",
            "swagger: '2.0'\npaths: {}".into(),
        )))
        .await
        .unwrap_err();
    assert_eq!(not_openapi.code(), Code::InvalidArgument);
    assert_eq!(
        not_openapi.message(),
        "provider.source.openapi.spec is not an OpenAPI 3 document (it needs an `openapi: 3.x` field)"
    );
    tools
        .create_provider(create(api_provider("pets", pets_spec(pets))))
        .await
        .unwrap();
    let duplicate = tools
        .create_provider(create(api_provider("pets", pets_spec(pets))))
        .await
        .unwrap_err();
    assert_eq!(duplicate.code(), Code::AlreadyExists);
    let builtin = tools
        .delete_provider(pb::DeleteProviderRequest {
            name: "time".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(builtin.code(), Code::FailedPrecondition);
    let unknown = tools
        .delete_provider(pb::DeleteProviderRequest {
            name: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let bad_name = tools
        .create_provider(create(api_provider("two words", pets_spec(pets))))
        .await
        .unwrap_err();
    assert_eq!(
        bad_name.message(),
        "provider.name must be 1 to 64 letters, digits, `_` or `-`"
    );
}

/// A knowledge provider searches Dify's External Knowledge API: the request has the
/// documented shape and bearer key, records become numbered passages, and an empty result
/// or an HTTP error is an observation.
#[tokio::test]
async fn a_knowledge_provider_searches_the_external_knowledge_api() {
    let seen: Seen = Arc::default();
    async fn retrieval(
        State(seen): State<Seen>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        seen.lock()
            .unwrap()
            .push(json!({"auth": auth, "body": body}));
        match body["query"].as_str() {
            Some("fail") => (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error_msg": "index offline"})),
            ),
            Some("nothing") => (StatusCode::OK, Json(json!({"records": []}))),
            _ => (
                StatusCode::OK,
                Json(json!({"records": [
                    {"content": "Staff get 25 days.", "score": 0.9, "title": "Leave", "metadata": {}},
                    {"content": "Ask your manager.", "score": 0.71, "title": "Process", "metadata": {}}
                ]})),
            ),
        }
    }
    let addr = serve(
        Router::new()
            .route("/retrieval", post(retrieval))
            .with_state(Arc::clone(&seen)),
    )
    .await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "k",
                "handbook",
                &["{\"query\": \"vacation policy\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["25 days."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut tools = server.tools().await;
    let provider = pb::ToolProvider {
        name: "handbook".into(),
        description: "The staff handbook".into(),
        source: Some(pb::ProviderSource {
            source: Some(Source::Knowledge(pb::KnowledgeSource {
                endpoint: format!("http://{addr}"),
                knowledge_id: "kb-1".into(),
                top_k: 2,
                score_threshold: 0.5,
            })),
        }),
        credentials: [("api_key".to_owned(), "kkey".to_owned())].into(),
        ..Default::default()
    };
    let created = tools
        .create_provider(pb::CreateProviderRequest {
            provider: Some(provider),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.kind, pb::ProviderKind::Knowledge as i32);

    let events = run_to_end(
        &mut server.agents().await,
        run_request("Vacation?", &[("handbook", "handbook")]),
    )
    .await;

    assert_eq!(
        final_thoughts(&events)[0].tool_calls[0].observation,
        "1. Leave (score 0.90)\nStaff get 25 days.\n\n2. Process (score 0.71)\nAsk your manager."
    );
    assert_eq!(
        seen.lock().unwrap()[0],
        json!({"auth": "Bearer kkey", "body": {"knowledge_id": "kb-1", "query": "vacation policy",
               "retrieval_setting": {"top_k": 2, "score_threshold": 0.5}}})
    );
    let invoke = |query: &str| pb::InvokeToolRequest {
        provider: "handbook".into(),
        name: "handbook".into(),
        arguments: json!({"query": query}).to_string(),
        parameters: None,
    };
    let empty = tools
        .invoke_tool(invoke("nothing"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        empty.observation,
        "No passages in the knowledge base match \"nothing\"."
    );
    let failed = tools
        .invoke_tool(invoke("fail"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        failed
            .observation
            .starts_with("tool invoke error: HTTP 500"),
        "{}",
        failed.observation
    );
    assert!(failed.meta.unwrap().error.contains("index offline"));
}

/// A provider with a cache TTL answers the same call again from its cache: the service is
/// asked once.
#[tokio::test]
async fn cached_providers_reuse_results_for_equal_calls() {
    let (pets, seen) = pet_service().await;
    let call = |id| vec![ScriptedCall::new(id, "showPet", &["{\"petId\": 7}"])];
    let llm = FakeOpenAi::start(vec![
        Reply::calls(&[], call("c1"), (1, 1)),
        Reply::calls(&[], call("c2"), (1, 1)),
        Reply::text(&["Rex, twice."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut provider = api_provider("pets", pets_spec(pets));
    provider.cache_ttl_secs = 60;
    let created = server
        .tools()
        .await
        .create_provider(pb::CreateProviderRequest {
            provider: Some(provider),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.cache_ttl_secs, 60);

    let events = run_to_end(
        &mut server.agents().await,
        run_request("Pet 7, twice", &[("pets", "showPet")]),
    )
    .await;

    let thoughts = final_thoughts(&events);
    assert_eq!(
        thoughts[0].tool_calls[0].observation,
        thoughts[1].tool_calls[0].observation
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the second call came from the cache"
    );
}

/// A file a tool returns is announced with a `file` event, listed on the thought, readable
/// with GetFile, and gone with its conversation.
#[tokio::test]
async fn files_from_tools_are_announced_stored_and_deleted_with_the_conversation() {
    let (_llm, _server, mut client) = start(vec![
        Reply::calls(&[], vec![ScriptedCall::new("f", "chart", &["{}"])], (1, 1)),
        Reply::text(&["Here is your chart."], (1, 1)),
    ])
    .await;

    let events = run_to_end(
        &mut client,
        run_request("Chart it", &[("testing", "chart")]),
    )
    .await;

    let file = first_file(&events);
    assert_eq!(
        (
            file.r#type.as_str(),
            file.mime_type.as_str(),
            file.belongs_to.as_str()
        ),
        ("image", "image/png", "assistant")
    );
    assert_eq!(final_thoughts(&events)[0].file_ids, vec![file.id.clone()]);
    let stored = client
        .get_file(pb::GetFileRequest {
            file_id: file.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.data, agent_runner::test_utils::CHART_BYTES);
    assert_eq!(stored.name, "chart.png");
    assert_eq!(stored.message_id, events[0].message_id);

    client
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: events[0].conversation_id.clone(),
        })
        .await
        .unwrap();
    let gone = client
        .get_file(pb::GetFileRequest { file_id: file.id })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}
