//! Masking the secrets this service sends upstream in whatever text comes back: a gateway's
//! 401 that quotes the key it received, a tool API that echoes its credential. Whoever sends
//! a secret knows it, so it masks it where the answer arrives, before the text is stored,
//! logged, traced, sent to a client or shown to a model.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine as _;

/// What a secret becomes.
pub const MASK: &str = "[redacted]";
/// Secrets shorter than this are not masked: they would garble ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// The secrets one client sends, in the forms they may come back in.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret containing another is masked whole.
    secrets: Arc<[String]>,
}

impl Redactor {
    /// Masks each of `secrets` (as sent, so also the value after `Bearer `).
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Self {
        let mut all: Vec<String> = secrets
            .into_iter()
            .map(|s| s.as_ref().trim().to_owned())
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        Self {
            secrets: all.into(),
        }
    }

    /// Also masks HTTP basic credentials: the password, and `user:password` in base64 as
    /// the `Authorization` header carried them.
    pub fn with_basic_auth(self, user: &str, password: &str) -> Self {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut all: Vec<String> = self.secrets.to_vec();
        all.push(password.to_owned());
        all.push(encoded);
        Self::new(all)
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret masked.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        out
    }

    /// [`Self::redact`] in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(masked) = self.redact(text) {
            *text = masked;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_in_every_form_a_gateway_echoes() {
        let redactor = Redactor::new(["sk-live-0123456789"]).with_basic_auth("ada", "hunter22!");
        assert_eq!(
            redactor.redact("Received API Key = Bearer sk-live-0123456789."),
            "Received API Key = Bearer [redacted]."
        );
        let basic = base64::engine::general_purpose::STANDARD.encode("ada:hunter22!");
        assert_eq!(
            redactor.redact(&format!(
                "got Authorization: Basic {basic}, password hunter22!"
            )),
            "got Authorization: Basic [redacted], password [redacted]"
        );
    }

    #[test]
    fn short_values_are_left_alone_and_clean_text_is_not_copied() {
        let redactor = Redactor::new(["abc", "1234567"]);
        assert!(redactor.is_empty());
        assert!(matches!(redactor.redact("abc 1234567"), Cow::Borrowed(_)));
    }
}
