//! `lf.a2a.v1.A2AService`, the A2A protocol's gRPC binding, over our runs: a task is a
//! message, a context a conversation, and the request's `tenant` field names the stored
//! agent (see [`route`]). Our tenant comes from the caller's key as everywhere, so another
//! tenant's agents and tasks are not found. Opt-in with `[a2a] enabled`.

pub mod card;
mod errors;
mod events;
mod input;
mod route;
mod task;

use std::pin::Pin;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::a2a_pb as a2a;
use crate::a2a_pb::a2a_service_server::A2aService;
use crate::api::auth::{caller_of, tenant_of};
use crate::api::convert::run_spec;
use crate::api::status::{from_error, invalid};
use crate::domain::{EventEnvelope, Message, MessageId, Tenant};
use crate::runner::{EventStream, Runner};
use crate::store::Store;
use crate::telemetry::TraceParent;
pub use errors::A2aError;
use events::TaskEvents;
pub use route::{Route, PROTOCOL_VERSION, TOOL_CALLS_EXTENSION};
use task::{task_of, TaskIds};

/// The stream of `SendStreamingMessage` and `SubscribeToTask`.
pub type TaskStream = Pin<Box<dyn Stream<Item = Result<a2a::StreamResponse, Status>> + Send>>;

/// Most tasks one `ListTasks` page holds.
const MAX_PAGE_SIZE: usize = 100;
/// Tasks a page holds when the request names no size.
const DEFAULT_PAGE_SIZE: usize = 20;

/// Implements `A2AService`.
pub struct A2aApi {
    runner: Runner,
    store: Store,
}

impl A2aApi {
    /// Handlers over `runner` and `store`.
    pub fn new(runner: Runner, store: Store) -> Self {
        Self { runner, store }
    }

    /// The task `id` of the agent `route` names, for `tenant`; any other is not found.
    async fn task_message(
        &self,
        tenant: &Tenant,
        route: &Route,
        id: &str,
    ) -> Result<Message, Status> {
        let not_found = || Status::from(A2aError::TaskNotFound(id.chars().take(64).collect()));
        let parsed: MessageId = id.parse().map_err(|_| not_found())?;
        let message = self
            .store
            .get_message(tenant, parsed)
            .await
            .map_err(from_error)?
            .ok_or_else(not_found)?;
        let of_agent = message
            .agent
            .as_ref()
            .is_some_and(|pin| pin.agent_id == route.agent_id);
        if !of_agent || message.parent.is_some() {
            return Err(not_found());
        }
        Ok(message)
    }

    /// What a waiting task waits on: its last event.
    async fn waiting_event(
        &self,
        tenant: &Tenant,
        message: &Message,
    ) -> Result<Option<EventEnvelope>, Status> {
        if message.status.is_terminal() {
            return Ok(None);
        }
        self.store
            .last_event(tenant, message.id)
            .await
            .map_err(from_error)
    }

    /// The task `message` is now, as `GetTask` shows it.
    async fn task_now(
        &self,
        tenant: &Tenant,
        message: &Message,
        history_length: Option<i32>,
    ) -> Result<a2a::Task, Status> {
        let waiting = self.waiting_event(tenant, message).await?;
        Ok(task_of(
            message,
            waiting.as_ref().map(|e| &e.event),
            history_length,
        ))
    }

    /// A page of the agent's tasks, newest first; the token is the last task's id.
    async fn agent_page(
        &self,
        tenant: &Tenant,
        route: &Route,
        token: &str,
        size: usize,
    ) -> Result<(Vec<MessageId>, String), Status> {
        let before = match token {
            "" => None,
            token => Some(
                token
                    .parse::<MessageId>()
                    .map_err(|_| invalid("page_token", "is not a token this service gave"))?,
            ),
        };
        let page = self
            .store
            .agent_message_ids(tenant, &route.agent_id, before, size)
            .await
            .map_err(from_error)?;
        let next = match (page.more, page.items.last()) {
            (true, Some(last)) => last.to_string(),
            _ => String::new(),
        };
        Ok((page.items, next))
    }

