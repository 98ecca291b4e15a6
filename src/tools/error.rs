//! Tool failures. None of them fails a run: the engine turns each into observation text.

use crate::domain::ErrorKind;

/// Why a tool call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit what the tool needs.
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// When a tool is invoked directly (not by an agent), how its failure classifies.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArguments(_) => ErrorKind::InvalidArgument,
            Self::Failed(_) => ErrorKind::Internal,
        }
    }
}

/// A tool that cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The tool's argument schema is not valid JSON Schema.
    #[error("tool {tool}: invalid argument schema: {reason}")]
    InvalidSchema {
        /// Tool name.
        tool: String,
        /// What the schema compiler said.
        reason: String,
    },
    /// The tool's schema passes a bound (patterns, compiled size).
    #[error("tool {tool}: its argument schema {source}")]
    SchemaBound {
        /// Tool name.
        tool: String,
        /// Which bound.
        source: super::schema::SchemaError,
    },
}

impl RegistryError {
    /// Registration fails on the definition it was given.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}
