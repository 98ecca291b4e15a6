//! What every backend must do, as checks any backend's tests run against it: a backend is
//! a store once it passes them all. Each check takes a [`Harness`] that makes an empty
//! store and opens one again (as a restart would), and panics on the first thing wrong.

// A check fails as a test does: by panicking, with what was wrong.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agents;
mod conversation_rule;
mod lifecycle;
mod ownership;
mod runs;
mod sealing;

pub use agents::{
    agents_are_kept_per_tenant, alias_moves_compare_and_set,
    an_agents_messages_are_listed_newest_first, nul_in_an_agents_fields_is_refused_naming_it,
    versions_are_numbered_without_gaps,
};
pub use conversation_rule::{
    a_queued_run_takes_no_slot_until_it_starts, a_run_to_start_alone_waits_for_no_live_run,
    a_steer_its_run_took_leaves_no_message, queued_runs_line_up_behind_the_live_ones,
};
pub use lifecycle::{a_store_that_cannot_write_says_unavailable, retired_events_leave_each_end};
pub use ownership::{
    a_burst_under_another_fence_writes_nothing, children_are_counted_apart_from_top_level_runs,
    commands_reach_running_runs_once, orphans_are_taken_over_until_their_limit,
    registry_changes_are_counted, replicas_are_listed_with_the_runs_they_hold,
    running_children_are_found_by_their_parent, tenant_limits_admit_exactly,
};
pub use runs::{
    conversations_are_listed_by_last_activity_once_each, every_run_filter_holds,
    runs_are_listed_newest_first_with_stable_pages,
    runs_are_listed_per_tenant_and_leave_with_their_conversation,
};
pub use sealing::{a_rounds_signed_thinking_is_sealed, credentials_are_sealed};

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::test_records::{conversation, running_message};
use super::{
    Adoption, Burst, Category, Fence, Inserted, NewMessage, PageSize, Record, Store, StoreError,
    Swept,
};
use crate::domain::{
    ApiKeyRecord, Conversation, ConversationId, EventEnvelope, FileId, FileRecord, FinishReason,
    IdempotencyRecord, Message, MessageStatus, ProviderRecord, ProviderSource, RunEvent, Tenant,
    Thought,
};

/// Makes stores of one backend for the checks.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new, empty store.
    async fn fresh(&self) -> Store;

    /// The database of `store` opened again, as after a restart; `store` is dropped first.
    async fn reopen(&self, store: Store) -> Store;

    /// Another writer on the database of `store`: a second replica's handle on a shared
    /// database; the same handle (used from another task) on a store one process opens.
    async fn writer(&self, store: &Store) -> Store {
        store.clone()
    }
}

/// Every check of the suite, named once: `$make!` is called with the whole list, and each
/// backend's tests are made from it, so a check cannot be added to one backend only.
#[cfg(test)]
macro_rules! every_check {
    ($make:ident) => {
        $make!(
            concurrent_starts_take_consecutive_places,
            pages_follow_order_limits_and_bytes,
            one_idempotency_key_starts_one_run,
            concurrent_writers_to_one_message_all_land,
            tokens_with_their_event_count_once,
            a_burst_reads_back_with_its_records,
            large_values_read_back_whole,
            deletion_removes_everything_of_a_conversation,
            credentials_are_sealed,
            a_rounds_signed_thinking_is_sealed,
            a_reopened_store_holds_everything,
            a_store_that_cannot_write_says_unavailable,
            retired_events_leave_each_end,
            a_burst_under_another_fence_writes_nothing,
            commands_reach_running_runs_once,
            registry_changes_are_counted,
            tenant_limits_admit_exactly,
            children_are_counted_apart_from_top_level_runs,
            orphans_are_taken_over_until_their_limit,
            running_children_are_found_by_their_parent,
            versions_are_numbered_without_gaps,
            alias_moves_compare_and_set,
            agents_are_kept_per_tenant,
            an_agents_messages_are_listed_newest_first,
            nul_in_an_agents_fields_is_refused_naming_it,
            runs_are_listed_newest_first_with_stable_pages,
            every_run_filter_holds,
            runs_are_listed_per_tenant_and_leave_with_their_conversation,
            conversations_are_listed_by_last_activity_once_each,
            replicas_are_listed_with_the_runs_they_hold,
            a_run_to_start_alone_waits_for_no_live_run,
            queued_runs_line_up_behind_the_live_ones,
            a_queued_run_takes_no_slot_until_it_starts,
            a_steer_its_run_took_leaves_no_message,
        );
    };
}
#[cfg(test)]
pub(crate) use every_check;

