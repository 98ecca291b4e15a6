//! A run that must start alone in its conversation: checked and written in one step.

use super::{commit, envelope, finish, tenant, Harness, WIDE};
use crate::domain::{Conversation, Message, MessageId, MessageStatus, RunEvent};
use crate::store::test_records::{conversation, running_message};
use crate::store::{Admission, ConversationRule, Inserted, NewMessage, Record, Refusal, Store};

/// A run to start alone is refused while its conversation has a live run, naming the oldest
/// one (a run started beside it counts too, a waiting one as well); it is admitted once they
/// have ended. Of runs racing into an idle conversation from two writers (two replicas on a
/// shared database), exactly one is admitted and every other names it. The rule holds after
/// the store is opened again.
pub async fn a_run_to_start_alone_waits_for_no_live_run(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let (admitted, mut first) = started(&store, Some(&opening), opening.id, true).await;
    assert_eq!(admitted, Inserted::Yes, "an idle conversation admits it");
    let other = harness.writer(&store).await;
    let (refused, _) = started(&other, None, opening.id, true).await;
    assert_eq!(refused, busy(first.id), "another writer sees the live run");
    let (beside, mut second) = started(&store, None, opening.id, false).await;
    assert_eq!(
        beside,
        Inserted::Yes,
        "a run not asked to start alone starts beside it"
    );
    wait_for_approval(&store, &mut second).await;
    finish(&store, &mut first, "one").await;
    let (refused, _) = started(&other, None, opening.id, true).await;
    assert_eq!(refused, busy(second.id), "a waiting run is live");
    finish(&store, &mut second, "two").await;
    let (admitted, _) = started(&other, None, opening.id, true).await;
    assert_eq!(
        admitted,
        Inserted::Yes,
        "admitted once every live run ended"
    );

    let idle = conversation(&tenant());
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let writer = if i % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            let idle = idle.clone();
            tokio::spawn(async move { started(&writer, Some(&idle), idle.id, true).await })
        })
        .collect();
    let mut results = Vec::new();
    for racer in racers {
        results.push(racer.await.expect("a racer finishes"));
    }
    let winners: Vec<&Message> = results
        .iter()
        .filter(|(inserted, _)| *inserted == Inserted::Yes)
        .map(|(_, message)| message)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one of {results:?}");
    let winner = winners[0].id;
    for (inserted, _) in &results {
        assert!(
            *inserted == Inserted::Yes || *inserted == busy(winner),
            "every other names the winner: {inserted:?}"
        );
    }
    drop(other);
    let store = harness.reopen(store).await;
    let (refused, _) = started(&store, None, idle.id, true).await;
    assert_eq!(
        refused,
        busy(winner),
        "a live run keeps its conversation after a restart"
    );
    let page = store
        .list_messages(&tenant(), idle.id, 0, WIDE)
        .await
        .expect("the conversation reads");
    assert_eq!(page.items.len(), 1, "a refused run wrote nothing");
}

/// A run to be queued starts at once in an idle conversation; behind live runs it is
/// written queued, naming the newest of them, until the conversation holds its most queued
/// runs. Each queued run finds the live runs ahead of it, oldest first, and none once they
/// ended; a run to start alone is refused naming the oldest.
pub async fn queued_runs_line_up_behind_the_live_ones(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let other = harness.writer(&store).await;
    let two = ConversationRule::Queue { max_queued: 2 };
    let opening = conversation(&tenant());
    let (admitted, mut first) = started_by(&store, Some(&opening), opening.id, two).await;
    assert_eq!(admitted, Inserted::Yes, "an idle conversation starts it");
    let (queued, second) = started_by(&other, None, opening.id, two).await;
    assert_eq!(queued, Inserted::Queued { ahead: 1 });
    assert_eq!(second.status, MessageStatus::Queued);
    assert_eq!(second.queued_behind, Some(first.id));
    let (queued, third) = started_by(&store, None, opening.id, two).await;
    assert_eq!(queued, Inserted::Queued { ahead: 2 });
    assert_eq!(third.queued_behind, Some(second.id));
    let stored = store
        .get_message(&tenant(), third.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.status, stored.queued_behind),
        (MessageStatus::Queued, Some(second.id)),
        "written queued"
    );
    let (full, _) = started_by(&other, None, opening.id, two).await;
    assert_eq!(full, Inserted::Refused(Refusal::QueueFull { queued: 2 }));
    let (refused, _) = started(&other, None, opening.id, true).await;
    assert_eq!(
        refused,
        busy(first.id),
        "a queued run keeps its conversation live"
    );
    let ahead = |message: &Message| {
        let (store, seq) = (other.clone(), message.seq);
        async move {
            store
                .live_before(&tenant(), opening.id, seq)
                .await
                .expect("the store answers")
        }
    };
    assert_eq!(ahead(&third).await, [first.id, second.id]);
    assert_eq!(ahead(&second).await, [first.id]);
    assert!(ahead(&first).await.is_empty());
    finish(&store, &mut first, "one").await;
    assert!(
        ahead(&second).await.is_empty(),
        "its turn once the run ahead ended"
    );
    assert_eq!(ahead(&third).await, [second.id]);
}

