//! A run that must start alone in its conversation: checked and written in one step.

use super::{commit, envelope, finish, tenant, Harness, WIDE};
use crate::domain::{Conversation, Message, MessageId, MessageStatus, RunEvent};
use crate::store::test_records::{conversation, running_message};
use crate::store::{Admission, Inserted, NewMessage, Record, Refusal, Store};

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
    let mut message = running_message(conversation_id, 0);
    let inserted = store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: opening,
            message: &mut message,
            spec: &serde_json::json!({}),
            idempotency: None,
            admission: Admission {
                alone,
                ..Admission::default()
            },
        })
        .await
        .expect("the store answers");
    (inserted, message)
}

/// Makes `message` wait for an approval, as a run asking for one does.
async fn wait_for_approval(store: &Store, message: &mut Message) {
    message.status = MessageStatus::WaitingApproval;
    let event = envelope(message, 1, RunEvent::AnswerDelta { text: "…".into() });
    commit(store, vec![Record::Message(message.clone())], vec![event]).await;
}
