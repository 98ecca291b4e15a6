//! What the conversation-policy tests share: requests under a policy, a reply slow enough
//! that another run arrives while it streams, and what a scripted model was sent.

use agent_runner::pb;
use serde_json::Value;

use super::{read_until_delta, run_request, Reply};

/// A reply slow enough that other runs arrive while it streams (about 600 ms).
pub fn slow_answer() -> Reply {
    Reply::Slow {
        text: vec!["slow ", "answer ", "still ", "going"],
        delay_ms: 150,
    }
}

/// A run of `query` in `conversation_id` under `policy`.
pub fn asking(
    query: &str,
    conversation_id: &str,
    policy: pb::ConversationPolicy,
) -> pb::RunRequest {
    pb::RunRequest {
        conversation_id: conversation_id.to_owned(),
        conversation_policy: policy.into(),
        ..run_request(query, &[])
    }
}

/// A run of `query` in `conversation_id`, queued when a run is live there.
pub fn enqueued(query: &str, conversation_id: &str) -> pb::RunRequest {
    asking(query, conversation_id, pb::ConversationPolicy::Enqueue)
}

/// The text of every turn of `role` the model was sent in `request`.
pub fn turns(request: &Value, role: &str) -> Vec<String> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Starts `request` on `client` and reads its events up to the first answer delta: a run
/// live for the test to send others beside.
pub async fn streaming(
    client: &mut super::Agents,
    request: pb::RunRequest,
) -> (tonic::Streaming<pb::RunEvent>, Vec<pb::RunEvent>) {
    let mut stream = client.run(request).await.unwrap().into_inner();
    let seen = read_until_delta(&mut stream).await;
    (stream, seen)
}