/// A queued run takes no slot of its tenant's running runs and is no start until
/// `start_queued` admits it: it is queued even with the tenant at its limit, while a run
/// that would start at once is refused; it starts only once a slot is free, and then holds
/// it, on any writer.
pub async fn a_queued_run_takes_no_slot_until_it_starts(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let other = harness.writer(&store).await;
    let acme = crate::domain::Tenant::parse("acme").expect("a tenant");
    let one = Admission {
        max_running: 1,
        per_minute: 2,
        rule: ConversationRule::Queue { max_queued: 8 },
        ..Admission::default()
    };
    let opening = conversation(&acme);
    let (admitted, mut first) = admitted_as(&store, &acme, Some(&opening), opening.id, one).await;
    assert_eq!(admitted, Inserted::Yes);
    let (queued, second) = admitted_as(&other, &acme, None, opening.id, one).await;
    assert_eq!(
        queued,
        Inserted::Queued { ahead: 1 },
        "queued at the tenant's limit"
    );
    let (third, _) = admitted_as(&other, &acme, None, opening.id, one).await;
    assert_eq!(
        third,
        Inserted::Queued { ahead: 2 },
        "a queued run is no start"
    );
    let elsewhere = conversation(&acme);
    let (refused, _) = admitted_as(&other, &acme, Some(&elsewhere), elsewhere.id, one).await;
    assert_eq!(refused, Inserted::Refused(Refusal::Running { running: 1 }));
    let start = |writer: Store, id: MessageId| {
        let acme = acme.clone();
        async move {
            writer
                .start_queued(&acme, id, &writer.fence(), one)
                .await
                .expect("the store answers")
        }
    };
    assert_eq!(
        start(other.clone(), second.id).await,
        Some(Refusal::Running { running: 1 }),
        "not while the slot is taken"
    );
    first.status = MessageStatus::Completed;
    let end = envelope(&first, 1, RunEvent::completed("one"));
    store
        .commit(
            &acme,
            &store.fence(),
            &crate::store::Burst {
                records: vec![Record::Message(first.clone())],
                events: vec![end],
            },
        )
        .await
        .expect("the end commits");
    assert_eq!(
        start(other.clone(), second.id).await,
        None,
        "a slot is free"
    );
    let again = conversation(&acme);
    let (refused, _) = admitted_as(&store, &acme, Some(&again), again.id, one).await;
    assert_eq!(
        refused,
        Inserted::Refused(Refusal::Running { running: 1 }),
        "the started run holds the slot"
    );
}

/// Starts a run of `tenant` in `conversation_id` under `admission`.
async fn admitted_as(
    store: &Store,
    tenant: &crate::domain::Tenant,
    opening: Option<&Conversation>,
    conversation_id: crate::domain::ConversationId,
    admission: Admission,
) -> (Inserted, Message) {
    let mut message = running_message(conversation_id, 0);
    let inserted = store
        .insert_message(NewMessage {
            tenant,
            conversation: opening,
            message: &mut message,
            spec: &serde_json::json!({}),
            idempotency: None,
            admission,
        })
        .await
        .expect("the store answers");
    (inserted, message)
}

fn busy(live: MessageId) -> Inserted {
    Inserted::Refused(Refusal::Busy { live })
}

/// Starts a run in `conversation_id` (opening it when `opening` is given), alone or not.
async fn started(
    store: &Store,
    opening: Option<&Conversation>,
    conversation_id: crate::domain::ConversationId,
    alone: bool,
) -> (Inserted, Message) {
    let rule = if alone {
        ConversationRule::Alone
    } else {
        ConversationRule::Beside
    };
    started_by(store, opening, conversation_id, rule).await
}