/// The events of `message` of the test tenant, from the first.
pub(crate) async fn events_of(
    store: &Store,
    message: crate::domain::MessageId,
) -> Vec<EventEnvelope> {
    store.list_events(&tenant(), message, 0).await.unwrap()
}

pub(crate) fn tenant() -> Tenant {
    Tenant::default_tenant()
}

fn spec() -> serde_json::Value {
    serde_json::json!({"agent": {"instruction": "be brief"}, "deadline": null})
}

const WIDE: PageSize = PageSize {
    limit: 10_000,
    max_bytes: 64 * 1024 * 1024,
};

/// Starts a run in `conversation` (new when `start` holds it); returns its message.
pub(crate) async fn start(
    store: &Store,
    conversation: ConversationId,
    start: Option<&Conversation>,
) -> Message {
    insert(store, &tenant(), start, running_message(conversation, 0)).await
}

/// Writes `message` of `tenant` as its run starts (with its conversation when `opening`
/// holds it); returns it as written.
pub(crate) async fn insert(
    store: &Store,
    tenant: &Tenant,
    opening: Option<&Conversation>,
    mut message: Message,
) -> Message {
    let inserted = store
        .insert_message(NewMessage {
            tenant,
            conversation: opening,
            message: &mut message,
            spec: &spec(),
            idempotency: None,
            admission: crate::store::Admission::default(),
        })
        .await
        .expect("a message is written");
    assert_eq!(inserted, Inserted::Yes);
    message
}

pub(crate) fn envelope(message: &Message, seq: u64, event: RunEvent) -> EventEnvelope {
    EventEnvelope {
        seq,
        conversation_id: message.conversation_id,
        message_id: message.id,
        created_at: chrono::DateTime::from_timestamp_nanos(1_795_000_000_000_000_000 + seq as i64),
        event,
    }
}

pub(crate) fn delta(text: &str) -> RunEvent {
    RunEvent::AnswerDelta { text: text.into() }
}

fn end(answer: &str) -> RunEvent {
    RunEvent::completed(answer)
}

async fn commit(store: &Store, records: Vec<Record>, events: Vec<EventEnvelope>) {
    store
        .commit(&tenant(), &store.fence(), &Burst { records, events })
        .await
        .expect("the burst commits");
}

/// Ends `message` with `answer`, its thought and its events, in one burst.
async fn finish(store: &Store, message: &mut Message, answer: &str) -> Thought {
    let mut thought = Thought::begin(message.id, 1);
    thought.thought = format!("thinking about {}", message.id);
    message.status = MessageStatus::Completed;
    message.finish_reason = Some(FinishReason::Stop);
    message.answer = answer.to_owned();
    let events = vec![
        envelope(message, 1, RunEvent::Thought(Box::new(thought.clone()))),
        envelope(message, 2, delta(answer)),
        envelope(message, 3, end(answer)),
    ];
    let records = vec![
        Record::Thought(thought.clone()),
        Record::Message(message.clone()),
    ];
    commit(store, records, events).await;
    thought
}

/// A new conversation with a run that ended answering `answer` (returned with its
/// thought) and a second run, still running.
async fn ended_then_running(store: &Store, answer: &str) -> (Message, Thought, Message) {
    let opening = conversation(&tenant());
    let mut ended = start(store, opening.id, Some(&opening)).await;
    let thought = finish(store, &mut ended, answer).await;
    let running = start(store, opening.id, None).await;
    (ended, thought, running)
}

