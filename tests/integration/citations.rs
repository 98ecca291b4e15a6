//! Evidence for answers: passages a knowledge tool (or any tool answering in the records
//! shape) retrieved are kept on the thought that called it and on the message's end, in
//! the order the model saw them, with their source and score.

use agent_runner::pb;
use agent_runner::pb::provider_source::Source;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::support::{
    end_of, final_thoughts, message, run_request, run_to_end, thoughts, FakeOpenAi, Reply,
    ScriptedCall, TestServer,
};

async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn knowledge_base() -> String {
    async fn retrieval(Json(_): Json<Value>) -> Json<Value> {
        Json(json!({"records": [
            {"content": "Staff get 25 days of leave.", "score": 0.92, "title": "Leave",
             "metadata": {"path": "handbook/leave.md"}},
            {"content": "Ask your manager first.", "score": 0.71, "title": "Process",
             "metadata": {"document_name": "process.pdf"}}
        ]}))
    }
    serve(Router::new().route("/retrieval", post(retrieval))).await
}

/// An HTTP API whose search answers in the records shape.
async fn search_api() -> String {
    async fn search() -> Json<Value> {
        Json(json!({"records": [
            {"content": "Carry-over is capped at 5 days.", "score": 0.8,
             "title": "Carry-over", "metadata": {"url": "https://wiki.example/carry-over"}}
        ]}))
    }
    serve(Router::new().route("/search", get(search))).await
}

async fn create(server: &TestServer, provider: pb::ToolProvider) {
    server
        .tools()
        .await
        .create_provider(pb::CreateProviderRequest {
            provider: Some(provider),
        })
        .await
        .unwrap();
}

fn summary(resources: &[pb::RetrieverResource]) -> Vec<(u32, String, String, String, Option<f64>)> {
    resources
        .iter()
        .map(|r| {
            (
                r.position,
                r.provider.clone(),
                r.tool_call_id.clone(),
                r.source.clone(),
                r.score,
            )
        })
        .collect()
}

/// Passages a knowledge base returned are cited on the round's thought and on the end, in
/// the order the model read them.
#[tokio::test]
async fn retrieved_passages_are_cited_on_the_thought_and_the_end_in_reading_order() {
    let kb = knowledge_base().await;
    let api = search_api().await;
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![
                ScriptedCall::new("k1", "handbook", &["{\"query\": \"leave\"}"]),
                ScriptedCall::new("s1", "search", &["{}"]),
            ],
            (1, 1),
        ),
        Reply::text(&["25 days, at most 5 carried over."], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    create(
        &server,
        pb::ToolProvider {
            name: "handbook".into(),
            source: Some(pb::ProviderSource {
                source: Some(Source::Knowledge(pb::KnowledgeSource {
                    endpoint: kb,
                    knowledge_id: "kb-1".into(),
                    top_k: 2,
                    score_threshold: 0.5,
                })),
            }),
            ..Default::default()
        },
    )
    .await;
    let spec =
        json!({"openapi": "3.0.0", "paths": {"/search": {"get": {"operationId": "search"}}}});
    create(
        &server,
        pb::ToolProvider {
            name: "wiki".into(),
            source: Some(pb::ProviderSource {
                source: Some(Source::Openapi(pb::OpenApiSource {
                    spec: spec.to_string(),
                    server_url: api,
                })),
            }),
            ..Default::default()
        },
    )
    .await;

    let mut agents = server.agents().await;
    let events = run_to_end(
        &mut agents,
        run_request(
            "How much leave?",
            &[("handbook", "handbook"), ("wiki", "search")],
        ),
    )
    .await;
    let expected = vec![
        (
            1,
            "handbook".to_owned(),
            "k1".to_owned(),
            "handbook/leave.md".to_owned(),
            Some(0.92),
        ),
        (
            2,
            "handbook".to_owned(),
            "k1".to_owned(),
            "process.pdf".to_owned(),
            Some(0.71),
        ),
        (
            3,
            "wiki".to_owned(),
            "s1".to_owned(),
            "https://wiki.example/carry-over".to_owned(),
            Some(0.8),
        ),
    ];
    let end = end_of(&events);
    assert_eq!(summary(&end.retriever_resources), expected);
    assert_eq!(
        end.retriever_resources[0].content,
        "Staff get 25 days of leave."
    );
    assert_eq!(end.retriever_resources[0].title, "Leave");

    let streamed = &final_thoughts(&events)[0];
    assert_eq!(summary(&streamed.retriever_resources), expected);
    let id = events[0].message_id.clone();
    let stored = thoughts(&mut agents, id.clone()).await;
    assert_eq!(summary(&stored[0].retriever_resources), expected);
    assert!(
        stored[1].retriever_resources.is_empty(),
        "the answering round cites nothing new"
    );
    let read_back = message(&mut agents, id).await;
    assert_eq!(summary(&read_back.retriever_resources), expected);
}
