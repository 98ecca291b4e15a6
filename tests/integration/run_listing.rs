//! `ListRuns` and `ListConversations` through the generated client: a tenant's runs newest
//! first, their filters and summaries, its conversations by last activity, bad requests named, other tenants kept out, and paging that holds while two
//! replicas write.

use std::collections::HashSet;

use agent_runner::pb;
use agent_runner::pb::agent_service_client::AgentServiceClient;
use agent_runner::store::SecretKey;
use tonic::transport::Channel;

use crate::support::postgres::TestDatabase;
use crate::support::process::client;
use crate::support::replicas::*;
use crate::support::{run_request, run_to_end, FakeOpenAi, Reply, TestServer};

type Agents = AgentServiceClient<Channel>;

/// `request` as `tenant` asks it (API keys are off: the tenant header decides).
fn as_tenant<T>(request: T, tenant: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request
        .metadata_mut()
        .insert("x-tenant-id", tenant.parse().unwrap());
    request
}

/// Every run `request` lists, a page at a time; the message ids in order.
async fn every_page(client: &mut Agents, request: pb::ListRunsRequest) -> Vec<String> {
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_runs(pb::ListRunsRequest {
                page_token: token,
                ..request.clone()
            })
            .await
            .unwrap()
            .into_inner();
        ids.extend(page.runs.into_iter().map(|run| run.message_id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        token = page.next_page_token;
    }
}

fn started_id(events: &[pb::RunEvent]) -> String {
    events[0].message_id.clone()
}

/// Runs of one node listed newest first, each summary as its run ended; filters by status
/// (a run waiting for the caller's tool), conversation and end user; pages of two; wrong
/// sizes and tokens named; another tenant sees none; a deleted conversation's runs leave.
#[tokio::test]
async fn a_tenants_runs_are_listed_newest_first_and_filtered() {
    let llm = FakeOpenAi::start(vec![calls_order_lookup()]).await;
    llm.repeat(Reply::text(&["Done."], (7, 3)));
    let server = TestServer::start_edited(&llm.base_url(), |config| {
        config.runner.client_tool_timeout_secs = 120;
    })
    .await;
    let mut client = server.agents().await;

    let mut waiting = run_request("Where is order A1?", &[]);
    waiting.client_tools.push(order_lookup());
    let mut stream = client.run(waiting).await.unwrap().into_inner();
    let waiting_events = read_until(&mut stream, |e| {
        matches!(e.event, Some(pb::run_event::Event::ToolCallsRequired(_)))
    })
    .await;
    let waiting_id = started_id(&waiting_events);

    let long_query = "x".repeat(250);
    let first = run_to_end(&mut client, run_request(&long_query, &[])).await;
    let conversation = first[0].conversation_id.clone();
    let mut ids = vec![waiting_id.clone(), started_id(&first)];
    for _ in 0..2 {
        let mut next = run_request("and then?", &[]);
        next.conversation_id = conversation.clone();
        ids.push(started_id(&run_to_end(&mut client, next).await));
    }
    for _ in 0..2 {
        let mut ann = run_request("hello", &[]);
        ann.user = "ann".into();
        ids.push(started_id(&run_to_end(&mut client, ann).await));
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    let all = every_page(&mut client, pb::ListRunsRequest::default()).await;
    assert_eq!(all, newest_first);
    let in_pages_of_two = every_page(
        &mut client,
        pb::ListRunsRequest {
            page_size: 2,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(in_pages_of_two, newest_first);

    let page = client
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let summary = page
        .runs
        .iter()
        .find(|run| run.message_id == ids[1])
        .unwrap();
    assert_eq!(summary.query, "x".repeat(200));
    assert!(summary.query_truncated);
    assert_eq!(summary.conversation_id, conversation);
    assert_eq!(summary.status(), pb::MessageStatus::Completed);
    assert_eq!(summary.finish_reason(), pb::FinishReason::Stop);
    assert_eq!(summary.rounds, 1);
    assert_eq!(summary.usage.as_ref().unwrap().total_tokens, 10);
    assert!(summary.ended_at.is_some() && summary.created_at.is_some());
    assert!(!summary.model.is_empty());
    let waiting_summary = page
        .runs
        .iter()
        .find(|run| run.message_id == waiting_id)
        .unwrap();
    assert_eq!(
        waiting_summary.status(),
        pb::MessageStatus::WaitingToolOutputs
    );
    assert!(waiting_summary.ended_at.is_none());

    let waiting_only = every_page(
        &mut client,
        pb::ListRunsRequest {
            statuses: vec![
                pb::MessageStatus::WaitingToolOutputs.into(),
                pb::MessageStatus::WaitingApproval.into(),
            ],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(waiting_only, vec![waiting_id.clone()]);
    let of_conversation = every_page(
        &mut client,
        pb::ListRunsRequest {
            conversation_id: conversation.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(of_conversation, newest_first[2..5].to_vec());
    let of_ann = every_page(
        &mut client,
        pb::ListRunsRequest {
            user: "ann".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(of_ann, newest_first[..2].to_vec());

    let too_big = client
        .list_runs(pb::ListRunsRequest {
            page_size: 1001,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), tonic::Code::InvalidArgument);
    assert!(too_big.message().contains("page_size"), "{too_big:?}");
    let first_page = client
        .list_runs(pb::ListRunsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let elsewhere = client
        .list_runs(pb::ListRunsRequest {
            page_size: 1,
            page_token: first_page.next_page_token,
            user: "ann".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), tonic::Code::InvalidArgument);
    assert!(elsewhere.message().contains("page_token"), "{elsewhere:?}");

    let conversations = client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .conversations;
    let by_activity: Vec<(&str, u64, &str)> = conversations
        .iter()
        .map(|c| {
            let last = c.last_run.as_ref().unwrap();
            (
                c.conversation_id.as_str(),
                c.message_count,
                last.message_id.as_str(),
            )
        })
        .collect();
    assert_eq!(by_activity.len(), 4, "{by_activity:?}");
    assert_eq!(
        by_activity[2],
        (conversation.as_str(), 3, newest_first[2].as_str())
    );
    assert_eq!(by_activity[0].2, newest_first[0]);
    assert_eq!(by_activity[3].2, waiting_id);
    let anns = client
        .list_conversations(pb::ListConversationsRequest {
            user: "ann".into(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(anns.conversations.len(), 1);
    assert_eq!(anns.conversations[0].user, "ann");
    let second = client
        .list_conversations(pb::ListConversationsRequest {
            user: "ann".into(),
            page_size: 1,
            page_token: anns.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        second.conversations[0]
            .last_run
            .as_ref()
            .unwrap()
            .message_id,
        newest_first[1]
    );
    assert!(second.next_page_token.is_empty());

    let usage = client
        .get_usage(pb::GetUsageRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(usage.tenant, "default");
    assert_eq!(usage.live_runs, 1, "the run waiting for its tool's output");
    assert!(
        usage.tokens_today >= 50,
        "five runs of 10 tokens: {usage:?}"
    );
    let elsewhere_usage = client
        .get_usage(as_tenant(pb::GetUsageRequest {}, "other"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (elsewhere_usage.tokens_today, elsewhere_usage.live_runs),
        (0, 0)
    );

    let other = client
        .list_runs(as_tenant(pb::ListRunsRequest::default(), "other"))
        .await
        .unwrap()
        .into_inner();
    assert!(other.runs.is_empty(), "another tenant sees none");

    client
        .delete_conversation(pb::DeleteConversationRequest {
            conversation_id: conversation,
        })
        .await
        .unwrap();
    let left = every_page(&mut client, pb::ListRunsRequest::default()).await;
    let mut expected = newest_first[..2].to_vec();
    expected.push(waiting_id);
    assert_eq!(left, expected);
    drop(stream);
}

/// Paging through a tenant's runs on one replica while two replicas start 1,250 more:
/// every one of the 1,250 runs made before the first page appears exactly once, in the
/// database's order, and another tenant sees none.
#[tokio::test]
async fn paging_holds_while_two_replicas_write() {
    let Some(database) = TestDatabase::create().await else {
        return;
    };
    let llm = FakeOpenAi::start(Vec::new()).await;
    llm.repeat(Reply::text(&["Done."], (1, 1)));
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let a = replica(dir.path(), &llm, &database, &key, "a").await;
    let b = replica(dir.path(), &llm, &database, &key, "b").await;
    let clients = [client(&a).await, client(&b).await];

    let before = make_runs(&clients, 1_250).await;
    let writer = tokio::spawn({
        let clients = clients.clone();
        async move { make_runs(&clients, 1_250).await }
    });
    let mut reader = client(&a).await;
    let listed = every_page(
        &mut reader,
        pb::ListRunsRequest {
            page_size: 100,
            ..Default::default()
        },
    )
    .await;
    let during = writer.await.unwrap();
    let unique: HashSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "no run is listed twice");
    let earlier: HashSet<&String> = before.iter().collect();
    let seen_earlier = listed.iter().filter(|id| earlier.contains(id)).count();
    assert_eq!(seen_earlier, before.len(), "every earlier run, once");
    assert!(listed
        .iter()
        .all(|id| earlier.contains(id) || during.contains(id)));
    let everything = every_page(
        &mut reader,
        pb::ListRunsRequest {
            page_size: 1000,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(everything.len(), 2_500);
    let other = reader
        .list_runs(as_tenant(pb::ListRunsRequest::default(), "other"))
        .await
        .unwrap()
        .into_inner();
    assert!(other.runs.is_empty());
}

/// Makes `count` runs, 25 at a time, alternating between the replicas; their message ids.
async fn make_runs(clients: &[Agents; 2], count: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    for batch in 0..count.div_ceil(25) {
        let runs = (0..25.min(count - batch * 25)).map(|i| {
            let mut client = clients[i % 2].clone();
            async move { started_id(&run_to_end(&mut client, run_request("hi", &[])).await) }
        });
        ids.extend(futures::future::join_all(runs).await);
    }
    ids
}
