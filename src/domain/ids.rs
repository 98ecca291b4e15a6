//! Typed identifiers, so a message id can never be passed where a conversation id belongs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh time-ordered (v7) id, so ids sort by creation time.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// The 16 bytes used in store keys.
            pub fn as_bytes(&self) -> &[u8; 16] {
                self.0.as_bytes()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// Identifies a conversation: a thread of messages that share history.
    ConversationId
);
uuid_id!(
    /// Identifies one user turn and the agent run that answers it.
    MessageId
);
uuid_id!(
    /// Identifies one round (thought record) of an agent run.
    ThoughtId
);
uuid_id!(
    /// Identifies a file a tool produced.
    FileId
);

/// The owner of a set of records; every store key starts with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tenant(String);

impl Tenant {
    /// Longest tenant name accepted; keeps keys short.
    pub const MAX_LEN: usize = 64;

    /// The rule [`Tenant::parse`] holds names to, as errors state it.
    pub const RULE: &'static str = "must be 1 to 64 bytes of printable characters (no control \
        characters), not blank and without leading or trailing whitespace";

    /// Validates a tenant name: 1 to 64 bytes of printable characters (no control
    /// character, so a name never forges a log line, and no NUL, the key separator), with
    /// something other than whitespace and no whitespace at either end, so two tenants
    /// never look alike (`acme` and `acme `) and none is blank.
    pub fn parse(name: &str) -> Option<Self> {
        let ok = Self::from_stored(name).is_some() && name.trim() == name && !name.is_empty();
        ok.then(|| Self(name.to_owned()))
    }

    /// A tenant name read back from the store, held to the rule in force when it was
    /// written (names written before blank ones were refused stay readable).
    pub fn from_stored(name: &str) -> Option<Self> {
        let ok =
            !name.is_empty() && name.len() <= Self::MAX_LEN && !name.chars().any(char::is_control);
        ok.then(|| Self(name.to_owned()))
    }

    /// The tenant for callers that do not name one.
    pub fn default_tenant() -> Self {
        Self("default".to_owned())
    }

    /// The tenant's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Tenant;

    #[test]
    fn tenant_names_are_printable_not_blank_and_trimmed() {
        for good in ["acme", "a", "ACME Corp", "société-7", &"t".repeat(64)] {
            assert!(Tenant::parse(good).is_some(), "{good:?}");
        }
        for bad in [
            "",
            " ",
            "\t",
            "\u{3000}",
            " acme",
            "acme ",
            "a\nb",
            "a\0b",
            &"t".repeat(65),
        ] {
            assert!(Tenant::parse(bad).is_none(), "{bad:?}");
        }
        // A name stored before blank ones were refused still reads back.
        assert!(Tenant::from_stored(" ").is_some());
    }
}
