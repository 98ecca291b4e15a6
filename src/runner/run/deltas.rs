//! Answer text as clients receive it: in delta events small enough for any client however
//! much arrived at once, and the time to the first one measured once.

use std::time::Instant;

use super::recorder::Recorder;
use crate::domain::RunEvent;
use crate::telemetry::Metrics;

/// The answer deltas of one run.
pub(super) struct Deltas {
    /// When the run started, for the time to its first delta.
    started: Instant,
    /// Whether the first delta was sent (the time to it is measured once).
    first_sent: bool,
}

impl Deltas {
    /// The deltas of a run that started at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            first_sent: false,
        }
    }

    /// Announces `text` through `recorder`, in pieces of at most [`MAX_DELTA_BYTES`].
    pub fn announce(&mut self, text: String, recorder: &mut Recorder, metrics: &Metrics) {
        if !std::mem::replace(&mut self.first_sent, true) {
            metrics.first_delta(self.started.elapsed());
        }
        for text in split_at_boundaries(text, MAX_DELTA_BYTES) {
            recorder.announce(RunEvent::AnswerDelta { text });
        }
    }
}

/// The most text one delta event carries.
const MAX_DELTA_BYTES: usize = 256 * 1024;

/// `text` in pieces of at most `max` bytes, cut at character boundaries.
fn split_at_boundaries(text: String, max: usize) -> Vec<String> {
    if text.len() <= max {
        return vec![text];
    }
    let mut pieces = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut cut = max.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut.max(1).min(rest.len()));
        pieces.push(piece.to_owned());
        rest = tail;
    }
    pieces
}
