//! The client side of the command line: `run`, `chat`, `attach`, `show` and `tools` for
//! people and scripts, `health` and `keys` for operators, all through the generated tonic
//! clients.
//!
//! Errors are for a person at a terminal, so they are `anyhow` chains; a refusal leads
//! with the server's gRPC code.

mod admin;
mod agents;
pub mod args;
mod connection;
#[cfg(test)]
mod docs_check;
mod json;
mod proto_json;
mod render;
mod session;
mod show;

pub use admin::{check_health, keys, ADMIN_TOKEN_ENV};
pub use agents::agents;
pub use connection::Unreachable;
pub use session::{attach, chat, run};
pub use show::{show, tools};

/// How a followed run ended, which is how the command exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ended with an answer: exit 0.
    Completed,
    /// It ended with an error: exit 1.
    Failed,
    /// It was cancelled (by Ctrl-C or anyone else): exit 130, as a shell reports an
    /// interrupted command.
    Cancelled,
}

impl Outcome {
    /// The process exit code.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Completed => 0,
            Outcome::Failed => 1,
            Outcome::Cancelled => 130,
        }
    }
}

/// The exit code of a command that could not do its work: 3 when the server could not be
/// reached, 1 when it refused (its gRPC status is on stderr).
pub fn error_exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<Unreachable>().is_some() {
        3
    } else {
        1
    }
}

/// Whether the command failed only because its output was closed (`| head`), which is
/// reported as a shell reports SIGPIPE (141), without a message.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
