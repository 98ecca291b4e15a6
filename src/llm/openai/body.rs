//! The Chat Completions request body, written from the request's own parts: the
//! conversation and the tools' schemas go to the wire without first being copied into a
//! JSON tree (which cost a copy and a drop of the whole history on every model call).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::llm::{ChatMessage, ChatRequest, ContentPart, ToolCallRequest, ToolSpec};

/// Keys the request body sets itself; caller parameters may not override them.
const RESERVED_KEYS: [&str; 7] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "stop",
    "user",
];

/// The JSON body for a request, streamed or not: what goes on the wire.
pub struct RequestBody<'a> {
    request: &'a ChatRequest,
    stream: bool,
}

impl<'a> RequestBody<'a> {
    /// The body of `request`, asking for a stream when `stream`.
    pub fn new(request: &'a ChatRequest, stream: bool) -> Self {
        Self { request, stream }
    }
}

/// The body for `request` as a JSON value, for those that read it (token counts).
pub fn request_body(request: &ChatRequest, stream: bool) -> Value {
    // Nothing in a request fails to serialise (every map key is a string).
    serde_json::to_value(RequestBody::new(request, stream)).unwrap_or_default()
}

impl Serialize for RequestBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.request;
        let schema = request.response_schema.as_ref();
        let mut body = serializer.serialize_map(None)?;
        for (key, value) in &request.parameters {
            let set_here = RESERVED_KEYS.contains(&key.as_str())
                || (schema.is_some() && key == "response_format");
            if !set_here {
                body.serialize_entry(key, value)?;
            }
        }
        body.serialize_entry("model", &request.model)?;
        body.serialize_entry("messages", &Messages(&request.messages))?;
        body.serialize_entry("stream", &self.stream)?;
        if self.stream {
            body.serialize_entry(
                "stream_options",
                &StreamOptions {
                    include_usage: true,
                },
            )?;
        }
        if !request.tools.is_empty() {
            body.serialize_entry("tools", &Tools(&request.tools))?;
        }
        if !request.stop.is_empty() {
            body.serialize_entry("stop", &request.stop)?;
        }
        if let Some(user) = request.user.as_deref().filter(|user| !user.is_empty()) {
            body.serialize_entry("user", user)?;
        }
        if let Some(schema) = schema {
            // Not strict: strict mode refuses schemas without `additionalProperties: false`
            // everywhere; the answer is validated against the schema afterwards anyway.
            let format = ResponseFormat {
                kind: "json_schema",
                json_schema: NamedSchema {
                    name: "final_answer",
                    schema,
                    strict: false,
                },
            };
            body.serialize_entry("response_format", &format)?;
        }
        body.end()
    }
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(serde::Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: NamedSchema<'a>,
}

#[derive(serde::Serialize)]
struct NamedSchema<'a> {
    name: &'static str,
    schema: &'a Value,
    strict: bool,
}

struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|tool| Function {
            kind: "function",
            function: FunctionSpec {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }))
    }
}

#[derive(serde::Serialize)]
struct Function<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(serde::Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(serde::Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionCall<'a>,
}

#[derive(serde::Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

struct Messages<'a>(&'a [ChatMessage]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Message))
    }
}

struct Message<'a>(&'a ChatMessage);

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut message = serializer.serialize_map(None)?;
        match self.0 {
            ChatMessage::System { content } => {
                message.serialize_entry("role", "system")?;
                message.serialize_entry("content", content)?;
            }
            ChatMessage::User { content } => {
                message.serialize_entry("role", "user")?;
                message.serialize_entry("content", &UserContent(content))?;
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                ..
            } => {
                message.serialize_entry("role", "assistant")?;
                // Beside tool calls an empty string, not `null`: llama.cpp's server answers
                // 500 to a null content there, and OpenAI, vLLM, Ollama and DeepSeek accept
                // both.
                message.serialize_entry("content", content)?;
                if !tool_calls.is_empty() {
                    message.serialize_entry("tool_calls", &Calls(tool_calls))?;
                }
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => {
                message.serialize_entry("role", "tool")?;
                message.serialize_entry("tool_call_id", tool_call_id)?;
                message.serialize_entry("content", content)?;
            }
        }
        message.end()
    }
}

struct Calls<'a>(&'a [ToolCallRequest]);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|call| Call {
            id: &call.id,
            kind: "function",
            function: FunctionCall {
                name: &call.name,
                arguments: &call.arguments,
            },
        }))
    }
}

/// Plain text stays a string (every server accepts that); anything else is a part list.
struct UserContent<'a>(&'a [ContentPart]);

impl Serialize for UserContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let [ContentPart::Text { text }] = self.0 {
            return serializer.serialize_str(text);
        }
        serializer.collect_seq(self.0.iter().map(|part| match part {
            ContentPart::Text { text } => Part::Text { text },
            ContentPart::Image { url, detail } => Part::ImageUrl {
                image_url: ImageUrl { url, detail },
            },
        }))
    }
}

#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(serde::Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
    detail: &'a str,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::System {
                    content: "be brief".into(),
                },
                ChatMessage::user_text("hi"),
                ChatMessage::User {
                    content: vec![
                        ContentPart::Text {
                            text: "what is this?".into(),
                        },
                        ContentPart::Image {
                            url: "data:image/png;base64,AA==".into(),
                            detail: "low".into(),
                        },
                    ],
                },
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCallRequest {
                        id: "c1".into(),
                        name: "time".into(),
                        arguments: "{\"tz\":\"UTC\"}".into(),
                    }],
                    reasoning: Vec::new(),
                },
                ChatMessage::Tool {
                    tool_call_id: "c1".into(),
                    content: "12:00".into(),
                },
                ChatMessage::assistant_text("noon"),
            ],
            tools: vec![ToolSpec {
                name: "time".into(),
                description: "the time".into(),
                parameters: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
            }],
            stop: vec!["Observation:".into()],
            parameters: json!({"temperature": 0.2, "model": "other", "stream": false,
                               "tools": [], "response_format": {"type": "text"}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
            user: Some("u1".into()),
            max_output_bytes: None,
            response_schema: None,
        }
    }

    #[test]
    fn the_body_carries_every_part_of_the_request_in_the_providers_shapes() {
        let body = request_body(&request(), true);
        assert_eq!(
            body,
            json!({
                "temperature": 0.2,
                "response_format": {"type": "text"},
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "low"}}
                    ]},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "time", "arguments": "{\"tz\":\"UTC\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
                    {"role": "assistant", "content": "noon"}
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {
                    "name": "time", "description": "the time",
                    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}],
                "stop": ["Observation:"],
                "user": "u1"
            })
        );
    }

    #[test]
    fn the_body_sets_its_own_keys_once_whatever_the_parameters_say() {
        let mut asked = request();
        asked.tools.clear();
        asked.stop.clear();
        asked.user = Some(String::new());
        asked.response_schema = Some(json!({"type": "object"}));
        let bytes = serde_json::to_vec(&RequestBody::new(&asked, false)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for key in [
            "\"model\"",
            "\"stream\"",
            "\"tools\"",
            "\"response_format\"",
        ] {
            assert!(text.matches(key).count() <= 1, "{key} twice in {text}");
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(body["model"], "m");
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert!(body.get("tools").is_none());
        assert!(body.get("stop").is_none());
        assert!(body.get("user").is_none());
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema",
                   "json_schema": {"name": "final_answer", "schema": {"type": "object"}, "strict": false}})
        );
        assert_eq!(body["temperature"], 0.2);
    }
}
