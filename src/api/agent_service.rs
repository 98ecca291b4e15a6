//! `agentrunner.v1.AgentService`: thin handlers over the runner and the store.

use std::pin::Pin;

use futures::Stream;
use tonic::{Request, Response, Status};

use super::auth::{caller_of, tenant_of};
use super::convert::{parse_id, run_listing, run_spec};
use super::deadline::deadline_of;
use super::status::from_error;
use super::stream::RunEventStream;
use crate::domain::{
    ConversationId, FileId, Message, MessageId, MessageStatus, RunFilter, Tenant, SHOWN_TEXT_LIMIT,
};
use crate::pb;
use crate::pb::agent_service_server::AgentService;
use crate::runner::{ClientOutput, Decision, RunError, Runner};
use crate::store::{ConversationQuery, PageSize, RunQuery, Store};
use crate::telemetry::TraceParent;

/// Largest page `ListMessages` and `ListThoughts` return.
const MAX_PAGE_SIZE: usize = 1000;
/// Most bytes of records in one page: under the 4 MiB a gRPC client accepts by default, and
/// a bound on what one list request holds in memory.
const PAGE_BYTES: usize = 3 * 1024 * 1024;
/// The longest reason for declining a call; the model reads it.
const MAX_REASON_BYTES: usize = 4096;
/// The most live runs `GetUsage` counts.
const MAX_LIVE_COUNTED: usize = 1000;
/// Page size when the request gives none.
const DEFAULT_PAGE_SIZE: usize = 100;

/// The sub-agent run a decision or output names, `None` for the request's own.
fn routed(field: &str, target: &str) -> Result<Option<MessageId>, Status> {
    match target {
        "" => Ok(None),
        target => parse_id(field, target).map(Some),
    }
}

/// The longest tool call id `GetToolCall` reads: ids models and the runner give are far
/// shorter.
const MAX_TOOL_CALL_ID: usize = 512;

/// The stream type of `Run` and `Attach`.
pub type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

/// Implements `AgentService`.
pub struct AgentApi {
    runner: Runner,
    store: Store,
}

impl AgentApi {
    /// Handlers over `runner` and `store`.
    pub fn new(runner: Runner, store: Store) -> Self {
        Self { runner, store }
    }

    /// The message `message_id` names, of `tenant`: another tenant's is not found.
    async fn message(&self, tenant: &Tenant, message_id: &str) -> Result<Message, Status> {
        let id: MessageId = parse_id("message_id", message_id)?;
        self.store
            .get_message(tenant, id)
            .await
            .map_err(from_error)?
            .ok_or_else(|| from_error(RunError::not_found("message", id)))
    }
}

#[tonic::async_trait]
impl AgentService for AgentApi {
    type RunStream = RunStream;
    type AttachStream = RunStream;

    async fn run(&self, request: Request<pb::RunRequest>) -> Result<Response<RunStream>, Status> {
        let caller = caller_of(&request)?;
        let deadline = deadline_of(&request);
        let cancel_on_disconnect = request.get_ref().cancel_on_disconnect;
        let trace_parent = TraceParent::from_headers(request.metadata().as_ref());
        let mut spec = run_spec(caller.tenant, request.into_inner(), deadline)?;
        spec.trace_parent = trace_parent;
        spec.limits = caller.limits;
        let cancel = self.runner.run_token();
        // Taken before the start, so a caller that leaves while its run starts cancels it.
        let guard = cancel_on_disconnect.then(|| cancel.clone().drop_guard());
        let handle = self.runner.start(spec, cancel).await.map_err(from_error)?;
        Ok(Response::new(Box::pin(RunEventStream::new(
            handle.events,
            guard,
        ))))
    }