/// `ended` and its one `thought` read back as they were written.
async fn reads_back(store: &Store, ended: &Message, thought: Thought) {
    assert_eq!(
        store.get_message(&tenant(), ended.id).await.unwrap(),
        Some(ended.clone())
    );
    assert_eq!(
        store.all_thoughts(&tenant(), ended.id).await.unwrap(),
        vec![thought]
    );
}

/// Runs started at once in one conversation take the places 1, 2, 3 … (ordinals alike)
/// with none shared or skipped, and a reader paging by `seq` meanwhile sees every one, in
/// order.
pub async fn concurrent_starts_take_consecutive_places(harness: &dyn Harness) {
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    let store = harness.fresh().await;
    let first_conversation = conversation(&tenant());
    let id = first_conversation.id;
    let first = start(&store, id, Some(&first_conversation)).await;
    assert_eq!((first.seq, first.ordinal), (1, 1));
    let total = (WRITERS * EACH + 1) as u64;
    let reader = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while (seen.len() as u64) < total && std::time::Instant::now() < until {
                let after = seen.last().copied().unwrap_or(0);
                let size = PageSize {
                    limit: 7,
                    max_bytes: 1 << 20,
                };
                let page = store
                    .list_messages(&tenant(), id, after, size)
                    .await
                    .unwrap();
                seen.extend(page.items.iter().map(|m| m.seq));
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    start(&store, id, None).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let seen = reader.await.unwrap();
    assert_eq!(
        seen,
        (1..=total).collect::<Vec<u64>>(),
        "paged in order, none skipped"
    );
    let all = store.list_messages(&tenant(), id, 0, WIDE).await.unwrap();
    let mut ordinals: Vec<u64> = all.items.iter().map(|m| m.ordinal).collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, (1..=total).collect::<Vec<u64>>());
}

/// Pages keep order, stop at their limit or once past their bytes, say whether more
/// follow, and go on where the last one stopped; ids page newest first.
pub async fn pages_follow_order_limits_and_bytes(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let mut messages = vec![start(&store, opening.id, Some(&opening)).await];
    for _ in 1..10 {
        messages.push(start(&store, opening.id, None).await);
    }
    let small = PageSize {
        limit: 3,
        max_bytes: 1 << 20,
    };
    let mut pages = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .list_messages(&tenant(), opening.id, after, small)
            .await
            .unwrap();
        let seqs: Vec<u64> = page.items.iter().map(|m| m.seq).collect();
        after = *seqs.last().unwrap_or(&after);
        pages.push((seqs, page.more));
        if !page.more {
            break;
        }
    }
    assert_eq!(
        pages,
        vec![
            (vec![1, 2, 3], true),
            (vec![4, 5, 6], true),
            (vec![7, 8, 9], true),
            (vec![10], false)
        ]
    );

    // Three answers of 1 MiB: a page of 1.5 MiB holds two (it stops once past) or fewer.
    for message in &mut messages[..3] {
        finish(&store, message, &"a".repeat(1 << 20)).await;
    }
    let budget = PageSize {
        limit: 100,
        max_bytes: 3 << 19,
    };
    let page = store
        .list_messages(&tenant(), opening.id, 0, budget)
        .await
        .unwrap();
    assert!(
        page.more && (1..=2).contains(&page.items.len()),
        "{}",
        page.items.len()
    );
    assert_eq!(page.items[0].answer.len(), 1 << 20);

    let newest = store
        .message_ids_before(&tenant(), opening.id, u64::MAX, 4)
        .await
        .unwrap();
    let seqs: Vec<u64> = newest.items.iter().map(|(seq, _)| *seq).collect();
    assert_eq!((seqs, newest.more), (vec![10, 9, 8, 7], true));
    assert_eq!(newest.items[0].1, messages[9].id);
    let oldest = store
        .message_ids_before(&tenant(), opening.id, 3, 4)
        .await
        .unwrap();
    let seqs: Vec<u64> = oldest.items.iter().map(|(seq, _)| *seq).collect();
    assert_eq!((seqs, oldest.more), (vec![2, 1], false));

    let mut thoughts: Vec<Record> = (1..=5)
        .map(|position| Record::Thought(Thought::begin(messages[5].id, position)))
        .collect();
    thoughts.reverse();
    commit(&store, thoughts, Vec::new()).await;
    let two = PageSize {
        limit: 2,
        max_bytes: 1 << 20,
    };
    let first = store
        .list_thoughts(&tenant(), messages[5].id, None, two)
        .await
        .unwrap();
    let next = store
        .list_thoughts(&tenant(), messages[5].id, Some(2), two)
        .await
        .unwrap();
    let positions =
        |page: &super::Page<Thought>| page.items.iter().map(|t| t.position).collect::<Vec<_>>();
    assert_eq!((positions(&first), first.more), (vec![1, 2], true));
    assert_eq!((positions(&next), next.more), (vec![3, 4], true));
}

