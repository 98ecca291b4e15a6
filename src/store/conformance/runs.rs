//! Checks of listing a tenant's runs: order, stable paging while runs are written, every
//! filter, tenant isolation and deletion.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};

use super::{commit, conversation, insert, tenant, Harness, Record, Store};
use crate::domain::{
    CallAt, ConversationId, FinishReason, Message, MessageId, MessageStatus, ParentLink,
    PinnedAgent, RunFilter, Tenant,
};
use crate::store::test_records::running_message;
use crate::store::{ConversationQuery, RunCursor, RunQuery};

/// Starts a run of `tenant` in `conversation` (new when `opening`), shaped by `shape`.
async fn start_as(
    store: &Store,
    tenant: &Tenant,
    conversation: ConversationId,
    opening: bool,
    shape: impl FnOnce(&mut Message),
) -> Message {
    let mut message = running_message(conversation, 0);
    shape(&mut message);
    let new_conversation = opening.then(|| crate::domain::Conversation {
        id: conversation,
        tenant: tenant.clone(),
        user: message.user.clone(),
        created_at: message.created_at,
    });
    insert(store, tenant, new_conversation.as_ref(), message).await
}

/// Moves `message` to `status` (ending it with `reason` when given), as its run would.
async fn set_status(
    store: &Store,
    message: &mut Message,
    status: MessageStatus,
    reason: Option<FinishReason>,
) {
    message.status = status;
    message.finish_reason = reason;
    commit(store, vec![Record::Message(message.clone())], Vec::new()).await;
}

/// Every run `filter` keeps, a page of `limit` at a time.
async fn all_pages(
    store: &Store,
    tenant: &Tenant,
    filter: &RunFilter,
    limit: usize,
) -> Vec<MessageId> {
    let mut ids = Vec::new();
    let mut after: Option<RunCursor> = None;
    for _ in 0..1000 {
        let page = store
            .list_runs(
                tenant,
                &RunQuery {
                    filter,
                    after,
                    limit,
                },
            )
            .await
            .expect("a page of runs");
        assert!(page.items.len() <= limit, "a page holds at most its limit");
        ids.extend(page.items.iter().map(|run| run.message.id));
        match page.next {
            Some(next) => after = Some(next),
            None => return ids,
        }
    }
    panic!("paging never ended");
}

fn parented(parent: &Message) -> impl FnOnce(&mut Message) + '_ {
    move |message| {
        message.parent = Some(Box::new(ParentLink {
            message_id: parent.id,
            tool_call_id: "call-1".into(),
            depth: 1,
            call_at: None::<CallAt>,
        }))
    }
}

fn pinned(agent: &str, version: u32, user: &str, at: DateTime<Utc>) -> impl FnOnce(&mut Message) {
    let (agent, user) = (agent.to_owned(), user.to_owned());
    move |message| {
        message.agent = (!agent.is_empty()).then(|| {
            Box::new(PinnedAgent {
                agent_id: agent,
                version,
                overrides: Default::default(),
            })
        });
        message.user = user;
        message.created_at = at;
    }
}

/// Runs are listed newest first, top-level runs only; paging through them while another
/// handle on the store writes more returns every run that existed before the first page
/// exactly once, in the order they were written.
pub async fn runs_are_listed_newest_first_with_stable_pages(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let peer = harness.writer(&store).await;
    let mut written = Vec::new();
    for turn in 0..30 {
        let id = if turn % 10 == 0 {
            ConversationId::new()
        } else {
            written
                .last()
                .map_or_else(ConversationId::new, |m: &Message| m.conversation_id)
        };
        written.push(start_as(&store, &tenant(), id, turn % 10 == 0, |_| ()).await);
    }
    let child = start_as(
        &store,
        &tenant(),
        ConversationId::new(),
        true,
        parented(&written[3]),
    )
    .await;
    let writer = tokio::spawn(async move {
        for _ in 0..20 {
            start_as(&peer, &tenant(), ConversationId::new(), true, |_| ()).await;
            tokio::task::yield_now().await;
        }
    });
    let listed = all_pages(&store, &tenant(), &RunFilter::default(), 7).await;
    writer.await.unwrap();
    let unique: HashSet<_> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "no run is listed twice");
    assert!(
        !listed.contains(&child.id),
        "sub-agents' runs are not top-level runs"
    );
    let ours: Vec<MessageId> = listed
        .iter()
        .copied()
        .filter(|id| written.iter().any(|m| m.id == *id))
        .collect();
    let newest_first: Vec<MessageId> = written.iter().rev().map(|m| m.id).collect();
    assert_eq!(ours, newest_first, "every earlier run once, newest first");
    let again = all_pages(&store, &tenant(), &RunFilter::default(), 1000).await;
    assert_eq!(
        again.len(),
        50,
        "the runs written meanwhile are listed once written"
    );
}

