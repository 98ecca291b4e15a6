//! Files tools produce during a run, kept with the message they belong to.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{FileId, MessageId};

/// A file a tool returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The file's id.
    pub id: FileId,
    /// The message whose run produced it.
    pub message_id: MessageId,
    /// A name for people, e.g. `chart.png`.
    pub name: String,
    /// MIME type.
    pub mime_type: String,
    /// Bytes stored (0 for a file that is only a URL).
    pub size: u64,
    /// Where the file is, when the tool gave a URL instead of bytes.
    pub url: String,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

impl FileRecord {
    /// The file's kind as clients group files: image, video, audio, document or custom.
    pub fn kind(&self) -> &'static str {
        let mime = self.mime_type.as_str();
        if mime.starts_with("image/") {
            "image"
        } else if mime.starts_with("video/") {
            "video"
        } else if mime.starts_with("audio/") {
            "audio"
        } else if mime.starts_with("text/") || mime == "application/pdf" {
            "document"
        } else {
            "custom"
        }
    }
}
