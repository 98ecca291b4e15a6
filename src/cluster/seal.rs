//! What replicas say on NATS, sealed: every payload is encrypted and authenticated
//! (XChaCha20-Poly1305) under a key every replica derives from the shared secret key, bound
//! to the subject it is published on. Another client of the NATS server can neither read a
//! run's events there nor make a replica hand a client an event its peers did not commit;
//! a payload that does not open is dropped before anything else is done with it.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The first byte of a sealed payload: the format, so a later one can be told apart.
const VERSION: u8 = 1;
/// Length of the nonce after the version byte.
const NONCE_LEN: usize = 24;
/// Bytes a sealed payload adds to what it carries: version, nonce and tag.
pub const OVERHEAD: usize = 1 + NONCE_LEN + 16;

/// Seals and opens the payloads of one deployment's replicas.
#[derive(Clone)]
pub struct Seal {
    cipher: XChaCha20Poly1305,
}

impl Seal {
    /// A seal under `key` (derived from the shared secret key for this use alone).
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// `plaintext` sealed for `subject`.
    pub fn seal(&self, subject: &str, plaintext: &[u8]) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: plaintext,
            aad: subject.as_bytes(),
        };
        // Encryption fails only past the cipher's length limit (256 GiB), far above any
        // payload NATS carries; an empty payload is then dropped as any unopenable one.
        let sealed = self.cipher.encrypt(&nonce, payload).unwrap_or_default();
        let mut bytes = Vec::with_capacity(OVERHEAD + plaintext.len());
        bytes.push(VERSION);
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        bytes
    }

    /// What `sealed` carries, if it was sealed for `subject` under this key; `None` for
    /// anything else (another key, another subject, a changed byte, an older replica's
    /// plain payload).
    pub fn open(&self, subject: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        let (&version, rest) = sealed.split_first()?;
        if version != VERSION || rest.len() < NONCE_LEN {
            return None;
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let payload = Payload {
            msg: ciphertext,
            aad: subject.as_bytes(),
        };
        self.cipher.decrypt(XNonce::from_slice(nonce), payload).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_opens_only_under_its_key_and_subject() {
        let seal = Seal::new(&[7; 32]);
        let sealed = seal.seal("p.events.m1", b"{\"last_seq\":3}");
        assert_eq!(
            seal.open("p.events.m1", &sealed).as_deref(),
            Some(&b"{\"last_seq\":3}"[..])
        );
        assert!(
            !String::from_utf8_lossy(&sealed).contains("last_seq"),
            "unreadable on the wire"
        );
        assert_eq!(seal.open("p.events.m2", &sealed), None, "another subject");
        assert_eq!(Seal::new(&[8; 32]).open("p.events.m1", &sealed), None);
        let mut changed = sealed.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert_eq!(seal.open("p.events.m1", &changed), None);
        assert_eq!(seal.open("p.events.m1", b"{\"last_seq\":3}"), None);
        assert_eq!(seal.open("p.events.m1", b""), None);
    }
}