    async fn attach(
        &self,
        request: Request<pb::AttachRequest>,
    ) -> Result<Response<RunStream>, Status> {
        let caller = caller_of(&request)?;
        let pb::AttachRequest {
            message_id,
            after_seq,
        } = request.into_inner();
        let id: MessageId = parse_id("message_id", &message_id)?;
        let events = self
            .runner
            .attach_for_client(
                &caller.tenant,
                id,
                after_seq,
                caller.limits.max_follow_streams,
            )
            .await
            .map_err(from_error)?;
        Ok(Response::new(Box::pin(RunEventStream::new(events, None))))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::CancelRequest { message_id } = request.into_inner();
        let id: MessageId = parse_id("message_id", &message_id)?;
        let status = self.runner.cancel(&tenant, id).await.map_err(from_error)?;
        Ok(Response::new(pb::CancelResponse {
            status: super::convert::message_status(status).into(),
        }))
    }

    async fn submit_tool_outputs(
        &self,
        request: Request<pb::SubmitToolOutputsRequest>,
    ) -> Result<Response<pb::SubmitToolOutputsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::SubmitToolOutputsRequest {
            message_id,
            outputs,
        } = request.into_inner();
        let id: MessageId = parse_id("message_id", &message_id)?;
        let outputs = outputs
            .into_iter()
            .enumerate()
            .map(
                |(
                    index,
                    pb::ToolOutput {
                        tool_call_id,
                        output,
                        error,
                        message_id: target,
                    },
                )| {
                    let target = routed(&format!("outputs[{index}].message_id"), &target)?;
                    Ok((
                        target,
                        ClientOutput {
                            tool_call_id,
                            output,
                            error,
                        },
                    ))
                },
            )
            .collect::<Result<Vec<_>, Status>>()?;
        self.runner
            .submit_routed(&tenant, id, outputs)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::SubmitToolOutputsResponse {}))
    }

    async fn approve_tool_calls(
        &self,
        request: Request<pb::ApproveToolCallsRequest>,
    ) -> Result<Response<pb::ApproveToolCallsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ApproveToolCallsRequest {
            message_id,
            decisions,
        } = request.into_inner();
        let id: MessageId = parse_id("message_id", &message_id)?;
        let mut checked = Vec::with_capacity(decisions.len());
        for (index, decision) in decisions.into_iter().enumerate() {
            let pb::ToolCallDecision {
                tool_call_id,
                approve,
                reason,
                message_id: target,
            } = decision;
            let target = routed(&format!("decisions[{index}].message_id"), &target)?;
            if reason.len() > MAX_REASON_BYTES {
                return Err(super::status::invalid(
                    &format!("decisions[{index}].reason"),
                    &format!("must be at most {MAX_REASON_BYTES} bytes"),
                ));
            }
            checked.push((
                target,
                Decision {
                    tool_call_id,
                    approve,
                    reason,
                },
            ));
        }
        self.runner
            .approve_routed(&tenant, id, checked)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::ApproveToolCallsResponse {}))
    }

    async fn get_message(
        &self,
        request: Request<pb::GetMessageRequest>,
    ) -> Result<Response<pb::Message>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetMessageRequest { message_id } = request.into_inner();
        let message = self.message(&tenant, &message_id).await?;
        Ok(Response::new(message.into()))
    }

    async fn list_messages(
        &self,
        request: Request<pb::ListMessagesRequest>,
    ) -> Result<Response<pb::ListMessagesResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ListMessagesRequest {
            conversation_id,
            page_size,
            page_token,
        } = request.into_inner();
        let id: ConversationId = parse_id("conversation_id", &conversation_id)?;
        if self
            .store
            .get_conversation(&tenant, id)
            .await
            .map_err(from_error)?
            .is_none()
        {
            return Err(from_error(RunError::not_found("conversation", id)));
        }
        let limit = page_limit(page_size)?;
        let after = parse_page_token(&page_token)?;
        let page = self
            .store
            .list_messages(&tenant, id, after, page_size_of(limit))
            .await
            .map_err(from_error)?;
        let more = page.more;
        let messages = page
            .items
            .into_iter()
            .map(|message| (message.seq, pb::Message::from(message)));
        let (messages, next_page_token) = fill_page(messages, limit, more);
        Ok(Response::new(pb::ListMessagesResponse {
            messages,
            next_page_token,
        }))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let request = request.into_inner();
        let limit = page_limit(request.page_size)?;
        let filter = run_listing::run_filter(&request)?;
        let after = run_listing::cursor_of(&request)?;
        let page = self
            .store
            .list_runs(
                &tenant,
                &RunQuery {
                    filter: &filter,
                    after,
                    limit,
                },
            )
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::ListRunsResponse {
            next_page_token: run_listing::token_of(&request, page.next),
            stopped_early: page.stopped_early,
            runs: page.items.into_iter().map(Into::into).collect(),
        }))
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let request = request.into_inner();
        let limit = page_limit(request.page_size)?;
        let (as_of, after) = run_listing::conversation_cursor_of(&request)?;
        let user = (!request.user.is_empty()).then_some(request.user.as_str());
        let listed = self
            .store
            .list_conversations(
                &tenant,
                &ConversationQuery {
                    user,
                    as_of,
                    after,
                    limit,
                },
            )
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::ListConversationsResponse {
            next_page_token: run_listing::conversation_token_of(
                &request,
                listed.as_of,
                listed.page.next,
            ),
            stopped_early: listed.page.stopped_early,
            conversations: listed.page.items.into_iter().map(Into::into).collect(),
        }))
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        let caller = caller_of(&request)?;
        let day = crate::runner::today();
        let tokens_today = self
            .store
            .tenant_tokens(&caller.tenant, day)
            .await
            .map_err(from_error)?;
        let live = RunFilter {
            statuses: vec![
                MessageStatus::Running,
                MessageStatus::WaitingApproval,
                MessageStatus::WaitingToolOutputs,
                MessageStatus::Queued,
            ],
            ..RunFilter::default()
        };
        let listed = self
            .store
            .list_runs(
                &caller.tenant,
                &RunQuery {
                    filter: &live,
                    after: None,
                    limit: MAX_LIVE_COUNTED,
                },
            )
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::GetUsageResponse {
            tenant: caller.tenant.as_str().to_owned(),
            day,
            tokens_today,
            live_runs: u32::try_from(listed.items.len()).unwrap_or(u32::MAX),
            limits: Some(caller.limits.into()),
        }))
    }

    async fn list_thoughts(
        &self,
        request: Request<pb::ListThoughtsRequest>,
    ) -> Result<Response<pb::ListThoughtsResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ListThoughtsRequest {
            message_id,
            page_size,
            page_token,
        } = request.into_inner();
        let id = self.message(&tenant, &message_id).await?.id;
        let limit = page_limit(page_size)?;
        let after = if page_token.is_empty() {
            None
        } else {
            Some(u32::try_from(parse_page_token(&page_token)?).map_err(|_| invalid_page_token())?)
        };
        let page = self
            .store
            .list_thoughts(&tenant, id, after, page_size_of(limit))
            .await
            .map_err(from_error)?;
        let more = page.more;
        let thoughts = page.items.into_iter().map(|thought| {
            // A page holds each thought as it fits one message; the store keeps it whole.
            let shown = match thought.fitted(SHOWN_TEXT_LIMIT) {
                std::borrow::Cow::Borrowed(_) => thought,
                std::borrow::Cow::Owned(cut) => cut,
            };
            (u64::from(shown.position), pb::AgentThought::from(shown))
        });
        let (thoughts, next_page_token) = fill_page(thoughts, limit, more);
        Ok(Response::new(pb::ListThoughtsResponse {
            thoughts,
            next_page_token,
        }))
    }

    async fn export_run(
        &self,
        request: Request<pb::ExportRunRequest>,
    ) -> Result<Response<pb::ExportRunResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::ExportRunRequest { message_id } = request.into_inner();
        let message = self.message(&tenant, &message_id).await?;
        let stored = self
            .runner
            .stored_spec(&tenant, message.id)
            .await
            .map_err(from_error)?
            .ok_or_else(|| {
                Status::failed_precondition(
                    "message_id: the run's request was not kept (a run of an earlier version)",
                )
            })?;
        Ok(Response::new(crate::api::convert::exported_run(
            message, stored,
        )))
    }

    async fn get_tool_call(
        &self,
        request: Request<pb::GetToolCallRequest>,
    ) -> Result<Response<pb::GetToolCallResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetToolCallRequest {
            message_id,
            tool_call_id,
            position,
        } = request.into_inner();
        if tool_call_id.is_empty() || tool_call_id.len() > MAX_TOOL_CALL_ID {
            return Err(super::status::invalid(
                "tool_call_id",
                &format!("must be 1 to {MAX_TOOL_CALL_ID} bytes"),
            ));
        }
        let message = self.message(&tenant, &message_id).await?;
        let thoughts = self
            .store
            .all_thoughts(&tenant, message.id)
            .await
            .map_err(from_error)?;
        let (thought, call) = thoughts
            .iter()
            .rev()
            .filter(|thought| position == 0 || thought.position == position)
            .find_map(|thought| {
                let call = thought.tool_calls.iter().find(|c| c.id == tool_call_id)?;
                Some((thought, call))
            })
            .ok_or_else(|| from_error(RunError::not_found("tool call", &tool_call_id)))?;
        // Whole unless the call alone passes what one message may carry.
        let whole = call.observation.as_ref().map_or(0, String::len);
        let shown = call.clone().fitted(SHOWN_TEXT_LIMIT);
        let cut = shown.observation.as_ref().map_or(0, String::len) != whole;
        Ok(Response::new(pb::GetToolCallResponse {
            tool_call: Some(shown.into()),
            position: thought.position,
            thought_id: thought.id.to_string(),
            cut,
        }))
    }

    async fn get_file(
        &self,
        request: Request<pb::GetFileRequest>,
    ) -> Result<Response<pb::File>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::GetFileRequest { file_id } = request.into_inner();
        let id: FileId = parse_id("file_id", &file_id)?;
        let (record, data) = self
            .store
            .get_file(&tenant, id)
            .await
            .map_err(from_error)?
            .ok_or_else(|| from_error(RunError::not_found("file", id)))?;
        Ok(Response::new(pb::File {
            id: record.id.to_string(),
            message_id: record.message_id.to_string(),
            name: record.name.clone(),
            mime_type: record.mime_type.clone(),
            r#type: record.kind().to_owned(),
            size: record.size,
            url: record.url,
            data,
            created_at: Some(super::convert::timestamp(record.created_at)),
        }))
    }

    async fn delete_conversation(
        &self,
        request: Request<pb::DeleteConversationRequest>,
    ) -> Result<Response<pb::DeleteConversationResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let pb::DeleteConversationRequest { conversation_id } = request.into_inner();
        let id: ConversationId = parse_id("conversation_id", &conversation_id)?;
        self.runner
            .delete_conversation(&tenant, id)
            .await
            .map_err(from_error)?;
        Ok(Response::new(pb::DeleteConversationResponse {}))
    }
}

