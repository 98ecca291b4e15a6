//! Checks that secrets are sealed at rest: a provider's credentials and a round's signed
//! thinking are nowhere in the database in the clear, and read back opened.

use super::{commit, conversation, envelope, provider, start, tenant, Harness, WIDE};
use super::{Record, RunEvent, Thought};

/// A provider's credentials are nowhere in the database as written, and read back opened.
pub async fn credentials_are_sealed(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let secret = "sk-conformance-7f3a9c";
    store
        .put_provider(&tenant(), &provider(secret))
        .await
        .unwrap();
    assert_eq!(
        store.find_bytes(secret.as_bytes()).await.unwrap(),
        Vec::<String>::new()
    );
    let read = store
        .get_provider(&tenant(), "weather")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, provider(secret));
    let all = store.all_providers().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].2.as_ref().unwrap(), &provider(secret));
    assert!(store.delete_provider(&tenant(), "weather").await.unwrap());
    assert!(!store.delete_provider(&tenant(), "weather").await.unwrap());
}

/// A round's signed thinking (kept so a takeover can hand it back to its provider) is
/// nowhere in the database in the clear, in the thought nor in the event announcing it;
/// listings carry it sealed, and the runner's read opens it.
pub async fn a_rounds_signed_thinking_is_sealed(harness: &dyn Harness) {
    use crate::domain::{ProviderReasoning, Reasoning};
    let store = harness.fresh().await;
    let talk = conversation(&tenant());
    let message = start(&store, talk.id, Some(&talk)).await;
    let secret = "the plan no one may read 5d1e";
    let blocks = vec![Reasoning::Thinking {
        thinking: secret.into(),
        signature: "sig-5d1e".into(),
    }];
    let mut thought = Thought::begin(message.id, 1);
    thought.provider_reasoning = ProviderReasoning::Open(blocks.clone());
    let announced = envelope(&message, 1, RunEvent::Thought(Box::new(thought.clone())));
    commit(&store, vec![Record::Thought(thought)], vec![announced]).await;
    assert_eq!(
        store.find_bytes(secret.as_bytes()).await.unwrap(),
        Vec::<String>::new()
    );
    let listed = store
        .list_thoughts(&tenant(), message.id, None, WIDE)
        .await
        .unwrap();
    assert!(listed.items[0].provider_reasoning.sealed().is_some());
    let read = store.all_thoughts(&tenant(), message.id).await.unwrap();
    assert_eq!(read[0].provider_reasoning, ProviderReasoning::Open(blocks));
}
