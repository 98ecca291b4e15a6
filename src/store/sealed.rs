//! Credentials at rest: sealed with an AEAD (XChaCha20-Poly1305) under the service's secret
//! key, so the database files never hold a tool's API key in plaintext.
//!
//! Each value gets a random 24-byte nonce, stored before its ciphertext. The key comes from
//! the operator (`AGENT_RUNNER_SECRET_KEY` or a key file); without one, the service makes a
//! key file in the data directory at first start.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::error::StoreError;

/// Length of the XChaCha20 nonce stored with each value.
const NONCE_LEN: usize = 24;

/// The 32-byte key credentials are sealed with. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey([u8; 32]);

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(***)")
    }
}

impl SecretKey {
    /// A new random key.
    pub fn generate() -> Self {
        Self(XChaCha20Poly1305::generate_key(&mut OsRng).into())
    }

    /// A key written as base64 (44 characters) or hex (64 digits).
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .ok()
        } else {
            base64::engine::general_purpose::STANDARD.decode(text).ok()
        };
        bytes
            .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
            .map(Self)
            .ok_or_else(|| {
                StoreError::SecretKey(
                    "the secret key must be 32 bytes, as base64 or hex".to_owned(),
                )
            })
    }

    /// A key of its own for `purpose`, derived from this one (SHA-256 of a label, the
    /// purpose and the key): what replicas sharing this key seal something else with, so
    /// no ciphertext of one use can be taken for another's.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::new()
            .chain_update(b"agent-runner derived key\0")
            .chain_update(purpose.as_bytes())
            .chain_update(b"\0")
            .chain_update(self.0)
            .finalize()
            .into()
    }

    /// The key as base64, as key files hold it.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    /// The key in `path`, made (readable by the owner only) when the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, StoreError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate();
                write_private(path, &key.to_base64())?;
                Ok(key)
            }
            Err(err) => Err(StoreError::SecretKey(format!(
                "cannot read the key file {}: {err}",
                path.display()
            ))),
        }
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), StoreError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let failed = |err: std::io::Error| {
        StoreError::SecretKey(format!(
            "cannot write the key file {}: {err}",
            path.display()
        ))
    };
    let mut file = options.open(path).map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)
}

/// Seals and opens values under one key.
#[derive(Clone)]
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl Sealer {
    /// A sealer with `key`.
    pub fn new(key: &SecretKey) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(&key.0.into()),
        }
    }

    /// `plaintext` sealed, as base64 of nonce and ciphertext.
    pub fn seal(&self, plaintext: &[u8]) -> Result<String, StoreError> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, plaintext)
            .map_err(|_| StoreError::Sealed("cannot seal a value".to_owned()))?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// `thought` as it is written: its provider reasoning (signed thinking) sealed, so the
    /// thinking text is never at rest in the clear. Borrowed when there is none.
    pub fn seal_thought<'a>(
        &self,
        thought: &'a crate::domain::Thought,
    ) -> Result<std::borrow::Cow<'a, crate::domain::Thought>, StoreError> {
        use crate::domain::ProviderReasoning;
        let ProviderReasoning::Open(blocks) = &thought.provider_reasoning else {
            return Ok(std::borrow::Cow::Borrowed(thought));
        };
        let plain = serde_json::to_vec(blocks)
            .map_err(|_| StoreError::Sealed("cannot seal a round's reasoning".to_owned()))?;
        let mut sealed = thought.clone();
        sealed.provider_reasoning = ProviderReasoning::Sealed(self.seal(&plain)?);
        Ok(std::borrow::Cow::Owned(sealed))
    }

    /// `burst` as it is written: every thought in it as [`Sealer::seal_thought`] makes
    /// it. Borrowed when none carries open reasoning.
    pub fn seal_burst<'a>(
        &self,
        burst: &'a super::contract::Burst,
    ) -> Result<std::borrow::Cow<'a, super::contract::Burst>, StoreError> {
        use super::contract::Record;
        let open = |record: &Record| {
            matches!(record, Record::Thought(thought)
                if matches!(thought.provider_reasoning, crate::domain::ProviderReasoning::Open(_)))
        };
        if !burst.records.iter().any(open) {
            return Ok(std::borrow::Cow::Borrowed(burst));
        }
        let mut sealed = burst.clone();
        for record in &mut sealed.records {
            if let Record::Thought(thought) = record {
                *thought = self.seal_thought(thought)?.into_owned();
            }
        }
        Ok(std::borrow::Cow::Owned(sealed))
    }

    /// Opens the provider reasoning of `thoughts` for the run that goes on with them; a
    /// value that does not open (another key's) is dropped: the provider is then asked
    /// without it.
    pub fn open_thoughts(&self, thoughts: &mut [crate::domain::Thought]) {
        use crate::domain::ProviderReasoning;
        for thought in thoughts {
            let Some(sealed) = thought.provider_reasoning.sealed() else {
                continue;
            };
            let blocks = self
                .open(sealed)
                .ok()
                .and_then(|plain| serde_json::from_slice(&plain).ok());
            thought.provider_reasoning = match blocks {
                Some(blocks) => ProviderReasoning::Open(blocks),
                None => {
                    tracing::warn!("a round's sealed reasoning does not open; it is left out");
                    ProviderReasoning::None
                }
            };
        }
    }

    /// The plaintext of a sealed value; fails for another key's value or a changed one.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, StoreError> {
        let wrong = || {
            StoreError::Sealed(
                "a sealed value does not open with this secret key (was the key changed?)"
                    .to_owned(),
            )
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| wrong())?;
        if bytes.len() < NONCE_LEN {
            return Err(wrong());
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), ciphertext)
            .map_err(|_| wrong())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key() {
        let key = SecretKey::generate();
        let sealer = Sealer::new(&key);
        let sealed = sealer.seal(b"s3cret").unwrap();
        assert!(!sealed.contains("s3cret"));
        assert_ne!(sealed, sealer.seal(b"s3cret").unwrap(), "a nonce per value");
        assert_eq!(sealer.open(&sealed).unwrap(), b"s3cret");
        assert!(Sealer::new(&SecretKey::generate()).open(&sealed).is_err());
        assert_eq!(SecretKey::parse(&key.to_base64()).unwrap(), key);
        assert!(SecretKey::parse("short").is_err());
        assert!(!format!("{key:?}").contains(&key.to_base64()));
    }

    #[test]
    fn a_key_file_is_made_once_and_read_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let first = SecretKey::load_or_create(&path).unwrap();
        assert_eq!(SecretKey::load_or_create(&path).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