fn page_limit(page_size: u32) -> Result<usize, Status> {
    match usize::try_from(page_size) {
        Ok(0) => Ok(DEFAULT_PAGE_SIZE),
        Ok(n) if n <= MAX_PAGE_SIZE => Ok(n),
        _ => Err(super::status::invalid(
            "page_size",
            &format!("must be between 1 and {MAX_PAGE_SIZE}"),
        )),
    }
}

fn parse_page_token(token: &str) -> Result<u64, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token.parse().map_err(|_| invalid_page_token())
}

fn invalid_page_token() -> Status {
    super::status::invalid("page_token", "is not a token this server issued")
}

/// One page of `items`, each with the key a page token names: at most `limit`, and no more
/// than [`PAGE_BYTES`] encoded unless the first alone is larger (a page always moves the
/// caller on). Reads one item past the page to tell whether more remain, and none after it;
/// the token is empty on the last page.
fn fill_page<T: prost::Message>(
    items: impl Iterator<Item = (u64, T)>,
    limit: usize,
    more: bool,
) -> (Vec<T>, String) {
    let mut page = Vec::new();
    let mut bytes = 0;
    let mut last = None;
    for (key, item) in items {
        let size = item.encoded_len();
        if page.len() == limit || (!page.is_empty() && bytes + size > PAGE_BYTES) {
            let token = last.map_or_else(String::new, |key: u64| key.to_string());
            return (page, token);
        }
        bytes += size;
        last = Some(key);
        page.push(item);
    }
    let token = match (more, last) {
        (true, Some(key)) => key.to_string(),
        _ => String::new(),
    };
    (page, token)
}