    /// A page of a context's tasks, newest first; the token is the last one's place.
    async fn context_page(
        &self,
        tenant: &Tenant,
        context_id: &str,
        token: &str,
        size: usize,
    ) -> Result<(Vec<MessageId>, String), Status> {
        let conversation = context_id
            .parse()
            .map_err(|_| invalid("context_id", "is not a context of this service"))?;
        let before = match token {
            "" => u64::MAX,
            token => token
                .parse::<u64>()
                .map_err(|_| invalid("page_token", "is not a token this service gave"))?,
        };
        let page = self
            .store
            .message_ids_before(tenant, conversation, before, size)
            .await
            .map_err(from_error)?;
        let next = match (page.more, page.items.last()) {
            (true, Some((seq, _))) => seq.to_string(),
            _ => String::new(),
        };
        Ok((page.items.into_iter().map(|(_, id)| id).collect(), next))
    }

    /// Starts a task for `request`, or answers the waiting task it names; returns the task
    /// as it starts and its events from there.
    async fn send(&self, request: Request<a2a::SendMessageRequest>) -> Result<Sent, Status> {
        route::check_version(request.metadata())?;
        let caller = caller_of(&request)?;
        let extension = route::declared(request.metadata(), TOOL_CALLS_EXTENSION);
        let trace_parent = TraceParent::from_headers(request.metadata().as_ref());
        let a2a::SendMessageRequest {
            tenant: routing,
            message,
            configuration,
            metadata: _,
        } = request.into_inner();
        let route = route::route(&routing)?;
        let message = message.ok_or_else(|| invalid("message", "is required"))?;
        let configuration = configuration.unwrap_or_default();
        if configuration.task_push_notification_config.is_some() {
            return Err(A2aError::PushNotificationNotSupported.into());
        }
        let options = SendOptions {
            return_immediately: configuration.return_immediately,
            history_length: configuration.history_length,
        };
        if !message.task_id.is_empty() {
            return self
                .answer(&caller.tenant, &route, message, extension, options)
                .await;
        }
        let needs = self.needs_extension(&caller.tenant, &route).await?;
        if needs && !extension {
            return Err(A2aError::ExtensionSupportRequired(TOOL_CALLS_EXTENSION.to_owned()).into());
        }
        let run_request = input::run_request(&route, message)?;
        let mut spec = run_spec(caller.tenant, run_request, None)?;
        spec.trace_parent = trace_parent;
        spec.limits = caller.limits;
        let handle = self
            .runner
            .start(spec, self.runner.run_token())
            .await
            .map_err(from_error)?;
        let ids = TaskIds {
            task_id: handle.message_id.to_string(),
            context_id: handle.conversation_id.to_string(),
        };
        Ok(Sent {
            first: input::submitted(&ids, &routing),
            ids,
            events: handle.events,
            options,
        })
    }

    /// Whether the agent's version, or any sub-agent below it, has approvals or client
    /// tools, which travel only through the tool-calls extension.
    async fn needs_extension(&self, tenant: &Tenant, route: &Route) -> Result<bool, Status> {
        let reference = crate::runner::AgentReference {
            agent_id: route.agent_id.clone(),
            pick: route.pick.clone(),
            overrides: Default::default(),
        };
        let (_, definition) = self
            .runner
            .read_version(tenant, &reference)
            .await
            .map_err(from_error)?;
        Ok(self.runner.tree_waits_on_caller(tenant, &definition).await)
    }

    /// A message to the task it names: decisions or outputs for a waiting task; anything
    /// else is not possible.
    async fn answer(
        &self,
        tenant: &Tenant,
        route: &Route,
        message: a2a::Message,
        extension: bool,
        options: SendOptions,
    ) -> Result<Sent, Status> {
        let task = self.task_message(tenant, route, &message.task_id).await?;
        let state = task::task_state(task.status);
        if state != a2a::TaskState::InputRequired {
            let why = if task::is_open(state) {
                "the task is working; wait for it, subscribe to it or cancel it"
            } else {
                "the task has ended; send a new message with its context_id to go on"
            };
            return Err(A2aError::UnsupportedOperation(why.to_owned()).into());
        }
        if !extension {
            return Err(A2aError::ExtensionSupportRequired(TOOL_CALLS_EXTENSION.to_owned()).into());
        }
        let after = self
            .store
            .last_event(tenant, task.id)
            .await
            .map_err(from_error)?
            .map_or(0, |event| event.seq);
        match input::reply(&message)? {
            input::Reply::Decisions(decisions) => self
                .runner
                .approve_routed(tenant, task.id, decisions)
                .await
                .map_err(from_error)?,
            input::Reply::Outputs(outputs) => self
                .runner
                .submit_routed(tenant, task.id, outputs)
                .await
                .map_err(from_error)?,
        }
        let events = self
            .runner
            .attach(tenant, task.id, after)
            .await
            .map_err(from_error)?;
        let mut first = task_of(&task, None, options.history_length);
        if let Some(status) = &mut first.status {
            status.state = a2a::TaskState::Working.into();
            status.message = None;
        }
        Ok(Sent {
            ids: TaskIds {
                task_id: task.id.to_string(),
                context_id: task.conversation_id.to_string(),
            },
            first,
            events,
            options,
        })
    }
}

