//! Group commit: one thread makes writes durable for every caller waiting at the time.
//!
//! sled 0.34's `flush_async` can deadlock when called concurrently (sled issue #1308, fixed
//! only on its unreleased main branch), and a blocking `flush` per caller would tie up a
//! thread each. So callers queue a request; the thread takes every queued request, runs one
//! `flush`, and answers them all. Under load one fsync covers many runs' records.
//!
//! The thread also tells whether writes are reaching the disk: a failed flush (a full
//! disk, say) marks the store unwritable until a later flush succeeds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::StoreError;

type Reply = oneshot::Sender<Result<(), String>>;

/// What the flush thread shares with the handles.
struct Shared {
    /// Told how long each flush took (metrics); set once.
    observer: OnceLock<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Whether the last flush succeeded.
    writable: watch::Sender<bool>,
    /// Makes flushes fail, as a full disk would; for tests.
    fail: AtomicBool,
}

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
    shared: Arc<Shared>,
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
        let shared = Arc::new(Shared {
            observer: OnceLock::new(),
            writable: watch::Sender::new(true),
            fail: AtomicBool::new(false),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("store-flush".to_owned())
            .spawn(move || run(&db, &queue, &thread_shared))
            .map_err(|err| StoreError::Flush(format!("cannot start the flush thread: {err}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                requests: Some(requests),
                thread: Some(thread),
                shared,
            }),
        })
    }

    /// Has `observe` told the duration of every later flush; only the first call counts.
    pub fn observe(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        let _ = self.inner.shared.observer.set(observe);
    }

    /// Follows whether writes reach the disk: `false` after a failed flush, `true` again
    /// after one that succeeded.
    pub fn writable(&self) -> watch::Receiver<bool> {
        self.inner.shared.writable.subscribe()
    }

    /// Makes every flush fail (`true`) or work again (`false`), as a full disk would.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn fail(&self, fail: bool) {
        self.inner.shared.fail.store(fail, Ordering::SeqCst);
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

fn run(db: &sled::Db, queue: &mpsc::Receiver<Reply>, shared: &Shared) {
    while let Ok(first) = queue.recv() {
        let mut waiting = vec![first];
        waiting.extend(queue.try_iter());
        let started = Instant::now();
        let result = if shared.fail.load(Ordering::SeqCst) {
            Err("no space left on device (simulated)".to_owned())
        } else {
            db.flush().map(drop).map_err(|err| err.to_string())
        };
        if let Some(observe) = shared.observer.get() {
            observe(started.elapsed());
        }
        shared.writable.send_if_modified(|writable| {
            let changed = *writable != result.is_ok();
            *writable = result.is_ok();
            changed
        });
        for reply in waiting {
            let _ = reply.send(result.clone());
        }
    }
}
