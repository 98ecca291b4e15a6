//! Counts what the replicas say to each other over NATS while a case runs: the messages
//! and bytes per run that size a NATS server for a load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;

/// The subjects every replica's messages fall under, with the default prefix.
const ALL_SUBJECTS: &str = "agent-runner.>";

/// A subscriber to every replica subject, counting from when it is made.
pub struct NatsCount {
    messages: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    reading: tokio::task::JoinHandle<()>,
}

impl NatsCount {
    /// Subscribes at `url`.
    pub async fn start(url: &str) -> anyhow::Result<Self> {
        let client = async_nats::connect(url).await?;
        let mut subscription = client.subscribe(ALL_SUBJECTS).await?;
        client.flush().await?;
        let (messages, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (counted, sized) = (Arc::clone(&messages), Arc::clone(&bytes));
        let reading = tokio::spawn(async move {
            let _client = client;
            while let Some(message) = subscription.next().await {
                counted.fetch_add(1, Ordering::Relaxed);
                sized.fetch_add(message.payload.len() as u64, Ordering::Relaxed);
            }
        });
        Ok(Self {
            messages,
            bytes,
            reading,
        })
    }

    /// Messages and payload bytes counted so far.
    pub fn counted(&self) -> (u64, u64) {
        (
            self.messages.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for NatsCount {
    fn drop(&mut self) {
        self.reading.abort();
    }
}
