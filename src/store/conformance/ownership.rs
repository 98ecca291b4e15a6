//! Checks of what replicas share: who may write a run, how commands reach it, how caches
//! learn that keys and providers changed, and how tenant limits are counted.

use super::{api_key, conversation, delta, envelope, events_of, finish, provider, start, tenant};
use super::{spec, Burst, Fence, Harness, NewMessage, Store, StoreError};
use crate::domain::{Adoption, OWNER_LOST};
use crate::domain::{Message, MessageStatus, RunCommand, RunEvent, Tenant};
use crate::store::contract::Admission;
use crate::store::contract::{Inserted, Refusal, Swept};

/// A burst under a fence that is not the run's (a replica that lost the run) is refused
/// as fenced and writes nothing of itself.
pub async fn a_burst_under_another_fence_writes_nothing(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let ours = store.fence();
    let stale = Fence {
        epoch: ours.epoch + 1,
        ..ours
    };
    let burst = Burst {
        records: Vec::new(),
        events: vec![envelope(&message, 1, delta("late"))],
    };
    let refused = store.commit(&tenant(), &stale, &burst).await;
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
    assert!(events_of(&store, message.id).await.is_empty());
}

/// A command for a running message is kept and taken once, in order with others, and only
/// by a taker that names the run (one handing the run over leaves it for the next owner);
/// none is kept for a message that ended; whether a conversation has a running message is
/// known.
pub async fn commands_reach_running_runs_once(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let opening = conversation(&tenant());
    let running = start(&store, opening.id, Some(&opening)).await;
    assert!(store.running_in(&tenant(), opening.id).await.unwrap());
    for command in [RunCommand::Cancel, RunCommand::Outputs(Vec::new())] {
        let owner = store
            .send_command(&tenant(), running.id, &command)
            .await
            .unwrap();
        assert_eq!(owner, Some(store.fence().owner), "the run's owner is named");
    }
    assert!(
        store.take_commands(&[]).await.unwrap().is_empty(),
        "left for a taker that runs it"
    );
    let taken = store.take_commands(&[running.id]).await.unwrap();
    let commands: Vec<_> = taken
        .iter()
        .map(|t| (t.message, t.command.clone()))
        .collect();
    assert_eq!(
        commands,
        [
            (running.id, RunCommand::Cancel),
            (running.id, RunCommand::Outputs(Vec::new()))
        ]
    );
    assert!(
        store.take_commands(&[running.id]).await.unwrap().is_empty(),
        "taken once"
    );

    let mut ended = running;
    finish(&store, &mut ended, "done").await;
    assert!(!store.running_in(&tenant(), opening.id).await.unwrap());
    assert_eq!(
        store
            .send_command(&tenant(), ended.id, &RunCommand::Cancel)
            .await
            .unwrap(),
        None
    );
    assert!(store.take_commands(&[ended.id]).await.unwrap().is_empty());
}

/// The registry's counters move with every change of a key or a provider, and not when a
/// key's use is noted; noting the use of a deleted key does not bring it back.
pub async fn registry_changes_are_counted(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let before = store.registry_changes().await.unwrap();
    let key = api_key("k1");
    store.put_api_key(&key).await.unwrap();
    let keyed = store.registry_changes().await.unwrap();
    assert_ne!(keyed.api_keys, before.api_keys);
    assert_eq!(keyed.providers, before.providers);

    let used = crate::domain::ApiKeyRecord {
        last_used_at: Some(crate::domain::now()),
        ..key.clone()
    };
    assert!(store.touch_api_key(&used).await.unwrap());
    assert_eq!(
        store.registry_changes().await.unwrap(),
        keyed,
        "a use is no change"
    );
    assert!(store.delete_api_key("k1").await.unwrap());
    assert!(!store.touch_api_key(&used).await.unwrap());
    assert!(
        store.all_api_keys().await.unwrap().is_empty(),
        "revoked stays revoked"
    );

    store
        .put_provider(&tenant(), &provider("sk-1"))
        .await
        .unwrap();
    let provided = store.registry_changes().await.unwrap();
    assert_ne!(provided.providers, keyed.providers);
    assert!(store.delete_provider(&tenant(), "weather").await.unwrap());
    assert_ne!(
        store.registry_changes().await.unwrap().providers,
        provided.providers
    );
}

/// Starts a message of `tenant` in a new conversation under `admission`.
async fn admitted(store: &Store, tenant: &Tenant, admission: Admission) -> Inserted {
    admitted_below(store, tenant, admission, None).await
}

