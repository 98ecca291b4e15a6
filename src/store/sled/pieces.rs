//! Large values, stored in pieces.
//!
//! sled writes anything larger than a quarter of its segment (about 128 KiB) as a separate
//! blob, and its page cache then counts only the blob's pointer: such a node is never paged
//! out, so memory grows with every large answer written and does not come back. This holds
//! for a whole leaf node as well, and sled splits a leaf only past 16 entries. So a value
//! larger than [`PIECE`] is written as pieces of at most that size in a tree of their own,
//! and its record holds a small header instead: a full leaf then stays far below the blob
//! threshold, and the cache counts and pages out everything written.

use sled::{IVec, Tree};

use crate::store::error::StoreError;

/// The largest value stored whole: sixteen of them (a full leaf) stay well below sled's
/// blob threshold.
pub const PIECE: usize = 4 * 1024;

/// How a record stored in pieces begins (JSON records begin with `{`; raw file bytes are
/// told apart by the whole marker and the exact length), followed by the piece count.
const HEADER: &[u8; 7] = b"\x01pieces";

/// Which record tree a piece belongs to, so records of different trees with equal keys
/// keep their pieces apart.
#[derive(Debug, Clone, Copy)]
pub enum Owner {
    /// A thought record.
    Thought = 1,
    /// A batch of events.
    Events = 2,
    /// A message's answer.
    Answer = 3,
    /// A file's bytes.
    File = 4,
    /// What a run was started with.
    Spec = 5,
}

fn prefix(owner: Owner, key: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(key.len() + 2);
    prefix.push(owner as u8);
    prefix.extend_from_slice(key);
    prefix.push(0xff);
    prefix
}

/// Writes `value` under `key` of `tree`: whole when small, else in pieces with a header.
/// Pieces a longer earlier value left behind are removed; the common case (a new key, or a
/// value that grew) costs no extra read, since the insert returns what it replaced.
pub fn put(
    tree: &Tree,
    pieces: &Tree,
    owner: Owner,
    key: &[u8],
    value: &[u8],
) -> Result<(), StoreError> {
    let count = if value.len() <= PIECE {
        0
    } else {
        let head = prefix(owner, key);
        let mut count: u32 = 0;
        for piece in value.chunks(PIECE) {
            pieces.insert(piece_key(&head, count), piece)?;
            count += 1;
        }
        count
    };
    let replaced = if count == 0 {
        tree.insert(key, value)?
    } else {
        let mut header = HEADER.to_vec();
        header.extend_from_slice(&count.to_be_bytes());
        tree.insert(key, header)?
    };
    let before = replaced.as_deref().and_then(piece_count).unwrap_or(0);
    if before > count {
        let head = prefix(owner, key);
        for stale in count..before {
            pieces.remove(piece_key(&head, stale))?;
        }
    }
    Ok(())
}

fn piece_key(head: &[u8], index: u32) -> Vec<u8> {
    let mut key = head.to_vec();
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The number of pieces a stored header announces; `None` for a value stored whole.
fn piece_count(stored: &[u8]) -> Option<u32> {
    let count = stored.strip_prefix(HEADER.as_slice())?;
    <[u8; 4]>::try_from(count).ok().map(u32::from_be_bytes)
}

/// The whole value of a record read from its tree: itself, or its pieces joined.
pub fn join(pieces: &Tree, owner: Owner, key: &[u8], stored: IVec) -> Result<IVec, StoreError> {
    if piece_count(&stored).is_none() {
        return Ok(stored);
    }
    let mut value = Vec::new();
    for piece in pieces.scan_prefix(prefix(owner, key)) {
        value.extend_from_slice(&piece?.1);
    }
    Ok(value.into())
}

/// Removes the pieces of `key`, if it has any.
pub fn remove(pieces: &Tree, owner: Owner, key: &[u8]) -> Result<(), StoreError> {
    for piece in pieces.scan_prefix(prefix(owner, key)).keys() {
        pieces.remove(piece?)?;
    }
    Ok(())
}

/// Removes the pieces of every key starting with `key_prefix`.
pub fn remove_under(pieces: &Tree, owner: Owner, key_prefix: &[u8]) -> Result<(), StoreError> {
    let mut head = vec![owner as u8];
    head.extend_from_slice(key_prefix);
    for piece in pieces.scan_prefix(head).keys() {
        pieces.remove(piece?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_values_round_trip_in_pieces_and_small_ones_whole() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let (tree, pieces) = (db.open_tree("t").unwrap(), db.open_tree("p").unwrap());
        let big: Vec<u8> = (0..PIECE * 3 + 17).map(|i| (i % 251) as u8).collect();
        put(&tree, &pieces, Owner::Events, b"k", &big).unwrap();
        assert_eq!(pieces.len(), 4);
        assert_eq!(tree.get(b"k").unwrap().unwrap().len(), 11);
        let stored = tree.get(b"k").unwrap().unwrap();
        assert_eq!(
            join(&pieces, Owner::Events, b"k", stored).unwrap().as_ref(),
            &big[..]
        );

        put(&tree, &pieces, Owner::Events, b"k", b"{\"small\":1}").unwrap();
        assert_eq!(pieces.len(), 0, "an overwrite drops the old pieces");
        let stored = tree.get(b"k").unwrap().unwrap();
        assert_eq!(
            join(&pieces, Owner::Events, b"k", stored).unwrap().as_ref(),
            b"{\"small\":1}"
        );

        put(&tree, &pieces, Owner::Thought, b"m1", &big).unwrap();
        put(&tree, &pieces, Owner::Thought, b"m2", &big).unwrap();
        remove_under(&pieces, Owner::Thought, b"m").unwrap();
        assert_eq!(pieces.len(), 0);
    }
}