/// Starts a run of the test tenant in `conversation_id` (opening it when `opening` is
/// given) under `rule`.
async fn started_by(
    store: &Store,
    opening: Option<&Conversation>,
    conversation_id: crate::domain::ConversationId,
    rule: ConversationRule,
) -> (Inserted, Message) {
    let admission = Admission {
        rule,
        ..Admission::default()
    };
    admitted_as(store, &tenant(), opening, conversation_id, admission).await
}

/// Makes `message` wait for an approval, as a run asking for one does.
async fn wait_for_approval(store: &Store, message: &mut Message) {
    message.status = MessageStatus::WaitingApproval;
    let event = envelope(message, 1, RunEvent::AnswerDelta { text: "…".into() });
    commit(store, vec![Record::Message(message.clone())], vec![event]).await;
}

/// A steer written queued and aimed at a live run, once that run took it, leaves no
/// message: not listed, not live (the run queued behind it has only the run ahead of it
/// left), without events; its idempotency key points at the run it joined, so a retry
/// follows that run. Removing it again, or removing a message that is not queued, changes
/// nothing.
pub async fn a_steer_its_run_took_leaves_no_message(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let queue = ConversationRule::Queue { max_queued: 8 };
    let opening = conversation(&tenant());
    let (admitted, first) = started_by(&store, Some(&opening), opening.id, queue).await;
    assert_eq!(admitted, Inserted::Yes);
    let mut steer = running_message(opening.id, 0);
    steer.steers = Some(first.id);
    let key = crate::domain::IdempotencyRecord {
        message_id: steer.id,
        fingerprint: "the steer".into(),
    };
    let inserted = store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: None,
            message: &mut steer,
            spec: &serde_json::json!({}),
            idempotency: Some(("steer-key", &key)),
            admission: Admission {
                rule: queue,
                ..Admission::default()
            },
        })
        .await
        .expect("the store answers");
    assert_eq!(inserted, Inserted::Queued { ahead: 1 });
    let steered = RunEvent::Steered {
        joined: first.id,
        steer: steer.id,
    };
    commit(&store, Vec::new(), vec![envelope(&steer, 1, steered)]).await;
    let (_, behind) = started_by(&store, None, opening.id, queue).await;
    let fence = store.fence();
    let dropped = store
        .drop_steer(&tenant(), steer.id, first.id, &fence)
        .await;
    assert!(dropped.expect("the store answers"), "a queued steer goes");
    assert_eq!(store.get_message(&tenant(), steer.id).await.unwrap(), None);
    let listed: Vec<MessageId> = store
        .list_messages(&tenant(), opening.id, 0, WIDE)
        .await
        .expect("the conversation reads")
        .items
        .iter()
        .map(|message| message.id)
        .collect();
    assert_eq!(listed, [first.id, behind.id], "the steer is not listed");
    for statuses in [Vec::new(), vec![MessageStatus::Queued]] {
        let filter = crate::domain::RunFilter {
            statuses,
            ..crate::domain::RunFilter::default()
        };
        let query = crate::store::RunQuery {
            filter: &filter,
            after: None,
            limit: 100,
        };
        let runs = store.list_runs(&tenant(), &query).await.expect("runs list");
        assert!(
            runs.items.iter().all(|run| run.message.id != steer.id),
            "no run listing holds the steer"
        );
    }
    let ahead = store
        .live_before(&tenant(), opening.id, behind.seq)
        .await
        .expect("the store answers");
    assert_eq!(ahead, [first.id], "the steer is no longer live");
    assert!(super::events_of(&store, steer.id).await.is_empty());
    let kept = store
        .get_idempotency(&tenant(), "steer-key")
        .await
        .expect("the store answers")
        .expect("the key is kept");
    assert_eq!(
        kept.message_id, first.id,
        "a retry follows the run it joined"
    );
    let again = store
        .drop_steer(&tenant(), steer.id, first.id, &fence)
        .await;
    assert!(!again.expect("the store answers"), "gone already");
    let running = store
        .drop_steer(&tenant(), first.id, first.id, &fence)
        .await;
    assert!(!running.expect("the store answers"), "not queued");
    assert!(store
        .get_message(&tenant(), first.id)
        .await
        .unwrap()
        .is_some());
}
