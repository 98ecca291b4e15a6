//! A2A over gRPC, driven through the client generated from the protocol's own proto: every
//! stored agent has a card; a task is sent and answered, streamed, continued in its
//! context, listed, cancelled and subscribed to; another tenant finds nothing; the
//! specification's errors carry their `ErrorInfo`; approvals travel as the tool-calls
//! extension.

use std::time::Duration;

use agent_runner::a2a_pb as a2a;
use agent_runner::a2a_pb::a2a_service_client::A2aServiceClient;
use agent_runner::pb;
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_types::StatusExt;

use crate::support::{run_request, FakeOpenAi, Reply, RunRequestExt, ScriptedCall, TestServer};

mod extension;

const EXTENSION: &str = "urn:agentrunner:a2a:tool-calls:v1";

async fn serve(replies: Vec<Reply>) -> (FakeOpenAi, TestServer, A2aServiceClient<Channel>) {
    let llm = FakeOpenAi::start(replies).await;
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.a2a.enabled = true;
    })
    .await;
    let client = A2aServiceClient::new(server.channel().await);
    (llm, server, client)
}

/// Stores agent `id` on the scripted model; `approval` makes its tool wait for approval.
async fn store_agent(server: &TestServer, id: &str, approval: bool) {
    let mut request = run_request("unused", &[("time", "current_time")]);
    if approval {
        request = request.needs_approval("current_time");
    }
    server
        .library()
        .await
        .create_agent(pb::CreateAgentRequest {
            agent_id: id.into(),
            name: format!("The {id}"),
            description: format!("Answers as {id}."),
            config: request.agent,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// A request as an A2A 1.0 client sends it, with `extensions` declared.
fn call<T>(message: T, extensions: &[&str]) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("a2a-version", "1.0".parse().unwrap());
    if !extensions.is_empty() {
        request
            .metadata_mut()
            .insert("a2a-extensions", extensions.join(",").parse().unwrap());
    }
    request
}

fn user_message(id: &str, text: &str, context_id: &str, task_id: &str) -> a2a::Message {
    a2a::Message {
        message_id: id.into(),
        context_id: context_id.into(),
        task_id: task_id.into(),
        role: a2a::Role::User.into(),
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Text(text.into())),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn send(routing: &str, message: a2a::Message) -> a2a::SendMessageRequest {
    a2a::SendMessageRequest {
        tenant: routing.into(),
        message: Some(message),
        ..Default::default()
    }
}

/// Sends `request` as a client declaring `extensions`; the task it answers with.
async fn sent(
    client: &mut A2aServiceClient<Channel>,
    request: a2a::SendMessageRequest,
    extensions: &[&str],
) -> a2a::Task {
    let response = client
        .send_message(call(request, extensions))
        .await
        .unwrap()
        .into_inner();
    task_of(response)
}

fn task_of(response: a2a::SendMessageResponse) -> a2a::Task {
    match response.payload {
        Some(a2a::send_message_response::Payload::Task(task)) => task,
        other => panic!("a task was expected: {other:?}"),
    }
}

fn state(task: &a2a::Task) -> a2a::TaskState {
    a2a::TaskState::try_from(task.status.as_ref().unwrap().state).unwrap()
}

fn artifact_text(task: &a2a::Task) -> String {
    task.artifacts
        .iter()
        .flat_map(|a| &a.parts)
        .filter_map(|p| match &p.content {
            Some(a2a::part::Content::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The JSON of the data part an input-required task's status message holds.
fn waiting_calls(task: &a2a::Task) -> Value {
    let note = task.status.as_ref().unwrap().message.as_ref().unwrap();
    let Some(a2a::part::Content::Data(data)) = &note.parts[0].content else {
        panic!("the waiting calls are a data part: {note:?}");
    };
    agent_runner::api::convert::json::value_to_json(data.clone())
}

/// A message to the waiting `task` holding `answers` as its data part.
fn answering(id: &str, task: &a2a::Task, answers: Value) -> a2a::Message {
    a2a::Message {
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Data(
                agent_runner::api::convert::json::json_to_value(&answers),
            )),
            ..Default::default()
        }],
        ..user_message(id, "", &task.context_id, &task.id)
    }
}

fn reason(status: &tonic::Status) -> String {
    let info = status
        .get_details_error_info()
        .expect("an ErrorInfo detail");
    assert_eq!(info.domain, "a2a-protocol.org");
    info.reason
}

async fn card(server: &TestServer, id: &str, tenant: Option<&str>) -> (u16, Value) {
    let url = format!(
        "http://{}/agents/{id}/.well-known/agent-card.json",
        server.metrics_addr
    );
    let mut request = reqwest::Client::new().get(url);
    if let Some(tenant) = tenant {
        request = request.header("x-tenant-id", tenant);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// A stored agent's card names the gRPC interface and its routing string; another tenant
/// and an unknown agent get 404.
#[tokio::test]
async fn every_stored_agent_has_a_card_for_its_tenant_only() {
    let (_llm, server, _client) = serve(vec![]).await;
    store_agent(&server, "helper", false).await;
    store_agent(&server, "gatekeeper", true).await;

    let (status, body) = card(&server, "helper", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "The helper");
    assert_eq!(body["version"], "1");
    let interface = &body["supportedInterfaces"][0];
    assert_eq!(interface["protocolBinding"], "GRPC");
    assert_eq!(interface["tenant"], "helper");
    assert_eq!(interface["protocolVersion"], "1.0");
    assert_eq!(interface["url"], server.addr.to_string());
    assert_eq!(body["capabilities"]["streaming"], true);
    assert_eq!(body["capabilities"]["extensions"][0]["uri"], EXTENSION);
    assert_eq!(body["capabilities"]["extensions"][0]["required"], false);
    let (_, gatekeeper) = card(&server, "gatekeeper", None).await;
    assert_eq!(
        gatekeeper["capabilities"]["extensions"][0]["required"],
        true
    );

    assert_eq!(card(&server, "helper", Some("other")).await.0, 404);
    assert_eq!(card(&server, "nobody", None).await.0, 404);
}

/// A blocking send answers with the completed task: its answer as the `answer` artifact,
/// the exchange as its history. A second message in its context is a new task of the same
/// context, and the model sees the first turn.
#[tokio::test]
async fn a_task_is_answered_and_its_context_continued() {
    let (llm, server, mut client) = serve(vec![
        Reply::text(&["Paris ", "is the capital."], (10, 4)),
        Reply::text(&["About two million."], (20, 5)),
    ])
    .await;
    store_agent(&server, "helper", false).await;

    let first = sent(
        &mut client,
        send("helper", user_message("m-1", "Capital of France?", "", "")),
        &[],
    )
    .await;
    assert_eq!(state(&first), a2a::TaskState::Completed);
    assert_eq!(artifact_text(&first), "Paris is the capital.");
    assert_eq!(first.history.len(), 2);
    assert!(!first.context_id.is_empty());

    let second = sent(
        &mut client,
        send(
            "helper",
            user_message("m-2", "How many live there?", &first.context_id, ""),
        ),
        &[],
    )
    .await;
    assert_eq!(second.context_id, first.context_id);
    assert_ne!(second.id, first.id);
    assert_eq!(artifact_text(&second), "About two million.");
    let prompt = llm.requests()[1]["messages"].to_string();
    assert!(prompt.contains("Paris is the capital."), "{prompt}");

    let fetched = client
        .get_task(call(
            a2a::GetTaskRequest {
                tenant: "helper".into(),
                id: first.id.clone(),
                history_length: Some(1),
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fetched.history.len(), 1);
    assert_eq!(state(&fetched), a2a::TaskState::Completed);

    let listed = client
        .list_tasks(call(
            a2a::ListTasksRequest {
                tenant: "helper".into(),
                context_id: first.context_id.clone(),
                page_size: Some(1),
                ..Default::default()
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tasks.len(), 1);
    assert_eq!(listed.tasks[0].id, second.id, "newest first");
    let rest = client
        .list_tasks(call(
            a2a::ListTasksRequest {
                tenant: "helper".into(),
                context_id: first.context_id.clone(),
                page_token: listed.next_page_token.clone(),
                ..Default::default()
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rest.tasks.iter().map(|t| &t.id).collect::<Vec<_>>(),
        vec![&first.id]
    );

    // A retried send of the same message follows the task it started.
    let again = client
        .send_message(call(
            send("helper", user_message("m-1", "Capital of France?", "", "")),
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(task_of(again).id, first.id);
    assert_eq!(llm.requests().len(), 2);

    let status = client
        .send_message(call(
            send("helper", user_message("m-3", "And now?", "", &first.id)),
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(reason(&status), "UNSUPPORTED_OPERATION");
}

/// A streamed send starts with the task, streams the answer as appends to one artifact
/// whose concatenation is the answer, and ends with the completed status.
#[tokio::test]
async fn a_streamed_task_assembles_its_answer() {
    let (_llm, server, mut client) =
        serve(vec![Reply::text(&["One, ", "two, ", "three."], (5, 3))]).await;
    store_agent(&server, "helper", false).await;

    let mut stream = client
        .send_streaming_message(call(
            send(
                "helper:latest",
                user_message("s-1", "Count to three.", "", ""),
            ),
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut responses = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        responses.push(response.payload.unwrap());
    }
    use a2a::stream_response::Payload;
    let Payload::Task(first) = &responses[0] else {
        panic!("the stream starts with the task: {responses:?}");
    };
    assert_eq!(state(first), a2a::TaskState::Submitted);
    let mut assembled = String::new();
    for payload in &responses {
        if let Payload::ArtifactUpdate(update) = payload {
            let artifact = update.artifact.as_ref().unwrap();
            assert_eq!(artifact.artifact_id, "answer");
            if !update.append {
                assembled.clear();
            }
            for part in &artifact.parts {
                if let Some(a2a::part::Content::Text(text)) = &part.content {
                    assembled.push_str(text);
                }
            }
        }
    }
    assert_eq!(assembled, "One, two, three.");
    let Some(Payload::StatusUpdate(last)) = responses.last() else {
        panic!("the stream ends with a status update: {responses:?}");
    };
    assert_eq!(
        last.status.as_ref().unwrap().state,
        a2a::TaskState::Completed as i32
    );
}

/// A task still working is followed by a subscriber and can be cancelled; cancelling it
/// again, or following it once ended, is the specification's error.
#[tokio::test]
async fn a_working_task_is_followed_and_cancelled() {
    let (_llm, server, mut client) = serve(vec![Reply::Slow {
        text: vec!["a ", "b ", "c ", "d ", "e"],
        delay_ms: 400,
    }])
    .await;
    store_agent(&server, "helper", false).await;
    let started = client
        .send_message(call(
            a2a::SendMessageRequest {
                configuration: Some(a2a::SendMessageConfiguration {
                    return_immediately: true,
                    ..Default::default()
                }),
                ..send("helper", user_message("c-1", "Spell slowly.", "", ""))
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    let task = task_of(started);
    let mut followed = client
        .subscribe_to_task(call(
            a2a::SubscribeToTaskRequest {
                tenant: "helper".into(),
                id: task.id.clone(),
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    let first = followed.message().await.unwrap().unwrap();
    assert!(matches!(
        first.payload,
        Some(a2a::stream_response::Payload::Task(_))
    ));
    // Let the run get into its model call, so the cancel stops a run in progress.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancelled = client
        .cancel_task(call(
            a2a::CancelTaskRequest {
                tenant: "helper".into(),
                id: task.id.clone(),
                metadata: None,
            },
            &[],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state(&cancelled), a2a::TaskState::Canceled);
    let mut last = None;
    while let Some(response) = followed.message().await.unwrap() {
        last = response.payload;
    }
    match last {
        Some(a2a::stream_response::Payload::StatusUpdate(update)) => assert_eq!(
            update.status.unwrap().state,
            a2a::TaskState::Canceled as i32
        ),
        other => panic!("the subscriber sees the cancel: {other:?}"),
    }
    let again = client
        .cancel_task(call(
            a2a::CancelTaskRequest {
                tenant: "helper".into(),
                id: task.id.clone(),
                metadata: None,
            },
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&again), "TASK_NOT_CANCELABLE");
    let ended = client
        .subscribe_to_task(call(
            a2a::SubscribeToTaskRequest {
                tenant: "helper".into(),
                id: task.id.clone(),
            },
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&ended), "UNSUPPORTED_OPERATION");
}

/// Another tenant's agent and task are not found; a client of another protocol version,
/// push notifications and the extended card get the specification's errors.
#[tokio::test]
async fn the_specifications_errors_and_tenants() {
    let (_llm, server, mut client) = serve(vec![Reply::text(&["Hi."], (1, 1))]).await;
    store_agent(&server, "helper", false).await;
    let task = sent(
        &mut client,
        send("helper", user_message("e-1", "Hi", "", "")),
        &[],
    )
    .await;

    let mut foreign = call(
        a2a::GetTaskRequest {
            tenant: "helper".into(),
            id: task.id.clone(),
            history_length: None,
        },
        &[],
    );
    foreign
        .metadata_mut()
        .insert("x-tenant-id", "other".parse().unwrap());
    let status = client.get_task(foreign).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(reason(&status), "TASK_NOT_FOUND");
    let mut foreign_send = call(send("helper", user_message("e-2", "Hi", "", "")), &[]);
    foreign_send
        .metadata_mut()
        .insert("x-tenant-id", "other".parse().unwrap());
    assert_eq!(
        client.send_message(foreign_send).await.unwrap_err().code(),
        Code::NotFound
    );

    let old = client
        .get_task(Request::new(a2a::GetTaskRequest {
            tenant: "helper".into(),
            id: task.id.clone(),
            history_length: None,
        }))
        .await
        .unwrap_err();
    assert_eq!(reason(&old), "VERSION_NOT_SUPPORTED");
    let push = client
        .create_task_push_notification_config(call(
            a2a::TaskPushNotificationConfig {
                task_id: task.id.clone(),
                url: "https://example.com/hook".into(),
                ..Default::default()
            },
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&push), "PUSH_NOTIFICATION_NOT_SUPPORTED");
    let extended = client
        .get_extended_agent_card(call(a2a::GetExtendedAgentCardRequest::default(), &[]))
        .await
        .unwrap_err();
    assert_eq!(reason(&extended), "EXTENDED_AGENT_CARD_NOT_CONFIGURED");
    let pdf = a2a::Message {
        parts: vec![a2a::Part {
            content: Some(a2a::part::Content::Raw(b"%PDF".to_vec())),
            media_type: "application/pdf".into(),
            ..Default::default()
        }],
        ..user_message("e-3", "Read this.", "", "")
    };
    let status = client
        .send_message(call(send("helper", pdf), &[]))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "CONTENT_TYPE_NOT_SUPPORTED");
    let status = client
        .send_message(call(
            send("Bad Agent", user_message("e-4", "Hi", "", "")),
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("tenant "),
        "{}",
        status.message()
    );
}

/// With keys required, a card and a task are served only with a key of the agent's
/// tenant: another tenant's key gets 404 on the card and `TASK_NOT_FOUND` on the task, no
/// key gets 401.
#[tokio::test]
async fn with_keys_only_the_agents_tenant_reaches_it() {
    let llm = FakeOpenAi::start(vec![Reply::text(&["Hello."], (2, 1))]).await;
    let server = crate::auth::auth_server(&llm, |config| config.a2a.enabled = true).await;
    let (_, acme) = crate::auth::create_key(&server, "acme", Default::default()).await;
    let (_, globex) = crate::auth::create_key(&server, "globex", Default::default()).await;
    let bearer = |key: &str| format!("Bearer {key}");
    let mut request = run_request("unused", &[]);
    request.agent_mut().instruction = "Greet.".into();
    let mut create = Request::new(pb::CreateAgentRequest {
        agent_id: "greeter".into(),
        config: request.agent,
        ..Default::default()
    });
    create
        .metadata_mut()
        .insert("authorization", bearer(&acme).parse().unwrap());
    server.library().await.create_agent(create).await.unwrap();

    let url = format!(
        "http://{}/agents/greeter/.well-known/agent-card.json",
        server.metrics_addr
    );
    let http = reqwest::Client::new();
    let status = |key: Option<&str>| {
        let mut get = http.get(&url);
        if let Some(key) = key {
            get = get.header("authorization", bearer(key));
        }
        async move { get.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status(Some(&acme)).await, 200);
    assert_eq!(status(Some(&globex)).await, 404);
    assert_eq!(status(None).await, 401);
    let (_, card) = card(&server, "greeter", None).await;
    assert!(card.get("error").is_some(), "{card}");

    let mut client = A2aServiceClient::new(server.channel().await);
    let signed = |message: a2a::SendMessageRequest, key: &str| {
        let mut request = call(message, &[]);
        request
            .metadata_mut()
            .insert("authorization", bearer(key).parse().unwrap());
        request
    };
    let task = task_of(
        client
            .send_message(signed(
                send("greeter", user_message("k-1", "Hi", "", "")),
                &acme,
            ))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&task), a2a::TaskState::Completed);
    let mut foreign = call(
        a2a::GetTaskRequest {
            tenant: "greeter".into(),
            id: task.id.clone(),
            history_length: None,
        },
        &[],
    );
    foreign
        .metadata_mut()
        .insert("authorization", bearer(&globex).parse().unwrap());
    let status = client.get_task(foreign).await.unwrap_err();
    assert_eq!(reason(&status), "TASK_NOT_FOUND");
    let status = client
        .send_message(signed(
            send("greeter", user_message("k-2", "Hi", "", "")),
            &globex,
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}
