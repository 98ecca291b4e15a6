//! Group commit: one thread makes writes durable for every caller waiting at the time.
//!
//! sled 0.34's `flush_async` can deadlock when called concurrently (sled issue #1308, fixed
//! only on its unreleased main branch), and a blocking `flush` per caller would tie up a
//! thread each. So callers queue a request; the thread takes every queued request, runs one
//! `flush`, and answers them all. Under load one fsync covers many runs' records: while
//! several writers are counted, the thread waits up to [`LINGER`] for their requests before
//! it flushes, since flushing costs the same for one run's records as for fifty's. Writers
//! are the runs in progress, learned from what they commit: a run counts from its first
//! burst until one ends its message, and not while its message waits on its caller (which
//! may take minutes). A run not heard of for [`FORGOTTEN`] is not counted either.
//!
//! The thread also tells whether writes are reaching the disk: a failed flush (a full
//! disk, say) marks the store unwritable until a later flush succeeds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::store::error::StoreError;

type Reply = oneshot::Sender<Result<(), String>>;

/// How long a flush waits for other writers' requests before it starts.
const LINGER: Duration = Duration::from_millis(1);

/// How often a lingering flush looks for the other writers' requests.
const GLANCE: Duration = Duration::from_micros(200);

/// A run that committed nothing for this long is no longer counted (its task is gone).
const FORGOTTEN: Duration = Duration::from_secs(30);

/// What a run's commit says about its next ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writing {
    /// More will come soon.
    Active,
    /// It waits on its caller: nothing may come for minutes.
    Idle,
    /// Its message ended: nothing more comes.
    Done,
}

/// The runs counted as writers, with when each last committed.
struct Activity {
    runs: HashMap<u128, Instant>,
    swept: Instant,
}

/// What the flush thread shares with the handles.
struct Shared {
    /// Told how long each flush took (metrics); set once.
    observer: OnceLock<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Whether the last flush succeeded.
    writable: watch::Sender<bool>,
    /// Makes flushes fail, as a full disk would; for tests.
    fail: AtomicBool,
    /// Writers seen lately: how many requests a flush may wait for.
    writers: AtomicUsize,
    activity: Mutex<Activity>,
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
}

/// What outlives one database handle: whether writes reach the disk, the writers counted,
/// the flush observer. A reopened database gets a new flush thread over the same state, so
/// whoever follows writability (health, admission) keeps following it.
#[derive(Clone)]
pub struct FlushState {
    shared: Arc<Shared>,
}

impl Default for FlushState {
    fn default() -> Self {
        Self {
            shared: Arc::new(Shared {
                observer: OnceLock::new(),
                writable: watch::Sender::new(true),
                fail: AtomicBool::new(false),
                writers: AtomicUsize::new(0),
                activity: Mutex::new(Activity {
                    runs: HashMap::new(),
                    swept: Instant::now(),
                }),
            }),
        }
    }
}

impl FlushState {
    /// Has `observe` told the duration of every later flush; only the first call counts.
    pub fn observe(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        let _ = self.shared.observer.set(observe);
    }

    /// Follows whether writes reach the disk: `false` after a failed flush, `true` again
    /// after one that succeeded.
    pub fn writable(&self) -> watch::Receiver<bool> {
        self.shared.writable.subscribe()
    }

    /// Marks the store unwritable: a write failed before any flush could (sled refuses
    /// every write once it met an I/O error). A later successful flush marks it writable.
    pub fn mark_unwritable(&self) {
        self.shared
            .writable
            .send_if_modified(|writable| std::mem::replace(writable, false));
    }

    /// Makes every flush fail (`true`) or work again (`false`), as a full disk would.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn fail(&self, fail: bool) {
        self.shared.fail.store(fail, Ordering::SeqCst);
    }

    /// Notes what the run `writer` just committed: flushes wait for an active run's next
    /// request, and not for one that is idle or done.
    pub fn note_writer(&self, writer: u128, writing: Writing) {
        let mut activity = self
            .shared
            .activity
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match writing {
            Writing::Active => {
                activity.runs.insert(writer, now);
            }
            Writing::Idle | Writing::Done => {
                activity.runs.remove(&writer);
            }
        }
        if now.duration_since(activity.swept) > Duration::from_secs(1) {
            activity
                .runs
                .retain(|_, last| now.duration_since(*last) < FORGOTTEN);
            activity.swept = now;
        }
        let writers = activity.runs.len();
        self.shared.writers.store(writers, Ordering::Relaxed);
    }
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
    /// Starts the thread for `db`, reporting into `state`.
    pub fn start(db: sled::Db, state: &FlushState) -> Result<Self, StoreError> {
        let (requests, queue) = mpsc::channel::<Reply>();
        let thread_shared = Arc::clone(&state.shared);
        let thread = thread::Builder::new()
            .name("store-flush".to_owned())
            .spawn(move || run(&db, &queue, &thread_shared))
            .map_err(|err| {
                StoreError::NotDurable(format!("cannot start the flush thread: {err}"))
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                requests: Some(requests),
                thread: Some(thread),
            }),
        })
    }

    /// Waits until every write made before the call is durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let stopped = || StoreError::NotDurable("the flush thread has stopped".to_owned());
        let (reply, done) = oneshot::channel();
        let requests = self.inner.requests.as_ref().ok_or_else(stopped)?;
        requests.send(reply).map_err(|_| stopped())?;
        done.await
            .map_err(|_| stopped())?
            .map_err(StoreError::NotDurable)
    }
}

