//! A write-ahead log of our own beside sled: what makes a write durable.
//!
//! Making a write durable through sled 0.34 (`Db::flush`) hands the log buffer to sled's
//! I/O pool, wakes all of its idle threads and waits on a condition variable: 200–400 µs
//! a flush on a busy two-core machine, four or five times per run, when the disk write
//! itself takes about 50 µs. So every write to a tree is also appended, in the order sled
//! applied it, to a buffer that the flush thread writes to a file of its own and syncs;
//! sled itself is flushed only now and then (a checkpoint), after which the log files
//! before it are deleted. At start-up the log is replayed into sled.
//!
//! Each record carries a sequence number, and applying it also writes that number into
//! sled. sled recovers a prefix of its own writes, so after a crash the number sled holds
//! says exactly which records it already has; replay applies only later ones. That keeps
//! recovery a prefix of the writes whichever of the two reached the disk further: sled (its
//! buffers are written when full) or the log.
//!
//! Records are synced as sled syncs its own log: on Linux `sync_file_range` over the bytes
//! written (about 50 µs here, against 300–500 µs for an `fdatasync` that also commits the
//! file's new size). That keeps every synced record through the process being killed at
//! any point; like sled, it does not flush the drive's own cache, so it promises no more
//! than sled did after a power loss. (Growing the file with zeros ahead, so that no size
//! needs committing, cost about 7% of throughput at 50 runs for that alone.)
//!
//! A record on disk is `len: u32, crc32: u32, seq: u64, ops…`, little-endian; an op is
//! `kind: u8, tree: u8, key_len: u32, key, [value_len: u32, value]`. Replay stops at the
//! first record that is cut short or does not match its checksum: it was never synced, so
//! no caller was told it was stored.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::StoreError;

/// Log bytes after which the flush thread checkpoints: replay at start-up reads at most
/// about this much.
pub const CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;

/// How old the oldest unsynced-to-sled log bytes may get before a checkpoint.
pub const CHECKPOINT_AGE: Duration = Duration::from_secs(10);

/// Key in sled's default tree holding the sequence number of the last record applied.
const APPLIED_KEY: &[u8] = b"\0wal-applied";

const HEADER_LEN: usize = 8;
const PUT: u8 = 1;
const REMOVE: u8 = 2;

/// The log's in-memory side: records not yet handed to the flush thread.
pub struct Log {
    pending: Mutex<Pending>,
    /// sled's default tree, where the last applied sequence number is kept.
    meta: sled::Tree,
}

struct Pending {
    bytes: Vec<u8>,
    next_seq: u64,
}

/// Appends one record's operations.
pub struct RecordWriter<'a> {
    bytes: &'a mut Vec<u8>,
    ops: u32,
}

impl RecordWriter<'_> {
    /// Logs that `key` of tree `tree` was set to `value`.
    pub fn put(&mut self, tree: u8, key: &[u8], value: &[u8]) {
        self.op(PUT, tree, key);
        push_bytes(self.bytes, value);
    }

    /// Logs that `key` of tree `tree` was removed.
    pub fn remove(&mut self, tree: u8, key: &[u8]) {
        self.op(REMOVE, tree, key);
    }

    fn op(&mut self, kind: u8, tree: u8, key: &[u8]) {
        self.bytes.push(kind);
        self.bytes.push(tree);
        push_bytes(self.bytes, key);
        self.ops += 1;
    }
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