/// How the client asked a send to be answered.
#[derive(Debug, Clone, Copy)]
struct SendOptions {
    return_immediately: bool,
    history_length: Option<i32>,
}

/// A task started (or answered) by a send.
struct Sent {
    ids: TaskIds,
    first: a2a::Task,
    events: EventStream,
    options: SendOptions,
}

/// The task as it is first sent, then its events until it ends or waits.
fn task_stream(first: a2a::Task, ids: TaskIds, events: EventStream) -> TaskStream {
    let head = futures::stream::once(async move {
        Ok(a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::Task(first)),
        })
    });
    let state = (events, TaskEvents::new(ids), false);
    let rest = futures::stream::unfold(state, |(mut events, mut convert, done)| async move {
        if done {
            return None;
        }
        loop {
            match events.next().await? {
                Err(err) => return Some((vec![Err(from_error(err))], (events, convert, true))),
                Ok(envelope) => {
                    let (out, done) = convert.convert(&envelope.event);
                    if out.is_empty() && !done {
                        continue;
                    }
                    let out = out.into_iter().map(Ok).collect::<Vec<_>>();
                    return Some((out, (events, convert, done)));
                }
            }
        }
    })
    .flat_map(futures::stream::iter);
    Box::pin(head.chain(rest))
}

#[tonic::async_trait]
impl A2aService for A2aApi {
    type SendStreamingMessageStream = TaskStream;
    type SubscribeToTaskStream = TaskStream;

    async fn send_message(
        &self,
        request: Request<a2a::SendMessageRequest>,
    ) -> Result<Response<a2a::SendMessageResponse>, Status> {
        let tenant = tenant_of(&request)?;
        let Sent {
            ids,
            first,
            mut events,
            options,
        } = self.send(request).await?;
        if !options.return_immediately {
            let mut convert = TaskEvents::new(ids.clone());
            while let Some(item) = events.next().await {
                let envelope = item.map_err(from_error)?;
                if convert.convert(&envelope.event).1 {
                    break;
                }
            }
        }
        drop(events);
        let task = match ids.task_id.parse::<MessageId>() {
            Ok(id) => match self
                .store
                .get_message(&tenant, id)
                .await
                .map_err(from_error)?
            {
                Some(message) => {
                    self.task_now(&tenant, &message, options.history_length)
                        .await?
                }
                None => first,
            },
            Err(_) => first,
        };
        Ok(Response::new(a2a::SendMessageResponse {
            payload: Some(a2a::send_message_response::Payload::Task(task)),
        }))
    }

    async fn send_streaming_message(
        &self,
        request: Request<a2a::SendMessageRequest>,
    ) -> Result<Response<TaskStream>, Status> {
        let Sent {
            ids, first, events, ..
        } = self.send(request).await?;
        Ok(Response::new(task_stream(first, ids, events)))
    }

    async fn get_task(
        &self,
        request: Request<a2a::GetTaskRequest>,
    ) -> Result<Response<a2a::Task>, Status> {
        route::check_version(request.metadata())?;
        let tenant = tenant_of(&request)?;
        let a2a::GetTaskRequest {
            tenant: routing,
            id,
            history_length,
        } = request.into_inner();
        let route = route::route(&routing)?;
        let message = self.task_message(&tenant, &route, &id).await?;
        Ok(Response::new(
            self.task_now(&tenant, &message, history_length).await?,
        ))
    }

