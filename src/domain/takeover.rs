//! The takeover policy: what becomes of a run whose owner is gone (taken over to go on,
//! or ended, and why), whichever store holds it and whichever replica sweeps it.

use super::{EventEnvelope, Message, MessageStatus, RunFailure};

/// How a sweep treats the runs no live process owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adoption {
    /// Take running runs over so this process resumes them; `false` ends them interrupted.
    pub resume: bool,
    /// Takeovers a run may have had; at the next loss of its owner it ends `owner_lost`.
    pub max_takeovers: u32,
}

impl Adoption {
    /// End every orphan interrupted, as a process that does not resume runs does.
    pub const INTERRUPT: Adoption = Adoption {
        resume: false,
        max_takeovers: 0,
    };
}

/// What a sweep does with one run whose owner is gone.
pub enum Fate {
    /// Take it over, to resume it here.
    Adopt,
    /// End it, with this code and reason.
    End(&'static str, String),
}

/// The fate of `message`, orphaned, under `adoption`; `why` says why it is orphaned.
pub fn fate(message: &Message, adoption: Adoption, why: &'static str) -> Fate {
    if !adoption.resume || message.status.is_terminal() {
        return Fate::End("interrupted", why.to_owned());
    }
    if !message.handed_over && message.takeovers >= adoption.max_takeovers {
        let times = message.takeovers;
        return Fate::End(
            OWNER_LOST,
            format!(
                "{why}, and the run was taken over {times} times already (cluster.max_takeovers)"
            ),
        );
    }
    Fate::Adopt
}

/// Takes `message` over: a run its owner handed over goes on uncounted, any other counts
/// one takeover more. Returns whether it was handed over.
pub fn adopt(message: &mut Message) -> bool {
    let handed_over = std::mem::take(&mut message.handed_over);
    if !handed_over {
        message.takeovers += 1;
    }
    handed_over
}

/// The code of a run that lost its owner once more than it may be taken over.
pub const OWNER_LOST: &str = "owner_lost";

/// Marks `message`, left running by a process that is gone, as interrupted with `code`
/// for `why`, and returns the end event that announces it, one past `last_seq`: its
/// followers, wherever they are, see the run end.
pub fn end_orphan(message: &mut Message, code: &str, why: &str, last_seq: u64) -> EventEnvelope {
    let failure = RunFailure {
        code: code.to_owned(),
        message: why.to_owned(),
    };
    message.end_stranded(MessageStatus::Interrupted, failure, last_seq)
}

/// Why a message a process left running at its end is interrupted.
pub const STOPPED: &str = "the server stopped while this message was running";
