//! Accepting connections without letting callers exhaust the process: a cap per listener,
//! a deadline for a new connection to prove it speaks the protocol, a backing-off accept
//! loop, and a watch on whether the process can still open descriptors.
//!
//! An established connection is never closed for being idle (gRPC clients keep channels for
//! hours); one that has not finished its TLS handshake and sent its first bytes within the
//! deadline is closed.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default deadline for a new connection's handshake and first bytes.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long accepting waits after the first failure; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How often exhausted descriptors are probed for again.
const DESCRIPTOR_PROBE: Duration = Duration::from_secs(1);
/// A peer silent this long is asked by TCP keepalive whether it is still there, every
/// [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_PROBES`] times: a client whose network dropped
/// (no close ever arrives) frees its connection and its streams within about 8 s, even
/// while its run is quiet. A live peer answers the probes, so idle connections stay open.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 3;

/// Whether the process can open descriptors: turned off by an accept that fails for lack
/// of them, on again once one can be opened. Health reads it.
#[derive(Clone)]
pub struct Descriptors {
    available: watch::Sender<bool>,
}

impl Default for Descriptors {
    fn default() -> Self {
        Self {
            available: watch::Sender::new(true),
        }
    }
}

impl Descriptors {
    /// Follows the state.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.available.subscribe()
    }

    fn set(&self, available: bool) {
        self.available.send_if_modified(|current| {
            let changed = *current != available;
            *current = available;
            changed
        });
    }

    /// Waits until a descriptor can be opened again, then says so.
    async fn recover(&self, stop: &CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(DESCRIPTOR_PROBE) => {}
            }
            if std::fs::File::open("/dev/null").is_ok() {
                self.set(true);
                return;
            }
        }
    }
}

/// Raises the soft limit on open descriptors to the hard one, so connections and outbound
/// requests are bounded by what the operator allows rather than by a low default. Returns
/// the limit in force.
pub fn raise_descriptor_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(err) => {
            tracing::warn!(error = %err, "could not raise the open-descriptor limit");
            None
        }
    }
}

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Deadline for a new connection's handshake and first bytes.
    pub handshake_timeout: Duration,
}

/// Accepts on `listener` until `stop`, handing on connections within `limits`: each holds a
/// place until it is dropped. Accept errors back off instead of spinning, and an error for
/// lack of descriptors turns `descriptors` off until one can be opened. The loop (and the
/// descriptors' recovery) run on `tasks`.
pub fn accept(
    listener: TcpListener,
    limits: ListenerLimits,
    descriptors: Descriptors,
    stop: CancellationToken,
    tasks: &TaskTracker,
) -> mpsc::Receiver<Admitted> {
    let (sender, receiver) = mpsc::channel(64);
    tasks.spawn(accept_loop(
        listener,
        limits,
        descriptors,
        stop,
        sender,
        tasks.clone(),
    ));
    receiver
}

async fn accept_loop(
    listener: TcpListener,
    limits: ListenerLimits,
    descriptors: Descriptors,
    stop: CancellationToken,
    sender: mpsc::Sender<Admitted>,
    tasks: TaskTracker,
) {
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = FIRST_BACKOFF;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            _ = sender.closed() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                backoff = FIRST_BACKOFF;
                descriptors.set(true);
                let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
                    tracing::debug!(
                        max = limits.max_connections,
                        "connection refused: the listener is at its connection cap"
                    );
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                keep_alive(&stream);
                let admitted = Admitted {
                    stream,
                    place,
                    deadline: Instant::now() + limits.handshake_timeout,
                };
                if sender.send(admitted).await.is_err() {
                    return;
                }
            }
            Err(err) => {
                if is_out_of_descriptors(&err) {
                    if *descriptors.available.borrow() {
                        tracing::error!(error = %err, "cannot accept connections: out of descriptors; health is NOT_SERVING until descriptors free up");
                        let descriptors = descriptors.clone();
                        let stop = stop.clone();
                        tasks.spawn(async move { descriptors.recover(&stop).await });
                    }
                    descriptors.set(false);
                } else {
                    tracing::debug!(error = %err, "accept failed");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Turns on TCP keepalive at [`KEEPALIVE_IDLE`]; a socket that refuses it stays as it is.
fn keep_alive(stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    if let Err(err) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %err, "TCP keepalive could not be set");
    }
}

fn is_out_of_descriptors(err: &io::Error) -> bool {
    // EMFILE (the process's limit) and ENFILE (the system's); ENOBUFS and ENOMEM likewise
    // mean no new connection can be had until something is released.
    matches!(err.raw_os_error(), Some(23 | 24 | 105 | 12))
}

/// An accepted connection holding its place under the cap, with the deadline its
/// handshake and first bytes must meet.
pub struct Admitted {
    /// The connection.
    pub stream: TcpStream,
    /// Its place under the cap, given back when dropped.
    pub place: OwnedSemaphorePermit,
    /// When it must have finished its handshake and first bytes.
    pub deadline: Instant,
}

/// A connection that fails its reads once its deadline passes before it has read the
/// bytes that prove it speaks the protocol (the HTTP/2 client preface); after that it is
/// an ordinary connection, never closed for being idle. Holds the connection's place
/// under the cap.
pub struct Probation<IO> {
    io: IO,
    needed: usize,
    deadline: Option<Pin<Box<Sleep>>>,
    _place: OwnedSemaphorePermit,
}

impl<IO> Probation<IO> {
    /// `io` on probation until it has read `needed` bytes, by `deadline`.
    pub fn new(io: IO, place: OwnedSemaphorePermit, deadline: Instant, needed: usize) -> Self {
        Self {
            io,
            needed,
            deadline: (needed > 0).then(|| Box::pin(tokio::time::sleep_until(deadline))),
            _place: place,
        }
    }

    /// The connection beneath.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Probation<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(deadline) = this.deadline.as_mut() {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection did not start speaking in time",
                )));
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            let got = buf.filled().len() - before;
            this.needed = this.needed.saturating_sub(got);
            if this.needed == 0 {
                this.deadline = None;
            }
        }
        read
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Probation<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn place() -> OwnedSemaphorePermit {
        Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
    }

    /// Accepted connections ask a silent peer whether it is there (TCP keepalive after
    /// 5 s, three probes a second apart): the kernel then closes one whose network
    /// dropped, and its streams are freed.
    #[tokio::test]
    async fn accepted_connections_probe_a_silent_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ListenerLimits {
            max_connections: 4,
            handshake_timeout: Duration::from_secs(10),
        };
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        let mut admitted = accept(
            listener,
            limits,
            Descriptors::default(),
            stop.clone(),
            &tasks,
        );
        let _client = TcpStream::connect(addr).await.unwrap();
        let connection = admitted.recv().await.unwrap();
        let socket = socket2::SockRef::from(&connection.stream);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_fails_at_its_deadline_and_a_speaking_one_never_does() {
        let (client, server) = tokio::io::duplex(64);
        let mut silent =
            Probation::new(server, place(), Instant::now() + Duration::from_secs(10), 4);
        let mut buf = [0u8; 8];
        let err = silent.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        let mut speaking =
            Probation::new(server, place(), Instant::now() + Duration::from_secs(10), 4);
        client.write_all(b"PRI *").await.unwrap();
        assert_eq!(speaking.read(&mut buf).await.unwrap(), 5);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        client.write_all(b"later").await.unwrap();
        assert_eq!(
            speaking.read(&mut buf).await.unwrap(),
            5,
            "idle for an hour, still open"
        );
    }
}