/// What the store reads for a page of `limit` records: no more than a response holds, so a
/// page of large records is never read whole only to be cut.
fn page_size_of(limit: usize) -> PageSize {
    PageSize {
        limit,
        max_bytes: PAGE_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thoughts(sizes: &[usize]) -> impl Iterator<Item = (u64, pb::AgentThought)> {
        sizes
            .iter()
            .enumerate()
            .map(|(position, size)| {
                (
                    position as u64 + 1,
                    pb::AgentThought {
                        thought: "t".repeat(*size),
                        ..Default::default()
                    },
                )
            })
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn sizes(page: &[pb::AgentThought]) -> Vec<usize> {
        page.iter().map(|t| t.thought.len()).collect()
    }

    #[test]
    fn a_page_ends_at_its_size_or_before_three_mebibytes() {
        const MIB: usize = 1024 * 1024;
        let (page, token) = fill_page(thoughts(&[10, 20, 30]), 2, false);
        assert_eq!((sizes(&page), token.as_str()), (vec![10, 20], "2"));

        let (page, token) = fill_page(thoughts(&[MIB, MIB, MIB, 10]), 100, false);
        assert_eq!((sizes(&page), token.as_str()), (vec![MIB, MIB], "2"));

        // A record larger than a page alone still makes one, so the caller moves on.
        let (page, token) = fill_page(thoughts(&[4 * MIB, 10]), 100, false);
        assert_eq!((sizes(&page), token.as_str()), (vec![4 * MIB], "1"));

        let (page, token) = fill_page(thoughts(&[10, 20]), 2, false);
        assert_eq!((sizes(&page), token.as_str()), (vec![10, 20], ""));

        // The store stopped reading before the end: the page says where to go on.
        let (page, token) = fill_page(thoughts(&[10, 20]), 5, true);
        assert_eq!((sizes(&page), token.as_str()), (vec![10, 20], "2"));
    }

    /// A round of 30,000 calls (29,872 not run, each with its observation and error) and
    /// one of five 1.1 MB observations encode, as shown, under the 4 MiB a client takes.
    #[test]
    fn a_shown_thought_encodes_under_four_mebibytes_whatever_the_round_held() {
        use crate::domain::{MessageId, Thought, ToolCallRecord, ToolInvokeMeta};
        let call = |n: usize, observation: String| ToolCallRecord {
            id: format!("call_0_{n}"),
            name: "current_time".into(),
            provider: "time".into(),
            arguments: r#"{"timezone": "UTC"}"#.into(),
            observation: Some(observation.clone()),
            meta: Some(ToolInvokeMeta {
                time_cost: 0.0,
                error: Some(observation),
                tool_config: Default::default(),
                usage: None,
                tool_calls: 0,
            }),
        };
        let mut many = Thought::begin(MessageId::new(), 1);
        many.tool_calls = (0..30_000)
            .map(|n| call(n, "not run: more than 128 calls in one round".into()))
            .collect();
        let mut large = Thought::begin(MessageId::new(), 1);
        large.tool_calls = (0..5).map(|n| call(n, "x".repeat(1_100_000))).collect();
        for thought in [many, large] {
            let shown = pb::AgentThought::from(thought.fitted(SHOWN_TEXT_LIMIT).into_owned());
            let size = prost::Message::encoded_len(&shown);
            assert!(size < 4 * 1024 * 1024 - 64 * 1024, "{size} bytes");
        }
    }
}
