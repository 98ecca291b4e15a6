//! A tenant's runs newest first, and its conversations by last activity: the `runs` tree (top-level messages) and the `children`
//! tree (sub-agents' runs by parent) hold keys only; listing reads the index the filter
//! names backwards from its cursor. Ids are time-ordered (v7) and minted by the one process
//! that writes the store, so an index's key order is the order runs were made.

use super::admission::CHILD_MARKER;
use super::{decode, keys, Embedded, StoreError, Trees};
use crate::domain::{Message, MessageId, RunFilter, RunIndex, Tenant};
use crate::store::run_listing::{
    ConversationPage, ConversationQuery, Flow, Gather, ListedConversation, ListedRun, RunCursor,
    RunPage, RunQuery,
};

/// Marks a database whose run indexes hold every message (written once they were built
/// from an earlier version's messages). Tenants are never empty, so no entry starts so.
const BUILT: &[u8] = b"\0built";

/// The index entry of a message: in `runs` at the top, in `children` under its parent.
pub(super) fn entry_of(tenant: &Tenant, message: &Message) -> (IndexTree, Vec<u8>) {
    match message.parent.as_deref() {
        Some(parent) => (
            IndexTree::Children,
            keys::child_run(tenant, parent.message_id, message.id),
        ),
        None => (IndexTree::Runs, keys::message(tenant, message.id)),
    }
}

/// Which tree an index entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IndexTree {
    /// Top-level runs.
    Runs,
    /// Sub-agents' runs.
    Children,
}

impl IndexTree {
    pub(super) fn of(self, t: &Trees) -> &sled::Tree {
        match self {
            Self::Runs => &t.runs,
            Self::Children => &t.children,
        }
    }
}

/// How to read one index: its tree and prefix, and where the run's id and place are.
struct Scan<'t> {
    tree: &'t sled::Tree,
    prefix: Vec<u8>,
    /// Places are conversation `seq`s (8 bytes, the id in the value), not ids.
    by_seq: bool,
    /// Entries marked as sub-agents' runs are passed over.
    top_only: bool,
}

impl Scan<'_> {
    /// The key a read starts below: the cursor's, or past the last of the prefix.
    fn end(&self, after: Option<RunCursor>) -> Vec<u8> {
        let mut end = self.prefix.clone();
        match after {
            Some(RunCursor(place)) if self.by_seq => {
                end.extend_from_slice(&u64::try_from(place).unwrap_or(u64::MAX).to_be_bytes());
            }
            Some(RunCursor(place)) => end.extend_from_slice(&place.to_be_bytes()),
            None => end.extend_from_slice(&[0xff; 17]),
        }
        end
    }

    /// An entry's place and run id.
    fn read(&self, key: &[u8], value: &[u8]) -> Option<(RunCursor, Option<MessageId>)> {
        let suffix = key.get(self.prefix.len()..)?;
        if self.by_seq {
            let seq = u64::from_be_bytes(suffix.try_into().ok()?);
            let id = <[u8; 16]>::try_from(value).ok().map(id_of);
            return Some((RunCursor(u128::from(seq)), id));
        }
        let bytes: [u8; 16] = suffix.try_into().ok()?;
        let child = self.top_only && value == CHILD_MARKER;
        Some((
            RunCursor(u128::from_be_bytes(bytes)),
            (!child).then(|| id_of(bytes)),
        ))
    }
}

/// The place of the newest entry under `prefix`.
fn newest_place(tree: &sled::Tree, prefix: &[u8]) -> Result<Option<RunCursor>, StoreError> {
    let Some(entry) = tree.scan_prefix(prefix).next_back() else {
        return Ok(None);
    };
    let (key, _) = entry?;
    Ok(key
        .get(prefix.len()..)
        .and_then(|suffix| <[u8; 16]>::try_from(suffix).ok())
        .map(|bytes| RunCursor(u128::from_be_bytes(bytes))))
}

fn id_of(bytes: [u8; 16]) -> MessageId {
    MessageId(uuid::Uuid::from_bytes(bytes))
}

impl Embedded {
    /// Writes the runs indexes for messages an earlier version wrote, once.
    pub(super) fn build_run_index(t: &Trees) -> Result<(), StoreError> {
        if t.runs.contains_key(BUILT)? {
            return Ok(());
        }
        for entry in t.messages.iter() {
            let (key, value) = entry?;
            let Some((tenant, _)) = keys::parse_message(&key) else {
                continue;
            };
            let message: Message = decode("messages", &value)?;
            let (tree, key) = entry_of(&tenant, &message);
            tree.of(t).insert(key, &[] as &[u8])?;
        }
        t.runs.insert(BUILT, &[] as &[u8])?;
        Ok(())
    }

    /// A page of the tenant's runs `filter` keeps, newest first, after `after`.
    pub fn list_runs(&self, tenant: &Tenant, query: &RunQuery<'_>) -> Result<RunPage, StoreError> {
        let RunQuery {
            filter,
            after,
            limit,
        } = *query;
        let t = self.t()?;
        let scan = scan_of(&t, tenant, filter);
        let end = scan.end(after);
        let mut gather = Gather::new(limit);
        for entry in scan.tree.range(scan.prefix.clone()..end).rev() {
            let (key, value) = entry?;
            let Some((place, id)) = scan.read(&key, &value) else {
                continue;
            };
            let run = match id {
                Some(id) => self.listed(&t, tenant, id)?,
                None => None,
            };
            let kept = run.filter(|run| filter.keeps(&run.message));
            if gather.offer(place, kept) == Flow::Done {
                break;
            }
        }
        Ok(gather.finish())
    }

