//! Bad requests get a clear status naming the field, before any stream exists.

use agent_runner::pb;
use tonic::Code;

use crate::support::RunRequestExt;
use crate::support::{run_request, start};

/// Each invalid `Run` request answers its code with the field named, and the LLM is never
/// called.
#[tokio::test]
async fn invalid_runs_are_refused_naming_the_field() {
    let (llm, _server, mut client) = start(vec![]).await;
    type Mutation = Box<dyn Fn(&mut pb::RunRequest)>;
    let cases: Vec<(Mutation, Code, &str)> = vec![
        (
            Box::new(|r| r.query.clear()),
            Code::InvalidArgument,
            "query must not be empty",
        ),
        (
            Box::new(|r| r.agent = None),
            Code::InvalidArgument,
            "agent is required (or agent_ref)",
        ),
        (
            Box::new(|r| r.agent_mut().model = None),
            Code::InvalidArgument,
            "agent.model is required",
        ),
        (
            Box::new(|r| r.agent_mut().max_iteration = 100),
            Code::InvalidArgument,
            "agent.max_iteration must be between 1 and 99",
        ),
        (
            Box::new(|r| r.model_mut().provider = "nope".into()),
            Code::InvalidArgument,
            "agent.model.provider: unknown provider \"nope\" (configured: down, impatient, narrow, patient, scripted)",
        ),
        (
            Box::new(|r| {
                r.agent_mut().tools.push(pb::AgentTool {
                    provider: "time".into(),
                    name: "teleport".into(),
                    parameters: None,
                    require_approval: false,
                })
            }),
            Code::InvalidArgument,
            "agent.tools[0].name: unknown tool \"teleport\" of provider \"time\"",
        ),
        (
            Box::new(|r| r.agent_mut().instruction = "Help {{name}} today.".into()),
            Code::InvalidArgument,
            "inputs.name is required by the instruction",
        ),
        (
            Box::new(|r| {
                r.files.push(pb::InputFile {
                    source: Some(pb::input_file::Source::Data(vec![1, 2, 3])),
                    mime_type: "application/pdf".into(),
                    detail: 0,
                })
            }),
            Code::InvalidArgument,
            "files[0].mime_type must be an image type; only images are supported",
        ),
        (
            Box::new(|r| r.model_mut().name = "gpt-4o\nERROR forged log line".into()),
            Code::InvalidArgument,
            "agent.model.name must not contain control characters",
        ),
        (
            Box::new(|r| r.model_mut().name = "m".repeat(1 << 20)),
            Code::InvalidArgument,
            "agent.model.name is 1048576 bytes, more than 256",
        ),
        (
            Box::new(|r| {
                r.agent_mut().tools.push(pb::AgentTool {
                    provider: "time\r".into(),
                    name: "current_time".into(),
                    parameters: None,
                    require_approval: false,
                })
            }),
            Code::InvalidArgument,
            "agent.tools[0].provider must not contain control characters",
        ),
        (
            Box::new(|r| r.conversation_id = "0190e7a5-0000-7000-8000-000000000000".into()),
            Code::NotFound,
            "conversation 0190e7a5-0000-7000-8000-000000000000 not found",
        ),
    ];
    for (mutate, code, message) in cases {
        let mut request = run_request("hello", &[]);
        mutate(&mut request);
        let status = client.run(request).await.unwrap_err();
        assert_eq!((status.code(), status.message()), (code, message));
    }
    assert!(llm.requests().is_empty());
}

/// Reads of records that do not exist are NOT_FOUND; malformed ids are INVALID_ARGUMENT.
#[tokio::test]
async fn unknown_records_are_not_found() {
    let (_llm, _server, mut client) = start(vec![]).await;
    let missing = "0190e7a5-0000-7000-8000-000000000001".to_owned();

    let status = client
        .get_message(pb::GetMessageRequest {
            message_id: missing.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id: missing.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .list_messages(pb::ListMessagesRequest {
            conversation_id: missing,
            page_size: 0,
            page_token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let status = client
        .get_message(pb::GetMessageRequest {
            message_id: "42".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::InvalidArgument,
            "message_id is not a valid id: \"42\""
        )
    );
}