impl Log {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f`, which applies writes to sled and tells each to the record writer it is
    /// given, under one lock: the log's order is the order sled applied the writes in, and
    /// the writes `f` makes form one record, which replay applies whole.
    pub fn write<T>(
        &self,
        f: impl FnOnce(&mut RecordWriter<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut pending = self.lock();
        let seq = pending.next_seq;
        let start = pending.bytes.len();
        pending.bytes.extend_from_slice(&[0; HEADER_LEN]);
        pending.bytes.extend_from_slice(&seq.to_le_bytes());
        let mut writer = RecordWriter {
            bytes: &mut pending.bytes,
            ops: 0,
        };
        // Writes sled applied before one failed are logged all the same.
        let result = f(&mut writer);
        if writer.ops == 0 {
            pending.bytes.truncate(start);
            return result;
        }
        seal_record(&mut pending.bytes[start..]);
        pending.next_seq += 1;
        self.meta.insert(APPLIED_KEY, &seq.to_be_bytes())?;
        result
    }

    /// Takes the records logged so far, for the flush thread to write.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.lock().bytes)
    }

    /// Puts back records whose write failed, ahead of those logged since.
    pub fn put_back(&self, mut bytes: Vec<u8>) {
        let mut pending = self.lock();
        bytes.extend_from_slice(&pending.bytes);
        pending.bytes = bytes;
    }

    /// Bytes logged and not yet taken.
    pub fn pending_len(&self) -> usize {
        self.lock().bytes.len()
    }
}

/// Fills in a record's length and checksum, once its operations are written.
fn seal_record(record: &mut [u8]) {
    let payload_len = u32::try_from(record.len() - HEADER_LEN).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(&record[HEADER_LEN..]);
    record[..4].copy_from_slice(&payload_len.to_le_bytes());
    record[4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// One operation read back from the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// `key` of `tree` set to `value`.
    Put {
        /// The tree's number.
        tree: u8,
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// `key` of `tree` removed.
    Remove {
        /// The tree's number.
        tree: u8,
        /// The key.
        key: &'a [u8],
    },
}

/// A record read back: its sequence number and operations.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its sequence number.
    pub seq: u64,
    /// What it wrote, in order.
    pub ops: Vec<Op<'a>>,
}

/// The whole records at the start of `bytes`, up to the first that is cut short or
/// damaged.
pub fn parse(mut bytes: &[u8]) -> Vec<Record<'_>> {
    let mut records = Vec::new();
    while let Some((record, rest)) = parse_record(bytes) {
        records.push(record);
        bytes = rest;
    }
    records
}

fn parse_record(bytes: &[u8]) -> Option<(Record<'_>, &[u8])> {
    let len = usize::try_from(read_u32(bytes, 0)?).ok()?;
    let crc = read_u32(bytes, 4)?;
    let payload = bytes.get(HEADER_LEN..HEADER_LEN.checked_add(len)?)?;
    if len < 8 || crc32fast::hash(payload) != crc {
        return None;
    }
    let seq = u64::from_le_bytes(payload[..8].try_into().ok()?);
    let mut ops = Vec::new();
    let mut rest = &payload[8..];
    while !rest.is_empty() {
        let (op, after) = parse_op(rest)?;
        ops.push(op);
        rest = after;
    }
    Some((Record { seq, ops }, &bytes[HEADER_LEN + len..]))
}

fn parse_op(bytes: &[u8]) -> Option<(Op<'_>, &[u8])> {
    let (&kind, rest) = bytes.split_first()?;
    let (&tree, rest) = rest.split_first()?;
    let (key, rest) = take_bytes(rest)?;
    match kind {
        PUT => {
            let (value, rest) = take_bytes(rest)?;
            Some((Op::Put { tree, key, value }, rest))
        }
        REMOVE => Some((Op::Remove { tree, key }, rest)),
        _ => None,
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes(field.try_into().ok()?))
}

fn take_bytes(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = usize::try_from(read_u32(bytes, 0)?).ok()?;
    let end = 4usize.checked_add(len)?;
    Some((bytes.get(4..end)?, &bytes[end..]))
}

/// The log's files, written by the flush thread alone.
pub struct LogFiles {
    dir: PathBuf,
    number: u64,
    file: File,
    len: u64,
    /// When the current file got its first bytes since the last checkpoint.
    dirty_since: Option<Instant>,
}

fn file_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.log"))
}

/// The log files in `dir`, oldest first.
fn log_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(".log"))
            .and_then(|number| number.parse::<u64>().ok());
        if let Some(number) = number {
            files.push((number, path));
        }
    }
    files.sort();
    Ok(files)
}

/// Writes `len` bytes at `offset` to the disk and waits for them (not for the file's new
/// size; see the module's notes).
#[cfg(target_os = "linux")]
fn sync_range(file: &File, offset: u64, len: usize) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let too_large = || io::Error::other("write-ahead log range too large");
    let offset = i64::try_from(offset).map_err(|_| too_large())?;
    let len = i64::try_from(len).map_err(|_| too_large())?;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: the descriptor stays open for the call (we hold `file`), and the call
    // touches no memory of ours.
    let ret = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if ret == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOSYS) {
        return file.sync_data();
    }
    Err(err)
}

#[cfg(not(target_os = "linux"))]
fn sync_range(file: &File, _offset: u64, _len: usize) -> io::Result<()> {
    file.sync_data()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn create_file(dir: &Path, number: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file_path(dir, number))?;
    sync_dir(dir)?;
    Ok(file)
}

impl LogFiles {
    /// Writes `bytes` at the end of the current file and syncs them. After a failure
    /// nothing counts as written: the next call writes at the same place again.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.len)?;
        sync_range(&self.file, self.len, bytes.len())?;
        self.len += bytes.len() as u64;
        self.dirty_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Whether the log has grown or aged enough for a checkpoint.
    pub fn wants_checkpoint(&self) -> bool {
        self.len >= CHECKPOINT_BYTES
            || self
                .dirty_since
                .is_some_and(|since| since.elapsed() >= CHECKPOINT_AGE)
    }

    /// Whether the current file holds anything.
    pub fn is_dirty(&self) -> bool {
        self.len > 0
    }

    /// Makes everything sled applied so far durable in sled itself, then deletes the log
    /// files that held it. New records go to a new file from the start, so a crash in the
    /// middle leaves files replay reads in order.
    pub fn checkpoint(&mut self, db: &sled::Db) -> Result<(), StoreError> {
        self.file = create_file(&self.dir, self.number + 1).map_err(io_error)?;
        self.number += 1;
        self.len = 0;
        self.dirty_since = None;
        db.flush()?;
        // Every file before the new one: an earlier checkpoint that failed left its own.
        for (number, path) in log_files(&self.dir).map_err(io_error)? {
            if number < self.number {
                fs::remove_file(path).map_err(io_error)?;
            }
        }
        Ok(())
    }
}

/// The number by which the log names tree `name` of `trees`: its place there, from 1.
pub fn tree_number(trees: &[&str], name: &str) -> Result<u8, StoreError> {
    trees
        .iter()
        .position(|tree| *tree == name)
        .and_then(|place| u8::try_from(place + 1).ok())
        .ok_or_else(|| StoreError::Log(format!("no number for tree {name}")))
}

/// Opens the log in `dir` for `db`: replays what sled lacks of it into the trees it names
/// (by their number in `trees`), makes sled durable, deletes the replayed files and starts
/// a new one.
pub fn open(dir: &Path, db: &sled::Db, trees: &[&str]) -> Result<(Log, LogFiles), StoreError> {
    fs::create_dir_all(dir).map_err(io_error)?;
    let applied = db
        .get(APPLIED_KEY)?
        .and_then(|value| <[u8; 8]>::try_from(value.as_ref()).ok())
        .map_or(0, u64::from_be_bytes);
    let files = log_files(dir).map_err(io_error)?;
    let mut last = applied;
    for (_, path) in &files {
        let bytes = fs::read(path).map_err(io_error)?;
        for record in parse(&bytes) {
            if record.seq > applied {
                apply(&record, db, trees)?;
                last = last.max(record.seq);
            }
        }
    }
    db.insert(APPLIED_KEY, &last.to_be_bytes())?;
    db.flush()?;
    for (_, path) in &files {
        fs::remove_file(path).map_err(io_error)?;
    }
    let number = files.last().map_or(1, |(number, _)| number + 1);
    let file = create_file(dir, number).map_err(io_error)?;
    let log = Log {
        pending: Mutex::new(Pending {
            bytes: Vec::new(),
            next_seq: last + 1,
        }),
        meta: (**db).clone(),
    };
    let files = LogFiles {
        dir: dir.to_path_buf(),
        number,
        file,
        len: 0,
        dirty_since: None,
    };
    Ok((log, files))
}

fn io_error(err: io::Error) -> StoreError {
    StoreError::Log(err.to_string())
}

fn apply(record: &Record<'_>, db: &sled::Db, trees: &[&str]) -> Result<(), StoreError> {
    let tree = |number: u8| -> Result<sled::Tree, StoreError> {
        let name = usize::from(number)
            .checked_sub(1)
            .and_then(|place| trees.get(place))
            .ok_or_else(|| StoreError::Log(format!("a record names tree {number}")))?;
        Ok(db.open_tree(name)?)
    };
    for op in &record.ops {
        match op {
            Op::Put {
                tree: id,
                key,
                value,
            } => {
                tree(*id)?.insert(key, *value)?;
            }
            Op::Remove { tree: id, key } => {
                tree(*id)?.remove(key)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> Log {
        let db = sled::Config::new().temporary(true).open().unwrap();
        Log {
            pending: Mutex::new(Pending {
                bytes: Vec::new(),
                next_seq: 7,
            }),
            meta: (*db).clone(),
        }
    }

    fn write_two(log: &Log) {
        log.write(|w| {
            w.put(3, b"k1", b"v1");
            w.remove(4, b"k2");
            Ok(())
        })
        .unwrap();
        log.write(|w| {
            w.put(5, b"k3", &[]);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn records_read_back_as_written_in_order() {
        let log = log();
        write_two(&log);
        let bytes = log.take();
        let records = parse(&bytes);
        assert_eq!(
            records,
            vec![
                Record {
                    seq: 7,
                    ops: vec![
                        Op::Put {
                            tree: 3,
                            key: b"k1",
                            value: b"v1"
                        },
                        Op::Remove {
                            tree: 4,
                            key: b"k2"
                        },
                    ],
                },
                Record {
                    seq: 8,
                    ops: vec![Op::Put {
                        tree: 5,
                        key: b"k3",
                        value: b""
                    }],
                },
            ]
        );
        assert_eq!(log.pending_len(), 0, "taking empties the buffer");
    }

    /// A write that logs nothing takes no sequence number and leaves no bytes.
    #[test]
    fn an_empty_record_is_not_logged() {
        let log = log();
        log.write(|_| Ok(())).unwrap();
        assert_eq!(log.pending_len(), 0);
        write_two(&log);
        assert_eq!(parse(&log.take())[0].seq, 7);
    }

    /// A failed write to sled logs nothing; writes applied before it in the same record
    /// are logged, since sled has them.
    #[test]
    fn a_failed_write_logs_what_was_applied_before_it() {
        let log = log();
        let failed: Result<(), _> = log.write(|_| Err(StoreError::Flush("no".into())));
        assert!(failed.is_err());
        assert_eq!(log.pending_len(), 0);

        let failed: Result<(), _> = log.write(|w| {
            w.put(1, b"applied", b"v");
            Err(StoreError::Flush("the second failed".into()))
        });
        assert!(failed.is_err());
        let bytes = log.take();
        let records = parse(&bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].ops.len(), 1);
    }

    /// Replay stops at a record cut short or damaged: it was never synced whole.
    #[test]
    fn parsing_stops_at_a_torn_or_damaged_record() {
        let log = log();
        write_two(&log);
        let bytes = log.take();
        let first_len = HEADER_LEN + read_u32(&bytes, 0).unwrap() as usize;
        for cut in first_len..bytes.len() {
            assert_eq!(parse(&bytes[..cut]).len(), 1, "cut at {cut}");
        }
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        assert_eq!(parse(&damaged).len(), 1);
        let mut zeros = bytes[..first_len].to_vec();
        zeros.extend_from_slice(&[0; 64]);
        assert_eq!(parse(&zeros).len(), 1, "a zeroed tail ends the log");
    }

    /// Records whose write failed go back ahead of later ones, so the file keeps sled's
    /// order.
    #[test]
    fn put_back_records_stay_ahead_of_later_ones() {
        let log = log();
        write_two(&log);
        let taken = log.take();
        log.write(|w| {
            w.put(1, b"later", b"x");
            Ok(())
        })
        .unwrap();
        log.put_back(taken);
        let seqs: Vec<u64> = parse(&log.take()).iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![7, 8, 9]);
    }

    fn copy_dir(from: &Path, to: &Path, skip: Option<&str>) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if skip.is_some_and(|skip| name == skip) {
                continue;
            }
            let target = to.join(&name);
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target, None);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    /// What a process killed at once leaves: the files as they are now, page cache
    /// included, with no flush of sled and no clean stop.
    fn crash_copy(from: &Path, skip: Option<&str>) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        copy_dir(from, to.path(), skip);
        to
    }

    fn open_store(dir: &Path) -> super::super::Store {
        let key = super::super::SecretKey::generate();
        super::super::Store::open_with_cache(dir, 1 << 20, &key).unwrap()
    }

    /// Writes of every kind (a transaction, an insert, an overwrite, a removal) that a
    /// flush made durable are all there after a crash, though sled itself was not flushed
    /// after the transaction; without the log's files sled alone lacks the later writes, so
    /// the log is what kept them.
    #[tokio::test]
    async fn what_a_flush_made_durable_survives_a_crash() {
        use crate::domain::{IdempotencyRecord, MessageStatus, Tenant};
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let tenant = Tenant::default_tenant();
        let conversation = super::super::test_records::conversation(&tenant);
        let second = super::super::test_records::running_message(conversation.id, 2);
        let key_record = IdempotencyRecord {
            message_id: second.id,
            fingerprint: "f".into(),
        };
        store
            .insert_message(
                &tenant,
                Some(&conversation),
                &second,
                Some(("key", &key_record)),
            )
            .unwrap();
        let mut first = super::super::test_records::running_message(conversation.id, 1);
        store.insert_message(&tenant, None, &first, None).unwrap();
        first.status = MessageStatus::Completed;
        first.answer = "the answer".into();
        store.update_message(&tenant, &first).unwrap();
        store.flush().await.unwrap();

        let crashed = crash_copy(dir.path(), None);
        let without_log = crash_copy(dir.path(), Some(super::super::WAL_DIR));
        drop(store);

        let bare = open_store(without_log.path());
        assert!(
            bare.get_message(&tenant, first.id).unwrap().is_none(),
            "sled alone had not stored the writes"
        );
        drop(bare);

        let recovered = open_store(crashed.path());
        let got = recovered.get_message(&tenant, first.id).unwrap().unwrap();
        assert_eq!(got.status, MessageStatus::Completed);
        assert_eq!(got.answer, "the answer");
        assert_eq!(
            recovered.interrupt_unfinished().unwrap(),
            1,
            "the second message is running; the first's marker was removed"
        );
        assert_eq!(
            recovered.get_idempotency(&tenant, "key").unwrap(),
            Some(key_record)
        );
        assert!(recovered
            .get_conversation(&tenant, conversation.id)
            .unwrap()
            .is_some());
    }

    /// A transaction (a run with an idempotency key) goes to the log as one record with
    /// all its writes, so replay never applies part of it.
    #[test]
    fn a_transaction_is_logged_as_one_record() {
        use crate::domain::{IdempotencyRecord, Tenant};
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let log = store.log.clone().unwrap();
        log.take();
        let tenant = Tenant::default_tenant();
        let conversation = super::super::test_records::conversation(&tenant);
        let message = super::super::test_records::running_message(conversation.id, 1);
        let record = IdempotencyRecord {
            message_id: message.id,
            fingerprint: "f".into(),
        };
        store
            .insert_message(&tenant, Some(&conversation), &message, Some(("k", &record)))
            .unwrap();
        let bytes = log.take();
        let records = parse(&bytes);
        assert_eq!(records.len(), 1);
        let trees: Vec<u8> = records[0]
            .ops
            .iter()
            .map(|op| match op {
                Op::Put { tree, .. } | Op::Remove { tree, .. } => *tree,
            })
            .collect();
        let expected = vec![
            store.idempotency.id(),
            store.conversations.id(),
            store.messages.id(),
            store.conversation_messages.id(),
            store.running.id(),
        ];
        assert_eq!(trees, expected);

        // A second request with the key writes nothing, and logs nothing.
        let other = super::super::test_records::running_message(conversation.id, 2);
        let taken = store
            .insert_message(&tenant, None, &other, Some(("k", &record)))
            .unwrap();
        assert!(matches!(taken, super::super::Inserted::KeyTaken(_)));
        assert_eq!(log.pending_len(), 0);
    }

    /// Replay brings sled up to date and starts a new log: a second crash right after
    /// start-up, with nothing new written, loses nothing either.
    #[tokio::test]
    async fn a_replayed_log_is_durable_in_sled_before_its_files_go() {
        use crate::domain::Tenant;
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let tenant = Tenant::default_tenant();
        let conversation = super::super::test_records::conversation(&tenant);
        let message = super::super::test_records::running_message(conversation.id, 1);
        store
            .insert_message(&tenant, Some(&conversation), &message, None)
            .unwrap();
        store.flush().await.unwrap();
        let crashed = crash_copy(dir.path(), None);
        drop(store);

        let recovered = open_store(crashed.path());
        let again = crash_copy(crashed.path(), None);
        drop(recovered);
        let files = log_files(&again.path().join(super::super::WAL_DIR)).unwrap();
        assert_eq!(
            files.len(),
            1,
            "the replayed file is gone, a new one started"
        );
        assert_eq!(fs::metadata(&files[0].1).unwrap().len(), 0);
        let reopened = open_store(again.path());
        assert!(reopened.get_message(&tenant, message.id).unwrap().is_some());
    }

    /// A clean stop checkpoints: the next start has nothing to replay.
    #[tokio::test]
    async fn a_clean_stop_leaves_no_log_to_replay() {
        use crate::domain::Tenant;
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let tenant = Tenant::default_tenant();
        let conversation = super::super::test_records::conversation(&tenant);
        let message = super::super::test_records::running_message(conversation.id, 1);
        store
            .insert_message(&tenant, Some(&conversation), &message, None)
            .unwrap();
        drop(store);
        let wal = dir.path().join(super::super::WAL_DIR);
        let sizes: Vec<u64> = log_files(&wal)
            .unwrap()
            .iter()
            .map(|(_, path)| fs::metadata(path).unwrap().len())
            .collect();
        assert_eq!(sizes, vec![0]);
        let reopened = open_store(dir.path());
        assert!(reopened.get_message(&tenant, message.id).unwrap().is_some());
    }

    fn file_of(records: &[(u64, &[u8], &[u8])]) -> Vec<u8> {
        let log = log();
        let mut bytes = Vec::new();
        for (seq, key, value) in records {
            log.lock().next_seq = *seq;
            log.write(|w| {
                w.put(1, key, value);
                Ok(())
            })
            .unwrap();
            bytes.extend(log.take());
        }
        bytes
    }

    /// Replay reads the files in order and applies only the records sled lacks: those
    /// after the last sequence number sled stored.
    #[test]
    fn replay_applies_only_what_sled_lacks_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("wal");
        fs::create_dir_all(&wal).unwrap();
        fs::write(
            file_path(&wal, 3),
            file_of(&[(4, b"a", b"old"), (5, b"b", b"1")]),
        )
        .unwrap();
        fs::write(
            file_path(&wal, 4),
            file_of(&[(6, b"a", b"new"), (7, b"c", b"1")]),
        )
        .unwrap();
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        tree.insert(b"b", b"sled's own").unwrap();
        db.insert(APPLIED_KEY, &5u64.to_be_bytes()).unwrap();

        let (log, files) = open(&wal, &db, &["t"]).unwrap();
        assert_eq!(tree.get(b"a").unwrap().unwrap(), b"new");
        assert_eq!(
            tree.get(b"b").unwrap().unwrap(),
            b"sled's own",
            "record 5 was already in sled and later writes of sled are kept"
        );
        assert_eq!(tree.get(b"c").unwrap().unwrap(), b"1");
        assert_eq!(log.lock().next_seq, 8);
        assert_eq!(files.number, 5);
        let left: Vec<u64> = log_files(&wal).unwrap().iter().map(|(n, _)| *n).collect();
        assert_eq!(left, vec![5]);
    }

    /// A checkpoint makes sled hold everything on its own, then drops every earlier log
    /// file, a leftover of a failed checkpoint included; records go on into the new file.
    #[test]
    fn a_checkpoint_makes_sled_durable_and_drops_earlier_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .flush_every_ms(None)
            .open()
            .unwrap();
        let wal = dir.path().join("wal");
        let (log, mut files) = open(&wal, &db, &["t"]).unwrap();
        let tree = db.open_tree("t").unwrap();
        let put = |key: &'static [u8]| {
            log.write(|w| {
                tree.insert(key, b"v".as_slice())?;
                w.put(1, key, b"v");
                Ok(())
            })
            .unwrap();
        };
        put(b"before");
        files.append(&log.take()).unwrap();
        fs::write(file_path(&wal, 0), b"left by a failed checkpoint").unwrap();

        files.checkpoint(&db).unwrap();
        let left: Vec<u64> = log_files(&wal).unwrap().iter().map(|(n, _)| *n).collect();
        assert_eq!(left, vec![files.number]);
        assert!(!files.is_dirty());

        let copy = crash_copy(dir.path(), Some("wal"));
        let sled_alone = sled::Config::new()
            .path(copy.path().join("db"))
            .open()
            .unwrap();
        assert!(sled_alone
            .open_tree("t")
            .unwrap()
            .get(b"before")
            .unwrap()
            .is_some());

        put(b"after");
        files.append(&log.take()).unwrap();
        let bytes = fs::read(file_path(&wal, files.number)).unwrap();
        assert_eq!(parse(&bytes).len(), 1, "the new file holds what came after");
    }
}