/// Of runs started at once under one idempotency key, one is written; the others learn
/// its message and write nothing of their own.
pub async fn one_idempotency_key_starts_one_run(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let racers: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let opening = conversation(&tenant());
                let mut message = running_message(opening.id, 0);
                let key = IdempotencyRecord {
                    message_id: message.id,
                    fingerprint: "same request".into(),
                };
                let inserted = store
                    .insert_message(NewMessage {
                        tenant: &tenant(),
                        conversation: Some(&opening),
                        message: &mut message,
                        spec: &spec(),
                        idempotency: Some(("retry-me", &key)),
                        admission: crate::store::Admission::default(),
                    })
                    .await
                    .unwrap();
                (message.id, inserted)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            (id, Inserted::Yes) => winners.push(id),
            (id, Inserted::KeyTaken(record)) => losers.push((id, record.message_id)),
            (_, refused) => panic!("no limit was set: {refused:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "one run per key");
    let winner = winners[0];
    for (loser, pointed) in losers {
        assert_eq!(pointed, winner, "a loser learns the winner's message");
        assert!(store.get_message(&tenant(), loser).await.unwrap().is_none());
        assert!(store
            .get_run_spec(&tenant(), loser)
            .await
            .unwrap()
            .is_none());
    }
    let kept = store
        .get_idempotency(&tenant(), "retry-me")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.message_id, winner);
    assert_eq!(
        store.get_run_spec(&tenant(), winner).await.unwrap(),
        Some(spec())
    );
}

