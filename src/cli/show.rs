//! `show` (a stored message and its thoughts as a tree) and `tools` (what agents can call).

use std::fmt::Write as _;

use super::args::{ClientArgs, ShowArgs, ToolsArgs};
use super::connection::{agents, registry, status_error};
use super::json;
use super::render::{one_line, tool_name, Paint};
use crate::pb;

/// How much of an observation or answer a tree line shows.
const SHOWN_CHARS: usize = 300;

/// `agent-runner show`: the lines to print.
pub async fn show(server: &ClientArgs, args: ShowArgs) -> anyhow::Result<String> {
    let mut client = agents(server).await?;
    let message = client
        .get_message(pb::GetMessageRequest {
            message_id: args.message_id.clone(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let mut thoughts = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_thoughts(pb::ListThoughtsRequest {
                message_id: args.message_id.clone(),
                page_size: 0,
                page_token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        thoughts.extend(page.thoughts);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    if args.json {
        let mut shown = json::message_json(&message);
        if let Some(object) = shown.as_object_mut() {
            object.insert(
                "thoughts".to_owned(),
                thoughts.iter().map(json::thought_json).collect(),
            );
        }
        return Ok(format!("{shown}\n"));
    }
    Ok(tree(&message, &thoughts, Paint::for_stdout()))
}

/// A message and its rounds as a tree:
///
/// ```text
/// message 0192… · completed · openai/gpt-4o-mini · function calling
/// query: What time is it in Tokyo?
/// ├─ round 1 · tokens 50 in, 12 out · 0.41s
/// │  └─ time/current_time {"timezone": "Asia/Tokyo"} → 2026-11-23 13:00 (0.00s)
/// └─ round 2 · tokens 80 in, 9 out · 0.30s
///    └─ answer: It is 1 pm in Tokyo.
/// ```
fn tree(message: &pb::Message, thoughts: &[pb::AgentThought], p: Paint) -> String {
    let mut out = String::new();
    let status = json::status_name(message.status);
    let status = match pb::MessageStatus::try_from(message.status) {
        Ok(pb::MessageStatus::Completed) => p.green(&status),
        Ok(pb::MessageStatus::Failed | pb::MessageStatus::Interrupted) => p.red(&status),
        Ok(_) | Err(_) => p.yellow(&status),
    };
    let _ = writeln!(
        out,
        "{} · {status} · {}/{} · {}",
        p.bold(&format!("message {}", message.id)),
        message.provider,
        message.model,
        json::strategy_name(message.strategy).replace('_', " ")
    );
    let _ = writeln!(
        out,
        "{}",
        p.dim(&format!("conversation {}", message.conversation_id))
    );
    let _ = writeln!(out, "query: {}", one_line(&message.query, SHOWN_CHARS));
    for (index, thought) in thoughts.iter().enumerate() {
        let last_round = index + 1 == thoughts.len();
        let (branch, stem) = if last_round {
            ("└─", "   ")
        } else {
            ("├─", "│  ")
        };
        let usage = thought.usage.clone().unwrap_or_default();
        let _ = writeln!(
            out,
            "{branch} round {} {}",
            thought.position,
            p.dim(&format!(
                "· tokens {} in, {} out · {:.2}s",
                usage.prompt_tokens, usage.completion_tokens, usage.latency
            ))
        );
        let mut leaves: Vec<String> = Vec::new();
        if !thought.thought.trim().is_empty() && !thought.tool_calls.is_empty() {
            leaves.push(p.dim(&format!(
                "thought: {}",
                one_line(&thought.thought, SHOWN_CHARS)
            )));
        }
        for call in &thought.tool_calls {
            leaves.push(call_leaf(call, p));
        }
        if thought.tool_calls.is_empty() && !thought.answer.trim().is_empty() {
            leaves.push(format!(
                "answer: {}",
                one_line(&thought.answer, SHOWN_CHARS)
            ));
        }
        for (i, leaf) in leaves.iter().enumerate() {
            let twig = if i + 1 == leaves.len() {
                "└─"
            } else {
                "├─"
            };
            let _ = writeln!(out, "{stem}{twig} {leaf}");
        }
    }
    if let Some(error) = &message.error {
        let _ = writeln!(
            out,
            "{}",
            p.red(&format!("error: {}: {}", error.code, error.message))
        );
    }
    let usage = message.usage.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "{}",
        p.dim(&format!(
            "{} · {} rounds · tokens {} in, {} out{} · {:.2}s",
            json::finish_reason_name(message.finish_reason),
            message.iterations,
            usage.prompt_tokens,
            usage.completion_tokens,
            if usage.total_price.is_empty() {
                String::new()
            } else {
                format!(" · {} {}", usage.total_price, usage.currency)
            },
            usage.latency
        ))
    );
    out
}

fn call_leaf(call: &pb::ToolCall, p: Paint) -> String {
    let meta = call.meta.clone().unwrap_or_default();
    let result = format!(
        "{} ({:.2}s)",
        one_line(&call.observation, SHOWN_CHARS),
        meta.time_cost
    );
    let result = if meta.error.is_empty() {
        result
    } else {
        p.red(&result)
    };
    format!(
        "{} {} → {result}",
        p.cyan(&tool_name(call)),
        one_line(&call.arguments, SHOWN_CHARS)
    )
}

/// `agent-runner tools`: one line per tool, `provider/name  description`.
pub async fn tools(server: &ClientArgs, args: ToolsArgs) -> anyhow::Result<String> {
    let mut client = registry(server).await?;
    let tools = client
        .list_tools(pb::ListToolsRequest {
            provider: args.provider.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .tools;
    let p = Paint::for_stdout();
    let mut out = String::new();
    for tool in tools {
        let also = if tool.original_name.is_empty() {
            String::new()
        } else {
            format!(" (also {})", tool.original_name)
        };
        let _ = writeln!(
            out,
            "{}{also}  {}",
            p.cyan(&format!("{}/{}", tool.provider, tool.name)),
            p.dim(&one_line(&tool.description, 120))
        );
    }
    Ok(out)
}
