//! Group commit: one thread makes writes durable for every caller waiting at the time.
//!
//! sled 0.34's `flush_async` can deadlock when called concurrently (sled issue #1308, fixed
//! only on its unreleased main branch), and a blocking `flush` per caller would tie up a
//! thread each. So callers queue a request; the thread takes every queued request, runs one
//! `flush`, and answers them all. Under load one fsync covers many runs' records.

use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::StoreError;

type Reply = oneshot::Sender<Result<(), String>>;

/// Told how long each flush took (metrics); set once, read by the flush thread.
pub type Observer = Arc<OnceLock<Box<dyn Fn(Duration) + Send + Sync>>>;

/// Handle to the flushing thread. When the last handle is dropped the thread is stopped
/// and joined, so the database (and its file lock) is released before the drop returns and
/// the same directory can be opened again at once.
#[derive(Clone)]
pub struct Flusher {
    inner: Arc<Inner>,
}

struct Inner {
    requests: Option<mpsc::Sender<Reply>>,
    thread: Option<thread::JoinHandle<()>>,
    observer: Observer,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Flusher {
    /// Starts the thread for `db`.
    pub fn start(db: sled::Db) -> Result<Self, StoreError> {
        let (requests, queue) = mpsc::channel::<Reply>();
        let observer = Observer::default();
        let observed = Arc::clone(&observer);
        let thread = thread::Builder::new()
            .name("store-flush".to_owned())
            .spawn(move || run(&db, &queue, &observed))
            .map_err(|err| StoreError::Flush(format!("cannot start the flush thread: {err}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                requests: Some(requests),
                thread: Some(thread),
                observer,
            }),
        })
    }

    /// Has `observe` told the duration of every later flush; only the first call counts.
    pub fn observe(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        let _ = self.inner.observer.set(observe);
    }

    /// Waits until every write made before the call is durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let stopped = || StoreError::Flush("the flush thread has stopped".to_owned());
        let (reply, done) = oneshot::channel();
        let requests = self.inner.requests.as_ref().ok_or_else(stopped)?;
        requests.send(reply).map_err(|_| stopped())?;
        done.await
            .map_err(|_| stopped())?
            .map_err(StoreError::Flush)
    }
}

fn run(db: &sled::Db, queue: &mpsc::Receiver<Reply>, observer: &Observer) {
    while let Ok(first) = queue.recv() {
        let mut waiting = vec![first];
        waiting.extend(queue.try_iter());
        let started = Instant::now();
        let result = db.flush().map(drop).map_err(|err| err.to_string());
        if let Some(observe) = observer.get() {
            observe(started.elapsed());
        }
        for reply in waiting {
            let _ = reply.send(result.clone());
        }
    }
}