/// Bursts of one message committed at once from many tasks all land: every thought is
/// there and the tokens they count add up.
pub async fn concurrent_writers_to_one_message_all_land(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let writers: Vec<_> = (1..=16u32)
        .map(|position| {
            let store = store.clone();
            let id = message.id;
            tokio::spawn(async move {
                let mut thought = Thought::begin(id, position);
                thought.thought = format!("writer {position}");
                let records = vec![
                    Record::Thought(thought),
                    Record::TenantTokens {
                        day: 20_261_125,
                        tokens: 10,
                        once: None,
                    },
                ];
                commit(&store, records, Vec::new()).await;
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let thoughts = store.all_thoughts(&tenant(), message.id).await.unwrap();
    let written: Vec<String> = thoughts.iter().map(|t| t.thought.clone()).collect();
    let expected: Vec<String> = (1..=16).map(|n| format!("writer {n}")).collect();
    assert_eq!(written, expected);
    assert_eq!(
        store.tenant_tokens(&tenant(), 20_261_125).await.unwrap(),
        160
    );
}

/// A run's end burst committed again (its first commit failed as far as the run knows,
/// but may have landed) counts the run's tokens once: they go with the end event, and only
/// the commit that first writes it counts them; a burst whose event is new counts.
pub async fn tokens_with_their_event_count_once(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let end = envelope(&message, 1, delta("done"));
    let tokens = |seq| Record::TenantTokens {
        day: 20_261_126,
        tokens: 270,
        once: Some((message.id, seq)),
    };
    for _ in 0..3 {
        commit(&store, vec![tokens(1)], vec![end.clone()]).await;
    }
    assert_eq!(
        store.tenant_tokens(&tenant(), 20_261_126).await.unwrap(),
        270,
        "counted once however often the burst is committed"
    );
    let next = envelope(&message, 2, delta("more"));
    commit(&store, vec![tokens(2)], vec![next]).await;
    assert_eq!(
        store.tenant_tokens(&tenant(), 20_261_126).await.unwrap(),
        540
    );
}

/// A burst's events read back with its records: the thought they announce, the message's
/// end and its answer (the end event carries it whole), and `after_seq` skips what a
/// client saw.
pub async fn a_burst_reads_back_with_its_records(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let mut message = start(&store, opening.id, Some(&opening)).await;
    let thought = finish(&store, &mut message, "It is noon.").await;

    let events = events_of(&store, message.id).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(events[2].event, end("It is noon."));
    assert_eq!(
        events[0].created_at,
        envelope(&message, 1, delta("")).created_at
    );
    let read = store
        .get_message(&tenant(), message.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, message);
    let thoughts = store.all_thoughts(&tenant(), message.id).await.unwrap();
    assert_eq!(thoughts, vec![thought]);
    let later = store.list_events(&tenant(), message.id, 2).await.unwrap();
    assert_eq!(later.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3]);
}

/// Values of several MiB (an answer, a thought, a file) read back byte for byte.
pub async fn large_values_read_back_whole(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let mut message = start(&store, opening.id, Some(&opening)).await;
    let answer: String = (0..5 << 20)
        .map(|n| char::from(b'a' + (n % 26) as u8))
        .collect();
    let mut thought = Thought::begin(message.id, 1);
    thought.answer = "o".repeat(3 << 20);
    message.answer = answer.clone();
    message.status = MessageStatus::Completed;
    let events = vec![envelope(&message, 1, end(&answer))];
    commit(
        &store,
        vec![
            Record::Thought(thought.clone()),
            Record::Message(message.clone()),
        ],
        events,
    )
    .await;
    let bytes: Vec<u8> = (0..2 << 20).map(|n| (n % 251) as u8).collect();
    let file = FileRecord {
        id: FileId::new(),
        message_id: message.id,
        name: "big.bin".into(),
        mime_type: "application/octet-stream".into(),
        size: bytes.len() as u64,
        url: String::new(),
        created_at: crate::domain::now(),
    };
    store
        .put_file(&tenant(), &file, Some(&bytes))
        .await
        .unwrap();

    let read = store
        .get_message(&tenant(), message.id)
        .await
        .unwrap()
        .unwrap();
    assert!(read.answer == answer, "the answer reads back whole");
    let thoughts = store.all_thoughts(&tenant(), message.id).await.unwrap();
    assert!(thoughts == vec![thought], "the thought reads back whole");
    let events = events_of(&store, message.id).await;
    assert!(
        events[0].event == end(&answer),
        "the end carries the whole answer"
    );
    let (record, data) = store.get_file(&tenant(), file.id).await.unwrap().unwrap();
    assert_eq!(record, file);
    assert!(data == bytes, "the file's bytes read back whole");
}

/// Deleting a conversation removes its messages, their specs, thoughts, events, files and
/// idempotency keys, and nothing of any other conversation.
pub async fn deletion_removes_everything_of_a_conversation(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let doomed = conversation(&tenant());
    let mut message = running_message(doomed.id, 0);
    let key = IdempotencyRecord {
        message_id: message.id,
        fingerprint: "f".into(),
    };
    store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: Some(&doomed),
            message: &mut message,
            spec: &spec(),
            idempotency: Some(("doomed-key", &key)),
            admission: crate::store::Admission::default(),
        })
        .await
        .unwrap();
    let mut thought = finish(&store, &mut message, "gone soon").await;
    let file = FileRecord {
        id: FileId::new(),
        message_id: message.id,
        name: "f.txt".into(),
        mime_type: "text/plain".into(),
        size: 4,
        url: String::new(),
        created_at: crate::domain::now(),
    };
    store
        .put_file(&tenant(), &file, Some(b"data"))
        .await
        .unwrap();
    thought.file_ids = vec![file.id.to_string()];
    commit(&store, vec![Record::Thought(thought)], Vec::new()).await;
    let kept = conversation(&tenant());
    let mut survivor = start(&store, kept.id, Some(&kept)).await;
    finish(&store, &mut survivor, "still here").await;

    let deleted = store
        .delete_conversation(&tenant(), doomed.id)
        .await
        .unwrap();
    assert_eq!(deleted, Some(vec![message.id]));
    assert!(store
        .get_conversation(&tenant(), doomed.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_message(&tenant(), message.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .get_run_spec(&tenant(), message.id)
        .await
        .unwrap()
        .is_none());
    assert!(store
        .all_thoughts(&tenant(), message.id)
        .await
        .unwrap()
        .is_empty());
    assert!(events_of(&store, message.id).await.is_empty());
    assert!(store.get_file(&tenant(), file.id).await.unwrap().is_none());
    assert!(store
        .get_idempotency(&tenant(), "doomed-key")
        .await
        .unwrap()
        .is_none());
    for needle in [message.id.to_string(), doomed.id.to_string()] {
        assert_eq!(
            store.find_bytes(needle.as_bytes()).await.unwrap(),
            Vec::<String>::new()
        );
    }
    assert!(!store.find_bytes(b"still here").await.unwrap().is_empty());
    assert_eq!(events_of(&store, survivor.id).await.len(), 3);
    assert_eq!(
        store
            .delete_conversation(&tenant(), doomed.id)
            .await
            .unwrap(),
        None
    );
}

/// An API key of the test tenant, never used.
fn api_key(id: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        id: id.into(),
        tenant: tenant(),
        name: "ci".into(),
        secret_hash: "00".repeat(32),
        created_at: crate::domain::now(),
        last_used_at: None,
        limits: Default::default(),
    }
}

/// A tool provider of the test tenant holding `secret` as its credential.
fn provider(secret: &str) -> ProviderRecord {
    ProviderRecord {
        name: "weather".into(),
        description: "forecasts".into(),
        source: ProviderSource::Mcp {
            url: "http://127.0.0.1:9/mcp".into(),
        },
        credentials: BTreeMap::from([("api_key".to_owned(), secret.to_owned())]),
        cache_ttl_secs: 0,
        mcp_tools: Vec::new(),
        idempotent_tools: vec!["forecast".into()],
    }
}

/// Everything written reads back the same after the store is opened again, and a run left
/// running is found and marked interrupted.
pub async fn a_reopened_store_holds_everything(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let (ended, thought, running) = ended_then_running(&store, "kept").await;
    commit(
        &store,
        vec![Record::TenantTokens {
            day: 20_261_125,
            tokens: 42,
            once: None,
        }],
        vec![envelope(&running, 1, delta("half"))],
    )
    .await;
    store
        .put_provider(&tenant(), &provider("sk-reopen"))
        .await
        .unwrap();
    let key = api_key("k1");
    store.put_api_key(&key).await.unwrap();

    let store = harness.reopen(store).await;
    reads_back(&store, &ended, thought).await;
    assert_eq!(events_of(&store, ended.id).await.len(), 3);
    assert_eq!(
        store.get_run_spec(&tenant(), running.id).await.unwrap(),
        Some(spec())
    );
    assert_eq!(
        store.tenant_tokens(&tenant(), 20_261_125).await.unwrap(),
        42
    );
    assert_eq!(
        store.get_provider(&tenant(), "weather").await.unwrap(),
        Some(provider("sk-reopen"))
    );
    assert_eq!(store.all_api_keys().await.unwrap(), vec![key]);

    assert_eq!(
        store
            .take_orphans(Adoption::INTERRUPT)
            .await
            .unwrap()
            .interrupted
            .len(),
        1
    );
    let interrupted = store
        .get_message(&tenant(), running.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(interrupted.status, MessageStatus::Interrupted);
    assert_eq!(
        events_of(&store, running.id)
            .await
            .iter()
            .map(|e| (e.seq, e.event.is_terminal()))
            .collect::<Vec<_>>(),
        [(1, false), (2, true)],
        "its end follows what it had announced"
    );
    assert_eq!(
        store.take_orphans(Adoption::INTERRUPT).await.unwrap(),
        Swept::default(),
        "found once"
    );
    let listed = store
        .list_messages(&tenant(), ended.conversation_id, 0, WIDE)
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
}
