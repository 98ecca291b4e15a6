//! 100 ENQUEUE runs sent at once by 10 clients into one conversation, and what their
//! records must show: shared by the one-process test and the replicas' one.

use std::net::SocketAddr;
use std::time::Duration;

use agent_runner::pb;

use super::conversation::{enqueued, turns};
use super::{FakeOpenAi, Reply};

/// The configuration edit that lets one conversation queue all of them.
pub fn queue_a_hundred(config: String) -> String {
    config.replacen(
        "[runner]\n",
        "[limits]\nmax_queued_per_conversation = 100\n\n[runner]\n",
        1,
    )
}

/// The scripted model's answer to a prompt whose last user turn is `query`.
pub fn answer_to(query: &str) -> String {
    format!("A:{query}")
}

/// Makes `llm` answer each prompt with [`answer_to`] its last user turn, slowly enough
/// (40 ms) that many runs wait while one streams.
pub fn answer_each_query(llm: &FakeOpenAi) {
    llm.route(|request| {
        let query = turns(request, "user").pop().unwrap_or_default();
        let answer: &'static str = Box::leak(answer_to(&query).into_boxed_str());
        Some(Reply::Slow {
            text: vec![answer],
            delay_ms: 40,
        })
    });
}

/// Sends `Q{sender}-{turn}` for 10 senders of 10 turns each at once into `conversation`,
/// sender `s` through `addrs[s % addrs.len()]`; returns once each run's first event came.
pub async fn send_a_hundred(addrs: &[SocketAddr], conversation: &str) {
    let senders = (0..10).map(|sender| {
        let addr = addrs[sender % addrs.len()];
        let conversation = conversation.to_owned();
        async move {
            let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut client = pb::agent_service_client::AgentServiceClient::new(channel);
            for turn in 0..10 {
                let query = format!("Q{sender}-{turn}");
                let mut stream = client
                    .run(enqueued(&query, &conversation))
                    .await
                    .unwrap()
                    .into_inner();
                stream.message().await.unwrap().expect("a first event");
            }
        }
    });
    futures::future::join_all(senders).await;
}

/// Waits until `llm` has answered `count` model calls.
pub async fn answered(llm: &FakeOpenAi, count: usize) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while llm.requests().len() < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("runs answered in time");
}

/// The conversation's messages (up to 200), in its order.
pub async fn messages_of(client: &mut super::Agents, conversation: &str) -> Vec<pb::Message> {
    client
        .list_messages(pb::ListMessagesRequest {
            conversation_id: conversation.to_owned(),
            page_size: 200,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .messages
}

/// The conversation's 101 messages (the opening `Q0` and the hundred) once all completed.
pub async fn all_completed(client: &mut super::Agents, conversation: &str) -> Vec<pb::Message> {
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let page = messages_of(client, conversation).await;
            let done = pb::MessageStatus::Completed as i32;
            if page.len() == 101 && page.iter().all(|m| m.status == done) {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("every run completes")
}

/// Asserts that `messages` (in the conversation's order) are the 101 sent, none lost and
/// none twice, each answered, and that each run's prompt held every earlier question and
/// answer: they ran one at a time, in the order the store placed them.
pub fn ran_one_at_a_time_in_order(messages: &[pb::Message], llm: &FakeOpenAi) {
    let queries: Vec<String> = messages.iter().map(|m| m.query.clone()).collect();
    let mut sent: Vec<String> = (0..10)
        .flat_map(|s| (0..10).map(move |t| format!("Q{s}-{t}")))
        .collect();
    sent.push("Q0".into());
    let mut placed = queries.clone();
    placed.sort();
    sent.sort();
    assert_eq!(placed, sent, "none lost, none twice");
    let requests = llm.requests();
    for (index, message) in messages.iter().enumerate() {
        assert_eq!(message.answer, answer_to(&message.query));
        // A call cut by the kill is made again: the last one of each run is the one kept.
        let prompt = requests
            .iter()
            .rev()
            .find(|request| turns(request, "user").last() == Some(&message.query))
            .expect("its model call");
        assert_eq!(turns(prompt, "user"), queries[..=index], "run {index}");
        let answers: Vec<String> = queries[..index].iter().map(|q| answer_to(q)).collect();
        assert_eq!(turns(prompt, "assistant"), answers, "run {index}");
    }
}
