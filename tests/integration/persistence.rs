//! Records survive a restart, and runs a crash left behind are marked interrupted.

use crate::support::open_data_dir;
use agent_runner::domain::{
    Conversation, ConversationId, Message, MessageId, StrategyKind, Tenant,
};
use agent_runner::pb;
use agent_runner::store::{Burst, Fence, NewMessage, Record};

use crate::support::{message, run_request, run_to_end, TestServer};
use crate::support::{FakeOpenAi, Reply, ScriptedCall};

/// After a restart on the same data directory, `GetMessage`, `ListMessages` and
/// `ListThoughts` return exactly what they returned before.
#[tokio::test]
async fn records_read_back_the_same_after_a_restart() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &["Adding."],
            vec![ScriptedCall::new(
                "p",
                "eval_expression",
                &["{\"expression\":", " \"1+2\"}"],
            )],
            (4, 2),
        ),
        Reply::text(&["3"], (6, 1)),
        Reply::text(&["Again 3"], (2, 2)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let mut client = server.agents().await;
    let first = run_to_end(
        &mut client,
        run_request("1+2?", &[("maths", "eval_expression")]),
    )
    .await;
    let conversation_id = first[0].conversation_id.clone();
    let mut follow_up = run_request("and again?", &[]);
    follow_up.conversation_id = conversation_id.clone();
    let second = run_to_end(&mut client, follow_up).await;
    assert_eq!(second[0].conversation_id, conversation_id);

    let read =
        |mut client: pb::agent_service_client::AgentServiceClient<tonic::transport::Channel>,
         message_id: String,
         conversation_id: String| async move {
            let message = message(&mut client, message_id.clone()).await;
            let messages = client
                .list_messages(pb::ListMessagesRequest {
                    conversation_id,
                    page_size: 0,
                    page_token: String::new(),
                })
                .await
                .unwrap()
                .into_inner();
            let thoughts = client
                .list_thoughts(pb::ListThoughtsRequest {
                    message_id,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            (message, messages, thoughts)
        };
    let message_id = first[0].message_id.clone();
    let before = read(client, message_id.clone(), conversation_id.clone()).await;
    server.stop().await;

    let restarted = TestServer::start_in(&llm.base_url(), dir.path()).await;
    let after = read(restarted.agents().await, message_id, conversation_id).await;

    assert_eq!(before, after);
    let (message, messages, thoughts) = after;
    assert_eq!(message.status, pb::MessageStatus::Completed as i32);
    assert_eq!(message.answer, "Adding.\n3");
    assert_eq!(message.usage.unwrap().total_tokens, 13);
    assert_eq!(messages.messages.len(), 2);
    assert_eq!(messages.messages[0].query, "1+2?");
    assert_eq!(messages.messages[1].query, "and again?");
    assert_eq!(thoughts.thoughts.len(), 2);
    assert_eq!(
        thoughts.thoughts[0].tool_calls[0].arguments,
        "{\"expression\": \"1+2\"}"
    );
    assert_eq!(thoughts.thoughts[0].tool_calls[0].observation, "3");
    restarted.stop().await;
}

/// Three turns of one conversation, each answered with `answer`, then the first two pages
/// of `ListMessages` at `page_size`: each page's (query, answer length), and the second
/// page's token.
async fn two_pages_of_three_turns(
    answer: &'static str,
    page_size: u32,
) -> (Vec<(String, usize)>, Vec<(String, usize)>, String) {
    let llm = FakeOpenAi::start(vec![]).await;
    llm.repeat(Reply::text(&[answer], (1, 1)));
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let first = run_to_end(&mut client, run_request("q1", &[])).await;
    let conversation_id = first[0].conversation_id.clone();
    for query in ["q2", "q3"] {
        let mut request = run_request(query, &[]);
        request.conversation_id = conversation_id.clone();
        run_to_end(&mut client, request).await;
    }
    let page = |page_token: String| pb::ListMessagesRequest {
        conversation_id: conversation_id.clone(),
        page_size,
        page_token,
    };

    let one = client
        .list_messages(page(String::new()))
        .await
        .unwrap()
        .into_inner();
    let two = client
        .list_messages(page(one.next_page_token.clone()))
        .await
        .unwrap()
        .into_inner();
    let listed = |r: &pb::ListMessagesResponse| {
        r.messages
            .iter()
            .map(|m| (m.query.clone(), m.answer.len()))
            .collect::<Vec<_>>()
    };
    (listed(&one), listed(&two), two.next_page_token)
}

/// `ListMessages` pages oldest first and hands out a token for the next page.
#[tokio::test]
async fn messages_page_oldest_first() {
    let (one, two, last_token) = two_pages_of_three_turns("ok", 2).await;
    assert_eq!(one, vec![("q1".to_owned(), 2), ("q2".to_owned(), 2)]);
    assert_eq!(two, vec![("q3".to_owned(), 2)]);
    assert!(last_token.is_empty());
}

/// A page of `ListMessages` ends before its answers pass 3 MiB, whatever page size was
/// asked, and the token leads on to the rest: no response outgrows what a client accepts.
#[tokio::test]
async fn message_pages_end_before_three_mebibytes() {
    let answer: &'static str = "a".repeat(1_200_000).leak();
    let (one, two, last_token) = two_pages_of_three_turns(answer, 1000).await;
    let size = answer.len();
    assert_eq!(one, vec![("q1".to_owned(), size), ("q2".to_owned(), size)]);
    assert_eq!(two, vec![("q3".to_owned(), size)]);
    assert!(last_token.is_empty());
}

/// `ListThoughts` pages by position like `ListMessages`, and refuses a token it did not
/// issue, naming the field.
#[tokio::test]
async fn thoughts_page_by_position() {
    let llm = FakeOpenAi::start(vec![
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "p",
                "eval_expression",
                &["{\"expression\": \"1+2\"}"],
            )],
            (1, 1),
        ),
        Reply::calls(
            &[],
            vec![ScriptedCall::new(
                "q",
                "eval_expression",
                &["{\"expression\": \"3*3\"}"],
            )],
            (1, 1),
        ),
        Reply::text(&["9"], (1, 1)),
    ])
    .await;
    let server = TestServer::start(&llm.base_url()).await;
    let mut client = server.agents().await;
    let events = run_to_end(
        &mut client,
        run_request("1+2, then squared?", &[("maths", "eval_expression")]),
    )
    .await;
    let message_id = events[0].message_id.clone();
    let page = |page_token: &str| pb::ListThoughtsRequest {
        message_id: message_id.clone(),
        page_size: 2,
        page_token: page_token.to_owned(),
    };

    let one = client.list_thoughts(page("")).await.unwrap().into_inner();
    let two = client
        .list_thoughts(page(&one.next_page_token))
        .await
        .unwrap()
        .into_inner();
    let observations = |r: &pb::ListThoughtsResponse| {
        r.thoughts
            .iter()
            .map(|t| {
                t.tool_calls
                    .iter()
                    .map(|c| c.observation.clone())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(observations(&one), vec![vec!["3"], vec!["9"]]);
    assert_eq!(two.thoughts.len(), 1);
    assert_eq!(two.thoughts[0].answer, "9");
    assert!(two.next_page_token.is_empty());

    let refused = client.list_thoughts(page("not-a-token")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        refused.message(),
        "page_token is not a token this server issued"
    );
}

/// A message a crashed process left RUNNING is INTERRUPTED once the service starts again,
/// with its thoughts intact.
#[tokio::test]
async fn messages_left_running_by_a_crash_become_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = Tenant::default_tenant();
    let message_id = MessageId::new();
    {
        let store = open_data_dir(dir.path()).await;
        let conversation = Conversation {
            id: ConversationId::new(),
            tenant: tenant.clone(),
            user: String::new(),
            created_at: chrono::Utc::now(),
        };
        let mut message = Message::running(
            conversation.id,
            "q".into(),
            StrategyKind::FunctionCalling,
            "scripted".into(),
            "m".into(),
        );
        message.id = message_id;
        message.iterations = 1;
        store
            .insert_message(NewMessage {
                tenant: &tenant,
                conversation: Some(&conversation),
                message: &mut message,
                spec: &serde_json::Value::Null,
                idempotency: None,
                admission: agent_runner::store::Admission::default(),
            })
            .await
            .unwrap();
        let thought = agent_runner::domain::Thought::begin(message_id, 1);
        let burst = Burst {
            records: vec![Record::Thought(thought)],
            events: Vec::new(),
        };
        store
            .commit(&tenant, &Fence::local(), &burst)
            .await
            .unwrap();
    }

    let server = TestServer::start_in("http://127.0.0.1:9/v1", dir.path()).await;
    let mut client = server.agents().await;
    let message = message(&mut client, message_id.to_string()).await;

    assert_eq!(message.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(message.error.unwrap().code, "interrupted");
    let thoughts = client
        .list_thoughts(pb::ListThoughtsRequest {
            message_id: message_id.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(thoughts.thoughts.len(), 1);
    server.stop().await;
}

/// With `runner.resume_after_restart = false`, shutdown ends a run in flight: its stream
/// ends with an `error` of code `shutdown`, and the message reads back INTERRUPTED after a
/// restart, with the text streamed so far.
#[tokio::test]
async fn without_resuming_shutdown_interrupts_a_running_message() {
    let llm = FakeOpenAi::start(vec![Reply::Stall(vec!["Thinking"])]).await;
    let dir = tempfile::tempdir().unwrap();
    let no_resuming = || {
        let mut config = crate::support::config(&llm.base_url(), dir.path());
        config.runner.resume_after_restart = false;
        config
    };
    let mut server = TestServer::start_with(no_resuming()).await;
    let mut client = server.agents().await;
    let mut stream = client
        .run(run_request("slow", &[]))
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        let delta = matches!(event.event, Some(pb::run_event::Event::Delta(_)));
        events.push(event);
        if delta {
            break;
        }
    }

    server.begin_stop();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    server.stop().await;

    match events.last().and_then(|e| e.event.clone()) {
        Some(pb::run_event::Event::Error(error)) => assert_eq!(error.code, "shutdown"),
        other => panic!("expected a shutdown error, got {other:?}"),
    }
    let restarted = TestServer::start_with(no_resuming()).await;
    let message = message(&mut restarted.agents().await, events[0].message_id.clone()).await;
    assert_eq!(message.status, pb::MessageStatus::Interrupted as i32);
    assert_eq!(message.answer, "Thinking");
    restarted.stop().await;
}
