//! Key layout. Every key starts with the tenant and a NUL separator; ids follow as raw bytes
//! and counters as big-endian integers, so a prefix scan yields records in creation order.

use crate::domain::{ConversationId, FileId, MessageId, Tenant};

/// `tenant \0`: the prefix shared by all of a tenant's keys.
pub fn tenant_prefix(tenant: &Tenant, extra: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(tenant.as_str().len() + 1 + extra);
    key.extend_from_slice(tenant.as_str().as_bytes());
    key.push(0);
    key
}

/// Key of a conversation record.
pub fn conversation(tenant: &Tenant, id: ConversationId) -> Vec<u8> {
    let mut key = tenant_prefix(tenant, 16);
    key.extend_from_slice(id.as_bytes());
    key
}

/// Key of a message record (also of its running marker).
pub fn message(tenant: &Tenant, id: MessageId) -> Vec<u8> {
    let mut key = tenant_prefix(tenant, 16);
    key.extend_from_slice(id.as_bytes());
    key
}

/// Prefix of a conversation's message index entries.
pub fn conversation_messages(tenant: &Tenant, id: ConversationId) -> Vec<u8> {
    conversation(tenant, id)
}

/// Index entry placing message `seq` in its conversation.
pub fn conversation_message(tenant: &Tenant, id: ConversationId, seq: u64) -> Vec<u8> {
    let mut key = conversation(tenant, id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Prefix of a stored agent's message index entries.
pub fn agent_messages(tenant: &Tenant, agent_id: &str) -> Vec<u8> {
    let mut key = tenant_prefix(tenant, agent_id.len() + 1 + 16);
    key.extend_from_slice(agent_id.as_bytes());
    key.push(0);
    key
}

/// Index entry of a message a stored agent answered (ids are time-ordered, so the
/// entries of one agent sort oldest first).
pub fn agent_message(tenant: &Tenant, agent_id: &str, id: MessageId) -> Vec<u8> {
    let mut key = agent_messages(tenant, agent_id);
    key.extend_from_slice(id.as_bytes());
    key
}

/// Prefix of the index entries of a run's sub-agent runs.
pub fn child_runs(tenant: &Tenant, parent: MessageId) -> Vec<u8> {
    message(tenant, parent)
}

/// Index entry of a sub-agent's run under its parent (ids are time-ordered, so one
/// parent's entries sort oldest first).
pub fn child_run(tenant: &Tenant, parent: MessageId, id: MessageId) -> Vec<u8> {
    let mut key = child_runs(tenant, parent);
    key.extend_from_slice(id.as_bytes());
    key
}

/// Prefix of a message's thoughts or events.
pub fn message_children(tenant: &Tenant, id: MessageId) -> Vec<u8> {
    message(tenant, id)
}

/// Key of thought `position` of a message.
pub fn thought(tenant: &Tenant, id: MessageId, position: u32) -> Vec<u8> {
    let mut key = message(tenant, id);
    key.extend_from_slice(&position.to_be_bytes());
    key
}

/// Key of event `seq` of a message.
pub fn event(tenant: &Tenant, id: MessageId, seq: u64) -> Vec<u8> {
    let mut key = message(tenant, id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Key of a file.
pub fn file(tenant: &Tenant, id: FileId) -> Vec<u8> {
    let mut key = tenant_prefix(tenant, 16);
    key.extend_from_slice(id.as_bytes());
    key
}

/// Key of a record named by a string within a tenant: an idempotency key or a provider.
pub fn named(tenant: &Tenant, key: &str) -> Vec<u8> {
    let mut out = tenant_prefix(tenant, key.len());
    out.extend_from_slice(key.as_bytes());
    out
}

/// The tenant a key starts with, and the rest of the key.
pub fn split_tenant(key: &[u8]) -> Option<(Tenant, &[u8])> {
    let split = key.iter().position(|b| *b == 0)?;
    let tenant = Tenant::from_stored(std::str::from_utf8(&key[..split]).ok()?)?;
    Some((tenant, key.get(split + 1..)?))
}

/// Splits a key written by [`message`] back into tenant and id.
pub fn parse_message(key: &[u8]) -> Option<(Tenant, MessageId)> {
    let (tenant, rest) = split_tenant(key)?;
    let bytes: [u8; 16] = rest.try_into().ok()?;
    Some((tenant, MessageId(uuid::Uuid::from_bytes(bytes))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_counters_sort_numerically() {
        let tenant = Tenant::default_tenant();
        let conv = ConversationId::new();
        let keys: Vec<_> = [1u64, 255, 256, 70_000]
            .iter()
            .map(|seq| conversation_message(&tenant, conv, *seq))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn tenants_do_not_share_prefixes() {
        let id = MessageId::new();
        let a = message(&Tenant::parse("a").unwrap(), id);
        let ab = message(&Tenant::parse("ab").unwrap(), id);
        assert!(!ab.starts_with(&a[..2]));
    }

    #[test]
    fn message_keys_round_trip() {
        let tenant = Tenant::parse("acme").unwrap();
        let id = MessageId::new();
        assert_eq!(parse_message(&message(&tenant, id)), Some((tenant, id)));
    }
}
