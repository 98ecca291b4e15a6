//! Records a run's records, then announces them: every event that tells a client about a
//! record is emitted after the record, and the emitter commits both together before anyone
//! sees the event.

use crate::domain::{
    FileId, FileRecord, Message, MessageId, RunEvent, Tenant, Thought, ToolCallRecord,
    SHOWN_TEXT_LIMIT,
};
use crate::runner::live::{Emitter, Outbox};
use crate::store::{Record, Store, StoreError};
use crate::tools::{FileContent, ToolFile};

/// The thought as an event announces it: whole unless it would make the event too large
/// for clients (see [`Thought::fitted`]).
fn announced(thought: &Thought) -> Thought {
    thought.fitted(SHOWN_TEXT_LIMIT).into_owned()
}

/// The run's writer: its tenant's store and its event stream.
pub struct Recorder {
    store: Store,
    tenant: Tenant,
    emitter: Emitter,
}

impl Recorder {
    /// A recorder for one run of `tenant`.
    pub fn new(store: Store, tenant: Tenant, emitter: Emitter) -> Self {
        Self {
            store,
            tenant,
            emitter,
        }
    }

    /// Where the run's events wait for it to wait (see [`Outbox::drive`]).
    pub fn outbox(&self) -> Outbox {
        self.emitter.outbox()
    }

    /// The last `seq` of child run `child_id` that `message`'s stored events carry (0:
    /// none): where a run taken over goes on following that child.
    pub async fn last_child_seq(
        &self,
        message: MessageId,
        child_id: MessageId,
    ) -> Result<u64, StoreError> {
        self.emitter.settle().await;
        let events = self.store.list_events(&self.tenant, message, 0).await?;
        Ok(events
            .iter()
            .filter_map(|event| {
                let RunEvent::Child(child) = &event.event else {
                    return None;
                };
                (child.event.message_id == child_id).then_some(child.event.seq)
            })
            .max()
            .unwrap_or(0))
    }

    /// Keeps `command` for the run of `message` in the store, for whichever process goes on
    /// with it: an answer that reached this run as it was handed over.
    pub async fn keep_for_next_owner(
        &self,
        message: MessageId,
        command: &crate::domain::RunCommand,
    ) -> Result<(), StoreError> {
        self.store
            .send_command(&self.tenant, message, command)
            .await
            .map(|_| ())
    }

    /// The messages of `run`'s conversation placed after it that are still live: where
    /// the steers waiting to join it are.
    pub async fn waiting_steers(&self, run: &Message) -> Result<Vec<Message>, StoreError> {
        let live = self
            .store
            .live_before(&self.tenant, run.conversation_id, u64::MAX)
            .await?;
        let mut after = Vec::new();
        for id in live.into_iter().filter(|id| *id != run.id) {
            if let Some(message) = self.store.get_message(&self.tenant, id).await? {
                if message.seq > run.seq {
                    after.push(message);
                }
            }
        }
        Ok(after)
    }

    /// The `seq` the next event gets.
    pub fn next_seq(&self) -> u64 {
        self.emitter.next_seq()
    }

    /// Sends an event that announces no new record (a delta, a tool starting).
    pub fn announce(&mut self, event: RunEvent) {
        self.emitter.emit(event);
    }

    /// Sends an event to the run's live followers without storing it (see
    /// [`Emitter::flash`]).
    pub fn flash(&mut self, event: RunEvent) {
        self.emitter.flash(event);
    }

    /// Records the thought as it stands, then announces it.
    pub fn thought(&mut self, thought: &Thought) {
        self.save_thought(thought);
        self.announce_thought(thought);
    }

    /// Announces a thought already written.
    pub fn announce_thought(&mut self, thought: &Thought) {
        self.emitter
            .emit(RunEvent::Thought(Box::new(announced(thought))));
    }

    /// Records the thought without an event (its last state, at the run's end).
    pub fn save_thought(&self, thought: &Thought) {
        self.emitter.record(Record::Thought(thought.clone()));
    }

    /// Records the thought with many calls' results at once, then announces each call as
    /// finished.
    pub fn tools_finished(&mut self, thought: &Thought, calls: Vec<ToolCallRecord>) {
        self.save_thought(thought);
        for call in calls {
            self.emitter.emit(RunEvent::ToolFinished {
                thought_id: thought.id,
                position: thought.position,
                call: Box::new(call.fitted(SHOWN_TEXT_LIMIT)),
            });
        }
    }

    /// Stores the files a tool produced for `message` and announces each. Each is durable
    /// before its event is emitted: a file may be large, so it is not held for a burst.
    pub async fn files(
        &mut self,
        message: MessageId,
        files: &[ToolFile],
    ) -> Result<Vec<FileRecord>, StoreError> {
        let mut records = Vec::with_capacity(files.len());
        for file in files {
            let (bytes, url) = match &file.content {
                FileContent::Bytes(bytes) => (Some(bytes.as_slice()), String::new()),
                FileContent::Url(url) => (None, url.clone()),
            };
            let record = FileRecord {
                id: FileId::new(),
                message_id: message,
                name: file.name.clone(),
                mime_type: file.mime_type.clone(),
                size: bytes.map_or(0, |b| b.len() as u64),
                url,
                created_at: crate::domain::now(),
            };
            self.store.put_file(&self.tenant, &record, bytes).await?;
            self.emitter.emit(RunEvent::File(Box::new(record.clone())));
            records.push(record);
        }
        Ok(records)
    }

    /// A file of `message` (one a tool of this run produced) named by its id, as a `data:`
    /// URL, for a tool argument that takes a file; `None` for any other text.
    pub async fn file_data_url(&self, message: MessageId, id: &str) -> Option<String> {
        use base64::Engine as _;
        let id: FileId = id.trim().parse().ok()?;
        let (record, bytes) = self.store.get_file(&self.tenant, id).await.ok()??;
        if record.message_id != message || !record.url.is_empty() {
            return None;
        }
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        Some(format!("data:{};base64,{data}", record.mime_type))
    }

    /// Adds the run's LLM tokens to what its tenant used today, for `limits.tokens_per_day`,
    /// with the records of the run's end, whose event (`message`'s next) it goes with: the
    /// count lands once, however often that commit is tried.
    pub fn count_tokens(&self, message: MessageId, day: u32, tokens: u64) {
        if tokens > 0 {
            self.emitter.record(Record::TenantTokens {
                day,
                tokens,
                once: Some((message, self.next_seq())),
            });
        }
    }

    /// The thoughts of `message` as stored, once what the run recorded is committed.
    pub async fn thoughts(&self, message: MessageId) -> Result<Vec<Thought>, StoreError> {
        self.emitter.settle().await;
        self.store.all_thoughts(&self.tenant, message).await
    }

    /// Waits until everything recorded and emitted so far is committed (or the run was
    /// stopped for failing to commit it).
    pub async fn settle(&self) {
        self.emitter.settle().await;
    }

    /// Records the message as it stands.
    pub fn message(&self, message: &Message) {
        self.emitter.record(Record::Message(message.clone()));
    }

    /// While the store refuses the run's records, waits until they are committed or the
    /// run was stopped for failing to commit them; otherwise returns at once.
    pub async fn settle_if_failing(&self) {
        if self.emitter.failing() {
            self.emitter.settle().await;
        }
    }

    /// Whether some records could not be made durable: the store cannot write.
    pub fn events_failed(&self) -> bool {
        self.emitter.failed()
    }

    /// Waits until every emitted event is durable and published.
    pub async fn close(self) {
        self.emitter.close().await;
    }
}
