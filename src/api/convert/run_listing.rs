//! `ListRuns` and `ListConversations`: their requests as filters and cursors, and their
//! pages as summaries.
//!
//! A page token carries the store's cursor with a fingerprint of the filters it was made
//! under: a token is only good for the query that issued it, so one taken to another query
//! is refused instead of starting that query at a place that means something else.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use prost::Message as _;
use sha2::{Digest, Sha256};
use tonic::Status;

use super::record::{finish_reason, message_status};
use super::scalar::{parse_id, timestamp};
use crate::api::status::invalid;
use crate::domain::{agent::check_slug, FinishReason, MessageStatus, RunFilter};
use crate::pb;
use crate::store::{ListedConversation, ListedRun, RunCursor};

/// The most statuses one request names.
const MAX_STATUSES: usize = 8;
/// The longest end user a request filters on.
const MAX_USER_BYTES: usize = 1024;
/// How much of a run's query a summary shows, in characters.
const SHOWN_QUERY_CHARS: usize = 200;
/// The first byte of the tokens this version issues.
const TOKEN_VERSION: u8 = 1;

/// The filter a request asks for, each field checked and named when it is wrong.
pub fn run_filter(request: &pb::ListRunsRequest) -> Result<RunFilter, Status> {
    let pb::ListRunsRequest {
        page_size: _,
        page_token: _,
        statuses,
        agent_id,
        agent_version,
        conversation_id,
        user,
        parent_message_id,
        finish_reason,
        created_after,
        created_before,
    } = request;
    if statuses.len() > MAX_STATUSES {
        return Err(invalid(
            "statuses",
            &format!("names at most {MAX_STATUSES} statuses"),
        ));
    }
    let statuses = statuses
        .iter()
        .map(|value| status_of(*value))
        .collect::<Result<Vec<_>, _>>()?;
    if !agent_id.is_empty() {
        check_slug("agent_id", agent_id).map_err(crate::api::status::from_error)?;
    }
    if *agent_version != 0 && agent_id.is_empty() {
        return Err(invalid("agent_version", "needs `agent_id`"));
    }
    if user.len() > MAX_USER_BYTES {
        return Err(invalid(
            "user",
            &format!("must be at most {MAX_USER_BYTES} bytes"),
        ));
    }
    let created_after = time_of("created_after", created_after.as_ref())?;
    let created_before = time_of("created_before", created_before.as_ref())?;
    if let (Some(after), Some(before)) = (created_after, created_before) {
        if after >= before {
            return Err(invalid(
                "created_before",
                "must be later than `created_after`",
            ));
        }
    }
    Ok(RunFilter {
        statuses,
        agent_id: (!agent_id.is_empty()).then(|| agent_id.clone()),
        agent_version: (*agent_version != 0).then_some(*agent_version),
        conversation: optional_id("conversation_id", conversation_id)?,
        user: (!user.is_empty()).then(|| user.clone()),
        parent: optional_id("parent_message_id", parent_message_id)?,
        finish_reason: reason_of(*finish_reason)?,
        created_after,
        created_before,
    })
}

