//! The A2A tool-calls extension: approvals, client tools' outputs and a sub-agent's
//! approval travel as data parts of the task's messages, and an agent that needs them is
//! refused to a client that does not declare the extension.

use super::*;

/// An agent with approvals needs the tool-calls extension: without it the send is refused;
/// with it the task waits input-required, naming the call, and a message holding the
/// decision lets it finish.
#[tokio::test]
async fn approvals_travel_through_the_extension() {
    let (_llm, server, mut client) = serve(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "t1",
                "current_time",
                &[r#"{"timezone": "UTC"}"#],
            )],
            (5, 2),
        ),
        Reply::text(&["It is noon."], (8, 3)),
    ])
    .await;
    store_agent(&server, "gatekeeper", true).await;

    let refused = client
        .send_message(call(
            send("gatekeeper", user_message("a-1", "Time?", "", "")),
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "EXTENSION_SUPPORT_REQUIRED");

    let waiting = sent(
        &mut client,
        send("gatekeeper", user_message("a-2", "Time?", "", "")),
        &[EXTENSION],
    )
    .await;
    assert_eq!(state(&waiting), a2a::TaskState::InputRequired);
    let data = waiting_calls(&waiting);
    assert_eq!(data["approval_required"][0]["id"], "t1");
    assert_eq!(data["approval_required"][0]["name"], "current_time");

    let decision = answering(
        "a-3",
        &waiting,
        json!({"decisions": [{"tool_call_id": "t1", "approve": true}]}),
    );
    let done = sent(&mut client, send("gatekeeper", decision), &[EXTENSION]).await;
    assert_eq!(state(&done), a2a::TaskState::Completed);
    assert_eq!(artifact_text(&done), "It is noon.");
}

/// A client tool's call waits input-required, named in the status message; the outputs
/// the client sends in a message to the task let it finish.
#[tokio::test]
async fn client_tool_outputs_travel_through_the_extension() {
    let (llm, server, mut client) = serve(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new("k1", "lookup", &[r#"{"q": "tea"}"#])],
            (5, 2),
        ),
        Reply::text(&["Tea is in aisle 4."], (8, 3)),
    ])
    .await;
    let mut request = run_request("unused", &[]);
    request.agent_mut().instruction = "Find things.".into();
    server
        .library()
        .await
        .create_agent(pb::CreateAgentRequest {
            agent_id: "finder".into(),
            config: request.agent,
            client_tools: vec![pb::ClientTool {
                name: "lookup".into(),
                description: "Looks up where a product is.".into(),
                parameters_schema: None,
                require_approval: false,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let (_, body) = card(&server, "finder", None).await;
    assert_eq!(body["capabilities"]["extensions"][0]["required"], true);

    let waiting = sent(
        &mut client,
        send("finder", user_message("f-1", "Where is tea?", "", "")),
        &[EXTENSION],
    )
    .await;
    assert_eq!(state(&waiting), a2a::TaskState::InputRequired);
    let data = waiting_calls(&waiting);
    assert_eq!(data["tool_outputs_required"][0]["id"], "k1");
    assert_eq!(
        data["tool_outputs_required"][0]["arguments"],
        r#"{"q": "tea"}"#
    );

    let outputs = answering(
        "f-2",
        &waiting,
        json!({"outputs": [{"tool_call_id": "k1", "output": "aisle 4"}]}),
    );
    let mut stream = client
        .send_streaming_message(call(send("finder", outputs), &[EXTENSION]))
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(response) = stream.message().await.unwrap() {
        last = response.payload;
    }
    let Some(a2a::stream_response::Payload::StatusUpdate(update)) = last else {
        panic!("the answered task streams to its end: {last:?}");
    };
    assert_eq!(
        update.status.unwrap().state,
        a2a::TaskState::Completed as i32
    );
    let prompt = llm.requests()[1]["messages"].to_string();
    assert!(prompt.contains("aisle 4"), "{prompt}");
}

/// A sub-agent's approval shows on its parent's task, naming the sub-agent's run; the
/// decision sent to the parent's task reaches it. The extension is required of the parent
/// although only its sub-agent asks for approval.
#[tokio::test]
async fn a_sub_agents_approval_is_answered_through_its_parents_task() {
    let (_llm, server, mut client) = serve(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "p1",
                "gatekeeper",
                &[r#"{"input": "what time is it?"}"#],
            )],
            (5, 2),
        ),
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "t1",
                "current_time",
                &[r#"{"timezone": "UTC"}"#],
            )],
            (5, 2),
        ),
        Reply::text(&["Noon."], (5, 2)),
        Reply::text(&["The gatekeeper says noon."], (5, 2)),
    ])
    .await;
    store_agent(&server, "gatekeeper", true).await;
    let mut request = run_request("unused", &[]);
    request.agent_mut().sub_agents = vec![pb::AgentRef {
        agent_id: "gatekeeper".into(),
        ..Default::default()
    }];
    server
        .library()
        .await
        .create_agent(pb::CreateAgentRequest {
            agent_id: "front".into(),
            config: request.agent,
            ..Default::default()
        })
        .await
        .unwrap();

    // Only the sub-agent asks for approval: the front agent's card and its messages still
    // need the extension, since its tree may wait on the caller.
    let (_, front) = card(&server, "front", None).await;
    assert_eq!(front["capabilities"]["extensions"][0]["required"], true);
    let refused = client
        .send_message(call(
            send("front", user_message("n-0", "Time?", "", "")),
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "EXTENSION_SUPPORT_REQUIRED");
    let waiting = sent(
        &mut client,
        send("front", user_message("n-1", "Time?", "", "")),
        &[EXTENSION],
    )
    .await;
    assert_eq!(state(&waiting), a2a::TaskState::InputRequired);
    let data = waiting_calls(&waiting);
    let asked = &data["approval_required"][0];
    assert_eq!(asked["id"], "t1");
    let child = asked["message_id"].as_str().unwrap().to_owned();
    assert_ne!(child, waiting.id);

    let decision = answering(
        "n-2",
        &waiting,
        json!({"decisions": [{"tool_call_id": "t1", "approve": true, "message_id": child}]}),
    );
    let done = sent(&mut client, send("front", decision), &[EXTENSION]).await;
    assert_eq!(state(&done), a2a::TaskState::Completed);
    assert_eq!(artifact_text(&done), "The gatekeeper says noon.");
}