/// As [`admitted`], for a sub-agent's message when `parent` is given.
async fn admitted_below(
    store: &Store,
    tenant: &Tenant,
    admission: Admission,
    parent: Option<crate::domain::MessageId>,
) -> Inserted {
    started_below(store, tenant, admission, parent).await.0
}

/// Starts a run of `tenant` (a child of `parent`, when given) in a new conversation:
/// whether it was admitted, and its message.
async fn started_below(
    store: &Store,
    tenant: &Tenant,
    admission: Admission,
    parent: Option<crate::domain::MessageId>,
) -> (Inserted, Message) {
    let opening = crate::store::test_records::conversation(tenant);
    let mut message = crate::store::test_records::running_message(opening.id, 0);
    message.parent = parent.map(|message_id| {
        Box::new(crate::domain::ParentLink {
            message_id,
            tool_call_id: "call".into(),
            depth: 1,
            call_at: None,
        })
    });
    let inserted = store
        .insert_message(NewMessage {
            tenant,
            conversation: Some(&opening),
            message: &mut message,
            spec: &spec(),
            idempotency: None,
            admission,
        })
        .await
        .expect("a message is written or refused");
    (inserted, message)
}

/// A run's running children are found by their parent, on any replica: ended children,
/// another run's children and another tenant's are not.
pub async fn running_children_are_found_by_their_parent(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let admission = Admission::default();
    let (_, parent) = started_below(&store, &tenant(), admission, None).await;
    let (_, other) = started_below(&store, &tenant(), admission, None).await;
    let (_, running) = started_below(&store, &tenant(), admission, Some(parent.id)).await;
    let (_, mut ended) = started_below(&store, &tenant(), admission, Some(parent.id)).await;
    let (_, _theirs) = started_below(&store, &tenant(), admission, Some(other.id)).await;
    let acme = Tenant::parse("acme").unwrap();
    let (_, _elsewhere) = started_below(&store, &acme, admission, Some(parent.id)).await;
    super::finish(&store, &mut ended, "done").await;
    assert_eq!(
        store.running_children(&tenant(), parent.id).await.unwrap(),
        vec![running.id]
    );
    assert_eq!(
        store.running_children(&tenant(), running.id).await.unwrap(),
        Vec::new(),
        "a run without children has none"
    );
}

/// A tenant's running messages and starts in the last minute are counted as a message is
/// written: past a limit it is refused (and nothing written), saying when a start frees;
/// starts at once never pass a limit together; other tenants are not counted.
pub async fn tenant_limits_admit_exactly(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let two_running = Admission {
        max_running: 2,
        ..Admission::default()
    };
    let acme = Tenant::parse("acme").unwrap();
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (store, acme) = (store.clone(), acme.clone());
            tokio::spawn(async move { admitted(&store, &acme, two_running).await })
        })
        .collect();
    let mut admitted_count = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Inserted::Yes => admitted_count += 1,
            Inserted::Refused(Refusal::Running { running }) => assert_eq!(running, 2),
            other @ (Inserted::KeyTaken(_) | Inserted::Refused(_) | Inserted::Queued { .. }) => {
                panic!("{other:?}")
            }
        }
    }
    assert_eq!(
        admitted_count, 2,
        "exactly the limit, however many start at once"
    );
    let other = Tenant::parse("other").unwrap();
    assert_eq!(admitted(&store, &other, two_running).await, Inserted::Yes);

    let three_a_minute = Admission {
        per_minute: 3,
        ..Admission::default()
    };
    let busy = Tenant::parse("busy").unwrap();
    for _ in 0..3 {
        assert_eq!(admitted(&store, &busy, three_a_minute).await, Inserted::Yes);
    }
    match admitted(&store, &busy, three_a_minute).await {
        Inserted::Refused(Refusal::PerMinute {
            started,
            retry_after,
        }) => {
            assert_eq!(started, 3);
            assert!(
                retry_after > std::time::Duration::from_secs(50)
                    && retry_after <= std::time::Duration::from_secs(60),
                "{retry_after:?}"
            );
        }
        other @ (Inserted::Yes
        | Inserted::KeyTaken(_)
        | Inserted::Refused(_)
        | Inserted::Queued { .. }) => {
            panic!("{other:?}")
        }
    }
}