    /// A page of the tenant's conversations by last activity as of `as_of`, from `after`
    /// down.
    pub fn list_conversations(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery<'_>,
    ) -> Result<ConversationPage, StoreError> {
        let t = self.t()?;
        let prefix = keys::tenant_prefix(tenant, 0);
        let as_of = match query.as_of {
            Some(as_of) => as_of,
            None => match newest_place(&t.runs, &prefix)? {
                Some(newest) => newest,
                None => return Ok(ConversationPage::default()),
            },
        };
        let below = query
            .after
            .map_or(as_of.0.saturating_add(1), |after| after.0.min(as_of.0 + 1));
        let mut end = prefix.clone();
        end.extend_from_slice(&below.to_be_bytes());
        let mut gather = Gather::new(query.limit);
        for entry in t.runs.range(prefix.clone()..end).rev() {
            let (key, _) = entry?;
            let Some(bytes) = key
                .get(prefix.len()..)
                .and_then(|suffix| <[u8; 16]>::try_from(suffix).ok())
            else {
                continue;
            };
            let place = RunCursor(u128::from_be_bytes(bytes));
            let kept = self.conversation_at(&t, tenant, id_of(bytes), as_of, query.user)?;
            if gather.offer(place, kept) == Flow::Done {
                break;
            }
        }
        Ok(ConversationPage {
            as_of: Some(as_of),
            page: gather.finish(),
        })
    }

    /// The conversation of run `id` when that run was its newest as of `as_of` (and `user`
    /// started it, when given).
    fn conversation_at(
        &self,
        t: &Trees,
        tenant: &Tenant,
        id: MessageId,
        as_of: RunCursor,
        user: Option<&str>,
    ) -> Result<Option<ListedConversation>, StoreError> {
        let Some(last) = self.listed(t, tenant, id)? else {
            return Ok(None);
        };
        let id = last.message.conversation_id;
        let index = keys::conversation_messages(tenant, id);
        let later = keys::conversation_message(tenant, id, last.message.seq.saturating_add(1));
        for entry in t.conversation_messages.range(later..) {
            let (key, value) = entry?;
            if !key.starts_with(&index) {
                break;
            }
            let Ok(bytes) = <[u8; 16]>::try_from(value.as_ref()) else {
                continue;
            };
            if u128::from_be_bytes(bytes) <= as_of.0 {
                // A later run that existed then: this one was not the newest.
                return Ok(None);
            }
        }
        let Some(conversation) = self.get_conversation(tenant, id)? else {
            return Ok(None);
        };
        if user.is_some_and(|user| conversation.user != user) {
            return Ok(None);
        }
        Ok(Some(ListedConversation {
            conversation,
            messages: last.message.seq,
            last,
        }))
    }

    /// A message as a listing shows it: its record without the answer kept apart.
    fn listed(
        &self,
        t: &Trees,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<ListedRun>, StoreError> {
        let Some(bytes) = t.messages.get(keys::message(tenant, id))? else {
            return Ok(None);
        };
        let mut message: Message = decode("messages", &bytes)?;
        message.answer.clear();
        Ok(Some(ListedRun {
            message,
            owner: None,
        }))
    }
}

/// The index `filter` reads, for `tenant`.
fn scan_of<'t>(t: &'t Trees, tenant: &Tenant, filter: &RunFilter) -> Scan<'t> {
    let (tree, prefix, by_seq, top_only) = match filter.index() {
        RunIndex::Conversation(id) => (
            &t.conversation_messages,
            keys::conversation_messages(tenant, id),
            true,
            false,
        ),
        RunIndex::Children(parent) => (&t.children, keys::child_runs(tenant, parent), false, false),
        RunIndex::Live => (&t.running, keys::tenant_prefix(tenant, 0), false, true),
        RunIndex::Agent => {
            let agent = filter.agent_id.as_deref().unwrap_or_default();
            (
                &t.agent_messages,
                keys::agent_messages(tenant, agent),
                false,
                false,
            )
        }
        RunIndex::All => (&t.runs, keys::tenant_prefix(tenant, 0), false, false),
    };
    Scan {
        tree,
        prefix,
        by_seq,
        top_only,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::{Admission, Inserted, NewMessage};
    use crate::store::test_records::{conversation, running_message};

    /// A database an earlier version wrote has messages but no run index: opening it builds
    /// the index once, and its runs are listed.
    #[test]
    fn an_earlier_versions_messages_are_indexed_when_opened() {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let opening = conversation(&tenant);
        let mut ids = Vec::new();
        for turn in 0..3 {
            let mut message = running_message(opening.id, 0);
            let inserted = store
                .insert_message(NewMessage {
                    tenant: &tenant,
                    conversation: (turn == 0).then_some(&opening),
                    message: &mut message,
                    spec: &serde_json::json!({}),
                    idempotency: None,
                    admission: Admission::default(),
                })
                .unwrap();
            assert_eq!(inserted, Inserted::Yes);
            ids.push(message.id);
        }
        let t = store.t().unwrap();
        t.runs.clear().unwrap();
        let all = RunFilter::default();
        let first_page = RunQuery {
            filter: &all,
            after: None,
            limit: 10,
        };
        assert!(store
            .list_runs(&tenant, &first_page)
            .unwrap()
            .items
            .is_empty());
        Embedded::build_run_index(&t).unwrap();
        let listed: Vec<MessageId> = store
            .list_runs(&tenant, &first_page)
            .unwrap()
            .items
            .into_iter()
            .map(|run| run.message.id)
            .collect();
        ids.reverse();
        assert_eq!(listed, ids);
        assert!(t.runs.contains_key(BUILT).unwrap());
    }
}
