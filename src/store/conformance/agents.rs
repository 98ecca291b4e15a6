//! What a backend must do with stored agents: numbering, alias compare-and-set, tenants
//! apart, deletion, paging and durability.

use std::collections::BTreeMap;

use super::{tenant, Harness};
use crate::domain::{AgentChange, AgentRecord, AgentRefusal, Tenant, VersionPick};
use crate::store::contract::PageSize;
use crate::store::Store;

fn agent(id: &str, labels: &[(&str, &str)]) -> AgentRecord {
    let now = crate::domain::now();
    AgentRecord {
        id: id.to_owned(),
        name: format!("{id} agent"),
        description: String::new(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        latest_version: 0,
        aliases: BTreeMap::new(),
        created_at: now,
        updated_at: now,
    }
}

fn config(n: usize) -> serde_json::Value {
    serde_json::json!({"agent": {"instruction": format!("version made by writer {n}")}})
}

/// A fresh store whose default tenant has the agent `helper`, with no version yet.
async fn with_helper(harness: &dyn Harness) -> (Store, Tenant) {
    let store = harness.fresh().await;
    let tenant = tenant();
    store
        .create_agent(&tenant, &agent("helper", &[]), None)
        .await
        .unwrap()
        .unwrap();
    (store, tenant)
}

/// Versions added at once each get their own number, 1 ..= N with none skipped, and
/// `latest` ends on N; they survive a reopen.
pub async fn versions_are_numbered_without_gaps(harness: &dyn Harness) {
    let (store, tenant) = with_helper(harness).await;
    let writers: Vec<_> = (0..20)
        .map(|n| {
            let store = store.clone();
            let tenant = tenant.clone();
            tokio::spawn(async move {
                store
                    .add_version(&tenant, "helper", &config(n))
                    .await
                    .unwrap()
                    .unwrap()
                    .version
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for writer in writers {
        numbers.push(writer.await.unwrap());
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=20).collect::<Vec<u32>>());
    let store = harness.reopen(store).await;
    let record = store.get_agent(&tenant, "helper").await.unwrap().unwrap();
    assert_eq!(record.latest_version, 20);
    assert_eq!(record.version_of(&VersionPick::Latest), Some(20));
    let size = PageSize {
        limit: 8,
        max_bytes: 1 << 20,
    };
    let first = store
        .list_versions(&tenant, "helper", u32::MAX, size)
        .await
        .unwrap();
    let listed: Vec<u32> = first.items.iter().map(|v| v.version).collect();
    assert_eq!(listed, (13..=20).rev().collect::<Vec<u32>>());
    assert!(first.more);
    let last = store
        .list_versions(&tenant, "helper", 5, size)
        .await
        .unwrap();
    assert_eq!(
        last.items.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![4, 3, 2, 1]
    );
    assert!(!last.more);
    let seven = store
        .get_version(&tenant, "helper", 7)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seven.agent_id, "helper");
    assert!(seven.config["agent"]["instruction"]
        .as_str()
        .unwrap()
        .starts_with("version made by writer"));
}

/// Of two compare-and-sets from one expected version, exactly one moves the alias.
pub async fn alias_moves_compare_and_set(harness: &dyn Harness) {
    let (store, tenant) = with_helper(harness).await;
    for n in 0..3 {
        store
            .add_version(&tenant, "helper", &config(n))
            .await
            .unwrap()
            .unwrap();
    }
    let set = |version, expected| AgentChange::SetAlias {
        alias: "prod".into(),
        version,
        expected,
    };
    store
        .change_agent(&tenant, "helper", &set(1, Some(0)))
        .await
        .unwrap()
        .unwrap();
    let racers: Vec<_> = [2u32, 3]
        .into_iter()
        .map(|version| {
            let store = store.clone();
            let tenant = tenant.clone();
            let change = set(version, Some(1));
            tokio::spawn(async move { store.change_agent(&tenant, "helper", &change).await })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap().unwrap() {
            Ok(_) => won += 1,
            Err(AgentRefusal::Moved { expected: 1, .. }) => {}
            Err(other) => panic!("unexpected refusal {other:?}"),
        }
    }
    assert_eq!(won, 1, "one compare-and-set wins");
    let refused = store
        .change_agent(&tenant, "helper", &set(9, None))
        .await
        .unwrap();
    assert!(matches!(
        refused,
        Err(AgentRefusal::NoVersion { version: 9, .. })
    ));
    let store = harness.reopen(store).await;
    let record = store.get_agent(&tenant, "helper").await.unwrap().unwrap();
    let prod = record.aliases["prod"];
    assert!(prod == 2 || prod == 3);
    let deleted = store
        .change_agent(
            &tenant,
            "helper",
            &AgentChange::DeleteAlias {
                alias: "prod".into(),
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(deleted.aliases.is_empty());
}

/// Ids are unique per tenant, tenants never see each other's agents, listings page by id
/// and filter by label, and a deleted agent takes its versions with it.
pub async fn agents_are_kept_per_tenant(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let mine = tenant();
    let other = Tenant::parse("other").unwrap();
    let create = |store: &Store, tenant: &Tenant, record: AgentRecord| {
        let store = store.clone();
        let tenant = tenant.clone();
        async move { store.create_agent(&tenant, &record, None).await.unwrap() }
    };
    for (id, team) in [("a", "x"), ("b", "y"), ("c", "x"), ("d", "x")] {
        create(&store, &mine, agent(id, &[("team", team)]))
            .await
            .unwrap();
    }
    assert_eq!(
        create(&store, &mine, agent("a", &[])).await,
        Err(AgentRefusal::Exists("a".into()))
    );
    create(&store, &other, agent("a", &[("team", "x")]))
        .await
        .unwrap();
    store
        .add_version(&other, "a", &config(0))
        .await
        .unwrap()
        .unwrap();
    assert!(store.get_version(&mine, "a", 1).await.unwrap().is_none());
    let team_x: BTreeMap<String, String> = [("team".to_owned(), "x".to_owned())].into();
    let page = store.list_agents(&mine, "", &team_x, 2).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|a| a.id.as_str()).collect();
    assert_eq!((ids, page.more), (vec!["a", "c"], true));
    let page = store.list_agents(&mine, "c", &team_x, 2).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|a| a.id.as_str()).collect();
    assert_eq!((ids, page.more), (vec!["d"], false));
    let all = store
        .list_agents(&mine, "", &BTreeMap::new(), 100)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 4);
    assert!(store.delete_agent(&other, "a").await.unwrap());
    assert!(!store.delete_agent(&other, "a").await.unwrap());
    assert!(store.get_version(&other, "a", 1).await.unwrap().is_none());
    assert!(store.get_agent(&mine, "a").await.unwrap().is_some());
    let refused = store.add_version(&other, "a", &config(1)).await.unwrap();
    assert_eq!(refused, Err(AgentRefusal::NoAgent("a".into())));
}

/// A stored agent's top-level messages are listed newest first, a page at a time; inline
/// runs, other agents' and sub-agents' runs are not among them, nor messages deleted with
/// their conversation; the list survives a reopen.
pub async fn an_agents_messages_are_listed_newest_first(harness: &dyn Harness) {
    use crate::domain::{Conversation, ConversationId, ParentLink, PinnedAgent};
    use crate::store::test_records::running_message;
    use crate::store::{Inserted, NewMessage};

    let store = harness.fresh().await;
    let tenant = tenant();
    let insert = |agent: Option<&str>, parent: bool, conversation: ConversationId| {
        let store = store.clone();
        let tenant = tenant.clone();
        let agent = agent.map(str::to_owned);
        async move {
            let mut message = running_message(conversation, 0);
            message.agent = agent.map(|agent_id| {
                Box::new(PinnedAgent {
                    agent_id,
                    version: 1,
                    overrides: Default::default(),
                })
            });
            if parent {
                message.parent = Some(Box::new(ParentLink {
                    message_id: crate::domain::MessageId::new(),
                    tool_call_id: "c1".into(),
                    depth: 1,
                    call_at: None,
                }));
            }
            let start = Conversation {
                id: conversation,
                tenant: tenant.clone(),
                user: String::new(),
                created_at: crate::domain::now(),
            };
            let inserted = store
                .insert_message(NewMessage {
                    tenant: &tenant,
                    conversation: Some(&start),
                    message: &mut message,
                    spec: &serde_json::json!({}),
                    idempotency: None,
                    admission: crate::store::Admission::default(),
                })
                .await
                .unwrap();
            assert_eq!(inserted, Inserted::Yes);
            message.id
        }
    };
    let kept = ConversationId::new();
    let gone = ConversationId::new();
    let mut helper = Vec::new();
    for n in 0..5 {
        let conversation = if n == 1 { gone } else { kept };
        helper.push(insert(Some("helper"), false, conversation).await);
        insert(Some("other"), false, kept).await;
        insert(None, false, kept).await;
        insert(Some("helper"), true, kept).await;
    }
    store.delete_conversation(&tenant, gone).await.unwrap();
    helper.remove(1);
    helper.reverse();

    let first = store
        .agent_message_ids(&tenant, "helper", None, 3)
        .await
        .unwrap();
    assert_eq!(first.items, helper[..3]);
    assert!(first.more);
    let rest = store
        .agent_message_ids(&tenant, "helper", first.items.last().copied(), 3)
        .await
        .unwrap();
    assert_eq!(rest.items, helper[3..]);
    assert!(!rest.more);
    let elsewhere = store
        .agent_message_ids(&Tenant::parse("elsewhere").unwrap(), "helper", None, 10)
        .await
        .unwrap();
    assert!(elsewhere.items.is_empty());

    let store = harness.reopen(store).await;
    let again = store
        .agent_message_ids(&tenant, "helper", None, 10)
        .await
        .unwrap();
    assert_eq!(again.items, helper);
}

/// NUL (U+0000) in an agent's name, description or labels is refused, naming the field,
/// whether the agent is created or changed: the same on every backend (PostgreSQL's record
/// cannot hold it), and nothing of the refused write is kept.
pub async fn nul_in_an_agents_fields_is_refused_naming_it(harness: &dyn Harness) {
    let store = harness.fresh().await;
    let tenant = tenant();
    let mut named = agent("nul-name", &[]);
    named.name = "a\0b".to_owned();
    let mut described = agent("nul-description", &[]);
    described.description = "says\0more".to_owned();
    let labelled = agent("nul-label", &[("team", "a\0b")]);
    for (record, field) in [
        (named, "name"),
        (described, "description"),
        (labelled, "labels"),
    ] {
        let refused = store.create_agent(&tenant, &record, None).await.unwrap();
        assert_eq!(refused, Err(AgentRefusal::HoldsNul(field)));
        assert!(store
            .get_agent(&tenant, &record.id)
            .await
            .unwrap()
            .is_none());
    }
    store
        .create_agent(&tenant, &agent("clean", &[("team", "a")]), None)
        .await
        .unwrap()
        .unwrap();
    let change = AgentChange::Describe {
        name: None,
        description: Some("now\0with NUL".to_owned()),
        labels: None,
    };
    let refused = store.change_agent(&tenant, "clean", &change).await.unwrap();
    assert_eq!(refused, Err(AgentRefusal::HoldsNul("description")));
    let kept = store.get_agent(&tenant, "clean").await.unwrap().unwrap();
    assert_eq!(kept.description, "");
    assert_eq!(kept.labels.get("team").map(String::as_str), Some("a"));
}