/// Sub-agents' runs take no top-level slot (neither running nor a start in the minute):
/// they are counted against the tenant's limit on children alone, exactly, however many
/// start at once.
pub async fn children_are_counted_apart_from_top_level_runs(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let acme = Tenant::parse("acme").unwrap();
    let limits = Admission {
        max_running: 1,
        per_minute: 2,
        max_children: 3,
        rule: crate::store::ConversationRule::Beside,
    };
    let top = crate::domain::MessageId::new();
    assert_eq!(admitted(&store, &acme, limits).await, Inserted::Yes);
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (store, acme) = (store.clone(), acme.clone());
            tokio::spawn(async move { admitted_below(&store, &acme, limits, Some(top)).await })
        })
        .collect();
    let mut children = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Inserted::Yes => children += 1,
            Inserted::Refused(Refusal::Children { running }) => assert_eq!(running, 3),
            other @ (Inserted::KeyTaken(_) | Inserted::Refused(_) | Inserted::Queued { .. }) => {
                panic!("{other:?}")
            }
        }
    }
    assert_eq!(children, 3, "exactly the children's limit");
    // The one top-level run still holds the only top-level slot; the children hold none.
    match admitted(&store, &acme, limits).await {
        Inserted::Refused(Refusal::Running { running }) => assert_eq!(running, 1),
        other @ (Inserted::Yes
        | Inserted::KeyTaken(_)
        | Inserted::Refused(_)
        | Inserted::Queued { .. }) => {
            panic!("{other:?}")
        }
    }
    let roomier = Admission {
        max_running: 2,
        ..limits
    };
    assert_eq!(
        admitted(&store, &acme, roomier).await,
        Inserted::Yes,
        "children's starts are not counted in the minute either"
    );
}

/// A run left running by a process that is gone is taken over by the next one to resume
/// it: still running, its takeover count raised durably, its writes under the new fence;
/// once it was taken over as often as allowed, the next loss ends it `owner_lost`, with
/// its end event after what it had announced.
pub async fn orphans_are_taken_over_until_their_limit(harness: &dyn Harness) {
    let adoption = Adoption {
        resume: true,
        max_takeovers: 2,
    };
    let mut store = harness.fresh().await;
    let opening = conversation(&tenant());
    let message = start(&store, opening.id, Some(&opening)).await;
    let mut fence = store.fence();
    let mut seq = 0;
    for takeover in 1..=2 {
        seq += 1;
        let burst = Burst {
            records: Vec::new(),
            events: vec![envelope(&message, seq, delta("said"))],
        };
        store.commit(&tenant(), &fence, &burst).await.unwrap();
        store = harness.reopen(store).await;
        let swept = store.take_orphans(adoption).await.unwrap();
        assert!(swept.interrupted.is_empty());
        assert_eq!(swept.adopted.len(), 1, "{swept:?}");
        let adopted = &swept.adopted[0];
        assert_eq!((&adopted.tenant, adopted.message), (&tenant(), message.id));
        let stored = store
            .get_message(&tenant(), message.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.status, MessageStatus::Running);
        assert_eq!(stored.takeovers, takeover);
        if adopted.fence != fence {
            let late = Burst {
                records: Vec::new(),
                events: vec![envelope(&message, seq + 1, delta("late"))],
            };
            let refused = store.commit(&tenant(), &fence, &late).await;
            assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
        }
        fence = adopted.fence.clone();
        assert_eq!(
            store.take_orphans(adoption).await.unwrap(),
            Swept::default(),
            "taken once"
        );
    }
    store = harness.reopen(store).await;
    let swept = store.take_orphans(adoption).await.unwrap();
    assert_eq!(swept.interrupted, vec![(tenant(), message.id)]);
    assert!(swept.adopted.is_empty());
    let ended = store
        .get_message(&tenant(), message.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, MessageStatus::Interrupted);
    assert_eq!(ended.error.map(|e| e.code).as_deref(), Some(OWNER_LOST));
    let events = events_of(&store, message.id).await;
    assert_eq!(events.len(), 3);
    assert!(matches!(events[2].event, RunEvent::Error { .. }));
    assert_eq!(events[2].seq, 3);
}

/// The store lists this process's replica, live, holding the runs it owns that have not
/// ended.
pub async fn replicas_are_listed_with_the_runs_they_hold(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let held = |replicas: Vec<crate::store::ReplicaEntry>| {
        let me = replicas
            .into_iter()
            .find(|replica| replica.id == store.fence().owner)
            .expect("this replica is listed");
        assert!(me.live, "{me:?}");
        me.runs_held
    };
    assert_eq!(held(store.replicas().await.unwrap()), 0);
    let opening = conversation(&tenant());
    let mut running = start(&store, opening.id, Some(&opening)).await;
    assert_eq!(held(store.replicas().await.unwrap()), 1);
    finish(&store, &mut running, "done").await;
    assert_eq!(held(store.replicas().await.unwrap()), 0);
}