fn run(db: &sled::Db, queue: &mpsc::Receiver<Reply>, shared: &Shared) {
    while let Ok(first) = queue.recv() {
        let mut waiting = vec![first];
        gather(
            queue,
            &mut waiting,
            shared.writers.load(Ordering::Relaxed),
            LINGER,
        );
        let started = Instant::now();
        let result = if shared.fail.load(Ordering::SeqCst) {
            Err("no space left on device (simulated)".to_owned())
        } else {
            db.flush().map(drop).map_err(|err| err.to_string())
        };
        // sled defers freeing a log buffer it replaced to this thread's epoch garbage,
        // which is handed on only once 64 items pile up. At a flush or so a millisecond
        // that held tens of 512 KiB segment buffers; handing it on now frees them.
        crossbeam_epoch::pin().flush();
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

/// Adds to `waiting` the requests already queued and, when other writers may ask soon,
/// those arriving within `linger`, until every writer asked.
///
/// A flush costs the same for one run's records as for fifty's; under load, waiting a
/// moment lets one flush answer many. A lone writer never waits.
///
/// The thread sleeps in slices of [`GLANCE`] and looks at the queue between them rather
/// than blocking on it: a thread blocked on the channel is woken by every request, so under
/// load each commit would cost its sender a futex wake-up and this thread a switch back in.
fn gather(
    queue: &mpsc::Receiver<Reply>,
    waiting: &mut Vec<Reply>,
    writers: usize,
    linger: Duration,
) {
    if writers > 1 {
        let until = Instant::now() + linger;
        loop {
            waiting.extend(queue.try_iter());
            if waiting.len() >= writers {
                break;
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            thread::sleep(left.min(GLANCE));
        }
    }
    waiting.extend(queue.try_iter());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn counted_flusher() -> (Flusher, FlushState, Arc<AtomicU32>) {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let state = FlushState::default();
        let flusher = Flusher::start(db, &state).unwrap();
        let flushes = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&flushes);
        state.observe(Box::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        (flusher, state, flushes)
    }

    /// Runs count as writers while active, not while idle or once done; runs one after the
    /// other (each done before the next starts) are one writer at a time.
    #[test]
    fn writers_are_the_runs_in_progress() {
        let state = FlushState::default();
        let writers = || state.shared.writers.load(Ordering::Relaxed);
        state.note_writer(1, Writing::Active);
        state.note_writer(2, Writing::Active);
        state.note_writer(2, Writing::Active);
        assert_eq!(writers(), 2);
        state.note_writer(2, Writing::Idle);
        assert_eq!(
            writers(),
            1,
            "a run waiting on its caller is not waited for"
        );
        state.note_writer(1, Writing::Done);
        for run in 3..10 {
            state.note_writer(run, Writing::Active);
            assert_eq!(writers(), 1, "one run after the other");
            state.note_writer(run, Writing::Done);
        }
        assert_eq!(writers(), 0);
    }

    fn request() -> Reply {
        oneshot::channel().0
    }

    /// With two writers counted, a flush waits for the second one's request, which comes
    /// later, and answers both; it stops waiting as soon as every writer asked.
    #[test]
    fn a_flush_waits_for_the_other_writers_request() {
        let (send, queue) = mpsc::channel();
        let late = thread::spawn(move || {
            // The flusher waits on a thread's channel, which paused time cannot reach.
            thread::sleep(Duration::from_millis(20));
            send.send(request()).unwrap();
            send
        });
        let mut waiting = vec![request()];
        let started = Instant::now();
        gather(&queue, &mut waiting, 2, Duration::from_secs(60));
        assert_eq!(waiting.len(), 2);
        assert!(started.elapsed() < Duration::from_secs(30));
        drop(late.join());
    }

    /// A lone writer's flush takes what is queued and never waits.
    #[test]
    fn a_lone_writers_flush_does_not_wait() {
        let (send, queue) = mpsc::channel();
        send.send(request()).unwrap();
        let mut waiting = vec![request()];
        let started = Instant::now();
        gather(&queue, &mut waiting, 1, Duration::from_secs(60));
        assert_eq!(waiting.len(), 2, "what was queued is taken");
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    /// A counted writer that never asks holds another's flush back by the linger at most.
    #[tokio::test]
    async fn a_silent_writer_delays_a_flush_by_the_linger_at_most() {
        let (flusher, state, flushes) = counted_flusher();
        state.note_writer(1, Writing::Active);
        state.note_writer(2, Writing::Active);
        let started = Instant::now();
        flusher.flush().await.unwrap();
        assert!(started.elapsed() < LINGER + Duration::from_millis(500));
        assert_eq!(flushes.load(Ordering::SeqCst), 1);

        flusher.flush().await.unwrap();
        assert_eq!(flushes.load(Ordering::SeqCst), 2);
    }
}
