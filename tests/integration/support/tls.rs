//! Throwaway certificates: a CA, a server certificate for `localhost` and 127.0.0.1, a
//! client certificate from the same CA, and one from a CA the server does not trust.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// PEM files in a temporary directory.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub stranger_cert: PathBuf,
    pub stranger_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("client"),
    );
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

impl Pki {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = ca("agent-runner test CA");
        let (server_cert, server_key) = leaf(
            &root,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) =
            leaf(&root, &["client"], ExtendedKeyUsagePurpose::ClientAuth);
        let (stranger_cert, stranger_key) = leaf(
            &ca("someone else's CA"),
            &["stranger"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let path = dir.path();
        Self {
            ca: write(path, "ca.pem", &root.pem()),
            server_cert: write(path, "server.pem", &server_cert),
            server_key: write(path, "server-key.pem", &server_key),
            client_cert: write(path, "client.pem", &client_cert),
            client_key: write(path, "client-key.pem", &client_key),
            stranger_cert: write(path, "stranger.pem", &stranger_cert),
            stranger_key: write(path, "stranger-key.pem", &stranger_key),
            _dir: dir,
        }
    }

    /// Client TLS trusting the test CA, with no client certificate.
    pub fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(&self.ca).unwrap()))
            .domain_name("localhost")
    }

    /// Client TLS presenting `cert` and `key`.
    pub fn client_with(&self, cert: &Path, key: &Path) -> ClientTlsConfig {
        self.client().identity(Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ))
    }
}