/// The cursor a request's page token carries; `None` for the first page.
pub fn cursor_of(request: &pb::ListRunsRequest) -> Result<Option<RunCursor>, Status> {
    if request.page_token.is_empty() {
        return Ok(None);
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(&request.page_token)
        .map_err(|_| bad_token())?;
    let [TOKEN_VERSION, rest @ ..] = bytes.as_slice() else {
        return Err(bad_token());
    };
    let (fingerprint, place) = rest.split_at_checked(8).ok_or_else(bad_token)?;
    if fingerprint != fingerprint_of(request) {
        return Err(invalid(
            "page_token",
            "was issued for other filters: send the same filters as the first page",
        ));
    }
    let place: [u8; 16] = place.try_into().map_err(|_| bad_token())?;
    Ok(Some(RunCursor(u128::from_be_bytes(place))))
}

/// The token that asks for the page after `cursor`, under the request's filters.
pub fn token_of(request: &pb::ListRunsRequest, cursor: Option<RunCursor>) -> String {
    let Some(RunCursor(place)) = cursor else {
        return String::new();
    };
    let mut bytes = Vec::with_capacity(25);
    bytes.push(TOKEN_VERSION);
    bytes.extend_from_slice(&fingerprint_of(request));
    bytes.extend_from_slice(&place.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The place a `ListConversations` page token carries: where the listing began and where
/// the next page starts.
pub fn conversation_cursor_of(
    request: &pb::ListConversationsRequest,
) -> Result<(Option<RunCursor>, Option<RunCursor>), Status> {
    if request.user.len() > MAX_USER_BYTES {
        return Err(invalid(
            "user",
            &format!("must be at most {MAX_USER_BYTES} bytes"),
        ));
    }
    if request.page_token.is_empty() {
        return Ok((None, None));
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(&request.page_token)
        .map_err(|_| bad_token())?;
    let [TOKEN_VERSION, rest @ ..] = bytes.as_slice() else {
        return Err(bad_token());
    };
    let (fingerprint, places) = rest.split_at_checked(8).ok_or_else(bad_token)?;
    if fingerprint != user_fingerprint(&request.user) {
        return Err(invalid(
            "page_token",
            "was issued for another `user`: send the same filter as the first page",
        ));
    }
    let places: [u8; 32] = places.try_into().map_err(|_| bad_token())?;
    let (as_of, after) = places.split_at(16);
    let place = |half: &[u8]| {
        <[u8; 16]>::try_from(half)
            .map(|bytes| RunCursor(u128::from_be_bytes(bytes)))
            .map_err(|_| bad_token())
    };
    Ok((Some(place(as_of)?), Some(place(after)?)))
}

/// The token that asks for the next page of a conversation listing.
pub fn conversation_token_of(
    request: &pb::ListConversationsRequest,
    as_of: Option<RunCursor>,
    next: Option<RunCursor>,
) -> String {
    let (Some(RunCursor(as_of)), Some(RunCursor(next))) = (as_of, next) else {
        return String::new();
    };
    let mut bytes = Vec::with_capacity(41);
    bytes.push(TOKEN_VERSION);
    bytes.extend_from_slice(&user_fingerprint(&request.user));
    bytes.extend_from_slice(&as_of.to_be_bytes());
    bytes.extend_from_slice(&next.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

fn user_fingerprint(user: &str) -> [u8; 8] {
    let digest = Sha256::digest(user.as_bytes());
    let mut out = [0; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

impl From<ListedConversation> for pb::ConversationSummary {
    fn from(listed: ListedConversation) -> Self {
        let ListedConversation {
            conversation,
            messages,
            last,
        } = listed;
        Self {
            conversation_id: conversation.id.to_string(),
            user: conversation.user,
            message_count: messages,
            first_activity: Some(timestamp(conversation.created_at)),
            last_activity: Some(timestamp(last.message.updated_at)),
            last_run: Some(last.into()),
        }
    }
}

/// A short digest of the request's filters (its size and token aside).
fn fingerprint_of(request: &pb::ListRunsRequest) -> [u8; 8] {
    let filters = pb::ListRunsRequest {
        page_size: 0,
        page_token: String::new(),
        ..request.clone()
    };
    let digest = Sha256::digest(filters.encode_to_vec());
    let mut out = [0; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

fn bad_token() -> Status {
    invalid("page_token", "is not a token this server issued")
}

fn optional_id<T: std::str::FromStr>(field: &str, value: &str) -> Result<Option<T>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    parse_id(field, value).map(Some)
}

fn time_of(
    field: &str,
    value: Option<&prost_types::Timestamp>,
) -> Result<Option<DateTime<Utc>>, Status> {
    let Some(value) = value else {
        return Ok(None);
    };
    let nanos = u32::try_from(value.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000);
    nanos
        .and_then(|nanos| DateTime::from_timestamp(value.seconds, nanos))
        .map(Some)
        .ok_or_else(|| invalid(field, "is not a valid time"))
}

fn status_of(value: i32) -> Result<MessageStatus, Status> {
    let status = match pb::MessageStatus::try_from(value) {
        Ok(pb::MessageStatus::Running) => MessageStatus::Running,
        Ok(pb::MessageStatus::Completed) => MessageStatus::Completed,
        Ok(pb::MessageStatus::Failed) => MessageStatus::Failed,
        Ok(pb::MessageStatus::Cancelled) => MessageStatus::Cancelled,
        Ok(pb::MessageStatus::Interrupted) => MessageStatus::Interrupted,
        Ok(pb::MessageStatus::WaitingToolOutputs) => MessageStatus::WaitingToolOutputs,
        Ok(pb::MessageStatus::WaitingApproval) => MessageStatus::WaitingApproval,
        Ok(pb::MessageStatus::Queued) => MessageStatus::Queued,
        Ok(pb::MessageStatus::Unspecified) | Err(_) => {
            return Err(invalid(
                "statuses",
                &format!("holds {value}, which is not a status a run can have"),
            ))
        }
    };
    Ok(status)
}

fn reason_of(value: i32) -> Result<Option<FinishReason>, Status> {
    match pb::FinishReason::try_from(value) {
        Ok(pb::FinishReason::Unspecified) => Ok(None),
        Ok(pb::FinishReason::Stop) => Ok(Some(FinishReason::Stop)),
        Ok(pb::FinishReason::MaxIterations) => Ok(Some(FinishReason::MaxIterations)),
        Ok(pb::FinishReason::Cancelled) => Ok(Some(FinishReason::Cancelled)),
        Ok(pb::FinishReason::BudgetExhausted) => Ok(Some(FinishReason::BudgetExhausted)),
        Ok(pb::FinishReason::Interrupted) => Ok(Some(FinishReason::Interrupted)),
        Err(_) => Err(invalid(
            "finish_reason",
            &format!("holds {value}, which is not a finish reason"),
        )),
    }
}

impl From<ListedRun> for pb::RunSummary {
    fn from(run: ListedRun) -> Self {
        let ListedRun { message, owner } = run;
        let mut query = message.query;
        let query_truncated = match query.char_indices().nth(SHOWN_QUERY_CHARS) {
            Some((cut, _)) => {
                query.truncate(cut);
                true
            }
            None => false,
        };
        let ended = message.status.is_terminal();
        Self {
            message_id: message.id.to_string(),
            conversation_id: message.conversation_id.to_string(),
            parent_message_id: message
                .parent
                .map(|parent| parent.message_id.to_string())
                .unwrap_or_default(),
            query,
            query_truncated,
            agent_version: message.agent.as_ref().map_or(0, |pin| pin.version),
            agent_id: message.agent.map(|pin| pin.agent_id).unwrap_or_default(),
            provider: message.provider,
            model: message.model,
            status: message_status(message.status).into(),
            finish_reason: message
                .finish_reason
                .map_or(pb::FinishReason::Unspecified, finish_reason)
                .into(),
            rounds: message.iterations,
            usage: Some(message.usage.into()),
            user: message.user,
            created_at: Some(timestamp(message.created_at)),
            ended_at: ended.then(|| timestamp(message.updated_at)),
            owner: owner.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_good_only_for_the_filters_that_issued_it() {
        let request = pb::ListRunsRequest {
            agent_id: "support".into(),
            ..Default::default()
        };
        let token = token_of(&request, Some(RunCursor(42)));
        let next = pb::ListRunsRequest {
            page_token: token.clone(),
            page_size: 7,
            ..request.clone()
        };
        assert_eq!(cursor_of(&next).unwrap(), Some(RunCursor(42)));
        let other = pb::ListRunsRequest {
            page_token: token,
            agent_id: "sales".into(),
            ..Default::default()
        };
        assert_eq!(
            cursor_of(&other).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let forged = pb::ListRunsRequest {
            page_token: "AAAA".into(),
            ..Default::default()
        };
        assert!(cursor_of(&forged)
            .unwrap_err()
            .message()
            .contains("page_token"));
    }

    #[test]
    fn wrong_filters_are_named() {
        let named =
            |request: pb::ListRunsRequest| run_filter(&request).unwrap_err().message().to_owned();
        assert!(named(pb::ListRunsRequest {
            statuses: vec![0],
            ..Default::default()
        })
        .contains("statuses"));
        assert!(named(pb::ListRunsRequest {
            agent_version: 2,
            ..Default::default()
        })
        .contains("agent_version"));
        assert!(named(pb::ListRunsRequest {
            user: "u".repeat(MAX_USER_BYTES + 1),
            ..Default::default()
        })
        .contains("user"));
        assert!(named(pb::ListRunsRequest {
            conversation_id: "nope".into(),
            ..Default::default()
        })
        .contains("conversation_id"));
        let at = |seconds| Some(prost_types::Timestamp { seconds, nanos: 0 });
        assert!(named(pb::ListRunsRequest {
            created_after: at(20),
            created_before: at(10),
            ..Default::default()
        })
        .contains("created_before"));
    }
}