/// Each filter keeps exactly its runs, through whichever index it reads, a page at a time.
pub async fn every_run_filter_holds(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let t0 = Utc::now() - Duration::hours(1);
    let (one, two) = (ConversationId::new(), ConversationId::new());
    let mut a = start_as(
        &store,
        &tenant(),
        one,
        true,
        pinned("support", 1, "ann", t0),
    )
    .await;
    let mut b = start_as(
        &store,
        &tenant(),
        one,
        false,
        pinned("support", 2, "bob", t0 + Duration::seconds(1)),
    )
    .await;
    let mut c = start_as(
        &store,
        &tenant(),
        two,
        true,
        pinned("", 0, "ann", t0 + Duration::seconds(2)),
    )
    .await;
    let d = start_as(
        &store,
        &tenant(),
        two,
        false,
        pinned("", 0, "bob", t0 + Duration::seconds(3)),
    )
    .await;
    let mut e = start_as(&store, &tenant(), ConversationId::new(), true, parented(&a)).await;
    let f = start_as(&store, &tenant(), ConversationId::new(), true, parented(&b)).await;
    set_status(
        &store,
        &mut a,
        MessageStatus::Completed,
        Some(FinishReason::Stop),
    )
    .await;
    set_status(&store, &mut b, MessageStatus::WaitingApproval, None).await;
    set_status(&store, &mut c, MessageStatus::Failed, None).await;
    set_status(
        &store,
        &mut e,
        MessageStatus::Completed,
        Some(FinishReason::Stop),
    )
    .await;
    let cases: Vec<(&str, RunFilter, Vec<MessageId>)> = vec![
        (
            "everything",
            RunFilter::default(),
            vec![d.id, c.id, b.id, a.id],
        ),
        (
            "waiting",
            RunFilter {
                statuses: vec![MessageStatus::WaitingApproval],
                ..Default::default()
            },
            vec![b.id],
        ),
        (
            "live",
            RunFilter {
                statuses: vec![MessageStatus::Running, MessageStatus::WaitingApproval],
                ..Default::default()
            },
            vec![d.id, b.id],
        ),
        (
            "completed",
            RunFilter {
                statuses: vec![MessageStatus::Completed],
                ..Default::default()
            },
            vec![a.id],
        ),
        (
            "agent",
            RunFilter {
                agent_id: Some("support".into()),
                ..Default::default()
            },
            vec![b.id, a.id],
        ),
        (
            "agent version",
            RunFilter {
                agent_id: Some("support".into()),
                agent_version: Some(1),
                ..Default::default()
            },
            vec![a.id],
        ),
        (
            "agent waiting",
            RunFilter {
                agent_id: Some("support".into()),
                statuses: vec![MessageStatus::WaitingApproval],
                ..Default::default()
            },
            vec![b.id],
        ),
        (
            "conversation",
            RunFilter {
                conversation: Some(two),
                ..Default::default()
            },
            vec![d.id, c.id],
        ),
        (
            "user",
            RunFilter {
                user: Some("ann".into()),
                ..Default::default()
            },
            vec![c.id, a.id],
        ),
        (
            "parent",
            RunFilter {
                parent: Some(a.id),
                ..Default::default()
            },
            vec![e.id],
        ),
        (
            "parent running",
            RunFilter {
                parent: Some(b.id),
                statuses: vec![MessageStatus::Running],
                ..Default::default()
            },
            vec![f.id],
        ),
        (
            "finish reason",
            RunFilter {
                finish_reason: Some(FinishReason::Stop),
                ..Default::default()
            },
            vec![a.id],
        ),
        (
            "created after",
            RunFilter {
                created_after: Some(b.created_at),
                ..Default::default()
            },
            vec![d.id, c.id, b.id],
        ),
        (
            "created before",
            RunFilter {
                created_before: Some(c.created_at),
                ..Default::default()
            },
            vec![b.id, a.id],
        ),
        (
            "nothing",
            RunFilter {
                user: Some("nobody".into()),
                ..Default::default()
            },
            vec![],
        ),
    ];
    for (name, filter, expected) in cases {
        for limit in [1, 100] {
            let listed = all_pages(&store, &tenant(), &filter, limit).await;
            assert_eq!(listed, expected, "{name}, {limit} a page");
        }
    }
    let last = store
        .list_runs(
            &tenant(),
            &RunQuery {
                filter: &RunFilter::default(),
                after: None,
                limit: 4,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (last.items.len(), last.next, last.stopped_early),
        (4, None, false)
    );
}

/// Another tenant lists none of a tenant's runs, by any index; deleting a conversation
/// takes its runs out of every listing.
pub async fn runs_are_listed_per_tenant_and_leave_with_their_conversation(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let mut ended = start_as(
        &store,
        &tenant(),
        opening.id,
        true,
        pinned("support", 1, "ann", Utc::now()),
    )
    .await;
    set_status(
        &store,
        &mut ended,
        MessageStatus::Completed,
        Some(FinishReason::Stop),
    )
    .await;
    let running = start_as(
        &store,
        &tenant(),
        opening.id,
        false,
        pinned("support", 1, "ann", Utc::now()),
    )
    .await;
    let child_home = ConversationId::new();
    let child = start_as(&store, &tenant(), child_home, true, parented(&running)).await;
    let filters = [
        RunFilter::default(),
        RunFilter {
            statuses: vec![MessageStatus::Running],
            ..Default::default()
        },
        RunFilter {
            agent_id: Some("support".into()),
            ..Default::default()
        },
        RunFilter {
            conversation: Some(opening.id),
            ..Default::default()
        },
        RunFilter {
            parent: Some(running.id),
            ..Default::default()
        },
    ];
    let other = Tenant::parse("other").unwrap();
    for filter in &filters {
        assert!(
            all_pages(&store, &other, filter, 10).await.is_empty(),
            "{filter:?} lists another tenant's runs"
        );
    }
    assert_eq!(
        all_pages(&store, &tenant(), &filters[4], 10).await,
        vec![child.id]
    );
    store
        .delete_conversation(&tenant(), child_home)
        .await
        .unwrap();
    store
        .delete_conversation(&tenant(), opening.id)
        .await
        .unwrap();
    for filter in &filters {
        assert!(
            all_pages(&store, &tenant(), filter, 10).await.is_empty(),
            "{filter:?} lists deleted runs"
        );
    }
}

/// Every page of a conversation listing, as (conversation, message count, newest run);
/// `between` runs after the first page.
async fn conversation_pages(
    store: &Store,
    tenant: &Tenant,
    user: Option<&str>,
    limit: usize,
    between: impl AsyncFnOnce(),
) -> Vec<(ConversationId, u64, MessageId)> {
    let mut listed = Vec::new();
    let mut query = ConversationQuery {
        user,
        as_of: None,
        after: None,
        limit,
    };
    let mut between = Some(between);
    for _ in 0..1000 {
        let page = store
            .list_conversations(tenant, &query)
            .await
            .expect("a page of conversations");
        listed.extend(
            page.page
                .items
                .into_iter()
                .map(|c| (c.conversation.id, c.messages, c.last.message.id)),
        );
        if let Some(between) = between.take() {
            between().await;
        }
        match page.page.next {
            Some(next) => (query.as_of, query.after) = (page.as_of, Some(next)),
            None => return listed,
        }
    }
    panic!("paging never ended");
}

/// Conversations are listed by their newest run, newest first, sub-agents' aside; paging
/// through them while runs are added shows each conversation that existed when the listing
/// began exactly once, as it stood then; the end-user filter, tenants and deletion hold.
pub async fn conversations_are_listed_by_last_activity_once_each(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let now = Utc::now();
    let (a, b, c) = (
        ConversationId::new(),
        ConversationId::new(),
        ConversationId::new(),
    );
    let started_by = move |user: &'static str| pinned("", 0, user, now);
    let a1 = start_as(&store, &tenant(), a, true, started_by("ann")).await;
    let b1 = start_as(&store, &tenant(), b, true, started_by("bob")).await;
    let c1 = start_as(&store, &tenant(), c, true, started_by("ann")).await;
    let a2 = start_as(&store, &tenant(), a, false, started_by("ann")).await;
    start_as(
        &store,
        &tenant(),
        ConversationId::new(),
        true,
        parented(&c1),
    )
    .await;
    let listed = conversation_pages(&store, &tenant(), None, 100, async || ()).await;
    assert_eq!(listed, vec![(a, 2, a2.id), (c, 1, c1.id), (b, 1, b1.id)]);
    let _ = a1;

    let writer = store.clone();
    let paged = conversation_pages(&store, &tenant(), None, 1, async move || {
        start_as(&writer, &tenant(), c, false, started_by("ann")).await;
        start_as(
            &writer,
            &tenant(),
            ConversationId::new(),
            true,
            started_by("eve"),
        )
        .await;
    })
    .await;
    assert_eq!(
        paged,
        vec![(a, 2, a2.id), (c, 1, c1.id), (b, 1, b1.id)],
        "each once, as it stood when the listing began"
    );
    let anns = conversation_pages(&store, &tenant(), Some("ann"), 100, async || ()).await;
    let anns: Vec<ConversationId> = anns.into_iter().map(|(id, _, _)| id).collect();
    assert_eq!(anns, vec![c, a], "the newest run moves a conversation up");
    let other = Tenant::parse("other").unwrap();
    assert!(conversation_pages(&store, &other, None, 10, async || ())
        .await
        .is_empty());
    let bobs = conversation_pages(&store, &tenant(), Some("bob"), 10, async || ()).await;
    assert_eq!(bobs, vec![(b, 1, b1.id)]);
    store.delete_conversation(&tenant(), b).await.unwrap();
    let left = conversation_pages(&store, &tenant(), Some("bob"), 10, async || ()).await;
    assert!(left.is_empty(), "a deleted conversation is not listed");
}
