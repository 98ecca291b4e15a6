//! The reasoning blocks a provider needs back to continue a tool-use turn (Anthropic's
//! signed thinking), and how a round keeps them: sealed at rest, never shown.

use serde::{Deserialize, Serialize};

/// A block of a model's reasoning, kept only to be sent back: never answer text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reasoning {
    /// Thinking in the clear, with the signature that vouches for it.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature of it, returned byte for byte.
        signature: String,
    },
    /// Thinking the provider encrypted.
    RedactedThinking {
        /// The opaque data.
        data: String,
    },
}

/// A round's reasoning blocks as its thought carries them. The run holds them open; the
/// store seals them before they are written and opens them for the run that goes on
/// with the round (a takeover), so the thinking text is never at rest in the clear,
/// whatever the agent's `reasoning` says. Open blocks are never serialized: a writer that
/// did not seal them loses them rather than leaking them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProviderReasoning {
    /// None.
    #[default]
    None,
    /// The blocks, as the run holds them.
    Open(Vec<Reasoning>),
    /// The blocks sealed under the store's key.
    Sealed(String),
}

impl ProviderReasoning {
    /// The blocks when open; none otherwise.
    pub fn blocks(&self) -> &[Reasoning] {
        match self {
            ProviderReasoning::Open(blocks) => blocks,
            ProviderReasoning::None | ProviderReasoning::Sealed(_) => &[],
        }
    }

    /// The sealed form, if that is what is held.
    pub fn sealed(&self) -> Option<&str> {
        match self {
            ProviderReasoning::Sealed(sealed) => Some(sealed),
            ProviderReasoning::None | ProviderReasoning::Open(_) => None,
        }
    }
}
