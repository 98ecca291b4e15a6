//! The gRPC listener's connections: capped and put on probation by [`crate::net`], over TLS
//! when configured. The TLS handshake is ours rather than the transport's so that one
//! deadline covers the handshake and the first bytes after it (the HTTP/2 preface, or as
//! many bytes of an HTTP/1.1 request head).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::net::{self, Admitted, Descriptors, ListenerLimits, Probation};

/// Bytes of the HTTP/2 client preface: a connection that has sent this many has begun to
/// speak (HTTP/2, or HTTP/1.1 for gRPC-Web, whose request line is longer).
const PREFACE_LEN: usize = 24;

/// A connection as the transport serves it.
pub type Connection = Probation<Transport>;

/// Errors building the server.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The reflection service could not be built.
    #[error("could not build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The TLS certificate or key is unusable.
    #[error("cannot serve TLS: {0}")]
    Tls(String),
}

/// The PEM texts TLS is served with.
#[derive(Clone)]
pub struct TlsPem {
    /// Certificate chain.
    pub cert: Vec<u8>,
    /// Its private key.
    pub key: Vec<u8>,
    /// CA of required client certificates (mTLS); none asks for no client certificate.
    pub client_ca: Option<Vec<u8>>,
}

/// The stream of admitted connections the transport serves.
pub type Incoming = ReceiverStream<io::Result<Connection>>;

/// Plain TCP, or TLS over it.
pub enum Transport {
    /// Plaintext HTTP/2.
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(stream) => stream,
            Self::Tls(stream) => stream.get_ref().0,
        }
    }
}

impl Connected for Probation<Transport> {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.get_ref().tcp().connect_info()
    }
}

/// The TLS acceptor for `pem`: HTTP/2 or HTTP/1.1 by ALPN, client certificates of `client_ca` required
/// when it is set.
pub fn tls_acceptor(pem: &TlsPem) -> Result<TlsAcceptor, RouterError> {
    let bad = |what: &str| RouterError::Tls(what.to_owned());
    let certs = CertificateDer::pem_slice_iter(&pem.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("the certificate is not PEM"))?;
    let key = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|_| bad("the key is not PEM"))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| bad(&err.to_string()))?;
    let builder = match &pem.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert = cert.map_err(|_| bad("the client CA is not PEM"))?;
                roots.add(cert).map_err(|err| bad(&err.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| bad(&err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|err| bad(&err.to_string()))?;
    // HTTP/1.1 beside HTTP/2: browsers speak gRPC-Web over either.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The connections of `listener` for the transport: at most `limits.max_connections` at
/// once, each closed unless its TLS handshake (when `tls` is set) and first bytes are
/// done within `limits.handshake_timeout`. Accepting and handshakes run on `tasks`.
pub fn incoming(
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    descriptors: Descriptors,
    stop: CancellationToken,
    tasks: &TaskTracker,
) -> Incoming {
    let mut admitted = net::accept(listener, limits, descriptors, stop, tasks);
    let (sender, receiver) = mpsc::channel(64);
    let handshakes = tasks.clone();
    tasks.spawn(async move {
        while let Some(connection) = admitted.recv().await {
            match &tls {
                None => {
                    let Admitted {
                        stream,
                        place,
                        deadline,
                    } = connection;
                    let plain =
                        Probation::new(Transport::Plain(stream), place, deadline, PREFACE_LEN);
                    if sender.send(Ok(plain)).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    let sender = sender.clone();
                    handshakes.spawn(async move {
                        if let Some(secured) = handshake(acceptor, connection).await {
                            let _ = sender.send(Ok(secured)).await;
                        }
                    });
                }
            }
        }
    });
    ReceiverStream::new(receiver)
}

/// The TLS handshake within the connection's deadline; a failed or late one closes it.
async fn handshake(acceptor: TlsAcceptor, connection: Admitted) -> Option<Connection> {
    let Admitted {
        stream,
        place,
        deadline,
    } = connection;
    match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
        Ok(Ok(secured)) => Some(Probation::new(
            Transport::Tls(Box::new(secured)),
            place,
            deadline,
            PREFACE_LEN,
        )),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake not done in time: connection closed");
            None
        }
    }
}

macro_rules! delegate {
    ($self:ident, $stream:ident => $call:expr) => {
        match $self.get_mut() {
            Transport::Plain($stream) => {
                let $stream = Pin::new($stream);
                $call
            }
            Transport::Tls($stream) => {
                let $stream = Pin::new(&mut **$stream);
                $call
            }
        }
    };
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, stream => stream.poll_read(cx, buf))
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, stream => stream.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, stream => stream.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, stream => stream.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, stream => stream.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(stream) => stream.is_write_vectored(),
            Self::Tls(stream) => stream.is_write_vectored(),
        }
    }
}