    async fn list_tasks(
        &self,
        request: Request<a2a::ListTasksRequest>,
    ) -> Result<Response<a2a::ListTasksResponse>, Status> {
        route::check_version(request.metadata())?;
        let tenant = tenant_of(&request)?;
        let a2a::ListTasksRequest {
            tenant: routing,
            context_id,
            status,
            page_size,
            page_token,
            history_length,
            status_timestamp_after,
            include_artifacts,
        } = request.into_inner();
        let after = status_timestamp_after.and_then(|t| {
            chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
        });
        let route = route::route(&routing)?;
        let size = match page_size {
            None | Some(0) => DEFAULT_PAGE_SIZE,
            Some(n) if n < 0 => return Err(invalid("page_size", "must not be negative")),
            Some(n) => usize::try_from(n)
                .unwrap_or(MAX_PAGE_SIZE)
                .min(MAX_PAGE_SIZE),
        };
        let wanted = a2a::TaskState::try_from(status).unwrap_or(a2a::TaskState::Unspecified);
        let (ids, next_page_token) = if context_id.is_empty() {
            self.agent_page(&tenant, &route, &page_token, size).await?
        } else {
            self.context_page(&tenant, &context_id, &page_token, size)
                .await?
        };
        let mut tasks = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(message) = self
                .store
                .get_message(&tenant, id)
                .await
                .map_err(from_error)?
            else {
                continue;
            };
            let of_agent = message
                .agent
                .as_ref()
                .is_some_and(|pin| pin.agent_id == route.agent_id);
            let too_old = after.is_some_and(|after| message.updated_at <= after);
            if !of_agent || message.parent.is_some() || too_old {
                continue;
            }
            let mut task = self.task_now(&tenant, &message, history_length).await?;
            if wanted != a2a::TaskState::Unspecified
                && task.status.as_ref().map(|s| s.state) != Some(wanted.into())
            {
                continue;
            }
            if include_artifacts != Some(true) {
                task.artifacts.clear();
            }
            tasks.push(task);
        }
        Ok(Response::new(a2a::ListTasksResponse {
            page_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
            total_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
            tasks,
            next_page_token,
        }))
    }

    async fn cancel_task(
        &self,
        request: Request<a2a::CancelTaskRequest>,
    ) -> Result<Response<a2a::Task>, Status> {
        route::check_version(request.metadata())?;
        let tenant = tenant_of(&request)?;
        let a2a::CancelTaskRequest {
            tenant: routing,
            id,
            metadata: _,
        } = request.into_inner();
        let route = route::route(&routing)?;
        let message = self.task_message(&tenant, &route, &id).await?;
        if message.status.is_terminal() {
            return Err(A2aError::TaskNotCancelable(id).into());
        }
        self.runner
            .cancel(&tenant, message.id)
            .await
            .map_err(from_error)?;
        let message = self.task_message(&tenant, &route, &id).await?;
        Ok(Response::new(self.task_now(&tenant, &message, None).await?))
    }

    async fn subscribe_to_task(
        &self,
        request: Request<a2a::SubscribeToTaskRequest>,
    ) -> Result<Response<TaskStream>, Status> {
        route::check_version(request.metadata())?;
        let caller = caller_of(&request)?;
        let tenant = caller.tenant.clone();
        let a2a::SubscribeToTaskRequest {
            tenant: routing,
            id,
        } = request.into_inner();
        let route = route::route(&routing)?;
        let message = self.task_message(&tenant, &route, &id).await?;
        if message.status.is_terminal() {
            return Err(A2aError::UnsupportedOperation(
                "the task has ended; read it with GetTask".to_owned(),
            )
            .into());
        }
        let first = self.task_now(&tenant, &message, None).await?;
        let events = self
            .runner
            .attach_for_client(&tenant, message.id, 0, caller.limits.max_follow_streams)
            .await
            .map_err(from_error)?;
        let ids = TaskIds {
            task_id: message.id.to_string(),
            context_id: message.conversation_id.to_string(),
        };
        Ok(Response::new(task_stream(first, ids, events)))
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<a2a::TaskPushNotificationConfig>,
    ) -> Result<Response<a2a::TaskPushNotificationConfig>, Status> {
        route::check_version(request.metadata())?;
        Err(A2aError::PushNotificationNotSupported.into())
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<a2a::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<a2a::TaskPushNotificationConfig>, Status> {
        route::check_version(request.metadata())?;
        Err(A2aError::PushNotificationNotSupported.into())
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<a2a::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<a2a::ListTaskPushNotificationConfigsResponse>, Status> {
        route::check_version(request.metadata())?;
        Err(A2aError::PushNotificationNotSupported.into())
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<a2a::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        route::check_version(request.metadata())?;
        Err(A2aError::PushNotificationNotSupported.into())
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<a2a::GetExtendedAgentCardRequest>,
    ) -> Result<Response<a2a::AgentCard>, Status> {
        route::check_version(request.metadata())?;
        Err(A2aError::ExtendedAgentCardNotConfigured.into())
    }
}
