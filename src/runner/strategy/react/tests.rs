use serde_json::json;

use super::*;
use crate::llm::ContentPart;

fn context() -> PromptContext {
    PromptContext {
        model: "m".into(),
        instruction: "You answer questions about {{topic}}.".replace("{{topic}}", "time"),
        history: vec![],
        query: "What time is it in Tokyo?".into(),
        parameters: serde_json::Map::new(),
        stop: vec!["\n\nUser:".into()],
        ..PromptContext::default()
    }
}

fn clock() -> OfferedTool {
    OfferedTool {
        name: "current_time".into(),
        description: "Current time".into(),
        parameters: json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
    }
}

fn round() -> RoundRecord {
    RoundRecord {
        reasoning: Vec::new(),
        text: "I need the time.".into(),
        calls: vec![(
            ToolCallRequest {
                id: "c1".into(),
                name: "current_time".into(),
                arguments: "{\"timezone\":\"Asia/Tokyo\"}".into(),
            },
            "09:00".into(),
        )],
        steered: Vec::new(),
    }
}

#[test]
fn chat_prompts_describe_tools_and_replay_the_scratchpad_then_continue() {
    let strategy = ChainOfThought::new(ModelMode::Chat, "");
    let request = strategy.build_request(&context(), &[round()], &[clock()]);
    assert!(
        request.tools.is_empty(),
        "tools are described in the prompt, not offered"
    );
    assert_eq!(
        request.stop,
        vec!["\n\nUser:".to_owned(), "Observation".to_owned()]
    );
    let ChatMessage::System { content } = &request.messages[0] else {
        panic!("no system prompt")
    };
    assert!(content.starts_with("You answer questions about time."));
    assert!(content.contains("\"name\":\"current_time\""));
    assert!(content.contains("Valid actions are \"Final Answer\" and: current_time."));
    assert!(
        !content.contains("{{"),
        "every variable is filled: {content}"
    );
    let ChatMessage::Assistant { content: pad, .. } = &request.messages[2] else {
        panic!("no scratchpad")
    };
    assert_eq!(
        pad,
        "Thought: I need the time.\nAction:\n```json\n{\"action\":\"current_time\",\"action_input\":{\"timezone\":\"Asia/Tokyo\"}}\n```\nObservation: 09:00\n\n"
    );
    assert_eq!(request.messages[3], ChatMessage::user_text("continue"));
}

#[test]
fn completion_prompts_are_one_message_with_a_single_question_line() {
    let strategy = ChainOfThought::new(ModelMode::Completion, "");
    let request = strategy.build_request(&context(), &[round()], &[clock()]);
    assert_eq!(request.messages.len(), 1);
    let ChatMessage::User { content } = &request.messages[0] else {
        panic!("not a user message")
    };
    let ContentPart::Text { text } = &content[0] else {
        panic!("not text")
    };
    assert!(
        text.contains("\nQuestion: What time is it in Tokyo?\nThought: I need the time."),
        "{text}"
    );
    assert!(!text.contains("Question: Question:"));
    assert!(text.ends_with("Observation: 09:00\n\nThought:"), "{text}");
}

#[test]
fn a_custom_template_replaces_the_default() {
    let strategy = ChainOfThought::new(ModelMode::Chat, "Tools: {{tool_names}}. {{instruction}}");
    let request = strategy.build_request(&context(), &[], &[clock()]);
    assert_eq!(
        request.messages[0],
        ChatMessage::System {
            content: "Tools: current_time. You answer questions about time.".into()
        }
    );
}

fn read(text_chunks: &[&str], tools: &[OfferedTool]) -> (String, ModelStep) {
    let strategy = ChainOfThought::new(ModelMode::Chat, "");
    let mut reader = strategy.reader(tools);
    let mut visible: String = text_chunks.iter().map(|c| reader.push(c)).collect();
    visible.push_str(&reader.flush());
    (visible, reader.finish(TurnEnd::default()))
}

#[test]
fn an_action_becomes_a_tool_call_and_only_the_thought_is_shown() {
    let (visible, step) = read(
        &["Thought: I need the ti", "me.\nAction:\n```json\n{\"action\": \"current_time\", \"action_input\": \"Asia/Tokyo\"}\n```"],
        &[clock()],
    );
    assert_eq!(visible, "I need the time.\n\n");
    assert_eq!(step.thought, "I need the time.");
    assert_eq!(step.calls.len(), 1);
    assert_eq!(step.calls[0].name, "current_time");
    assert_eq!(
        step.calls[0].arguments, "{\"timezone\":\"Asia/Tokyo\"}",
        "a plain string goes to the only parameter"
    );
    assert!(step.answer.is_empty() && step.unshown.is_empty());
}

#[test]
fn string_inputs_that_are_json_objects_are_parsed_for_the_tool() {
    let (_, step) = read(
        &["{\"action\": \"lookup\", \"action_input\": \"{\\\"q\\\": 1}\"}"],
        &[],
    );
    assert_eq!(step.calls[0].arguments, "{\"q\": 1}");
}

#[test]
fn the_final_answer_action_is_the_answer_and_is_not_yet_shown() {
    let (visible, step) = read(
        &["Thought: I know.\nAction: ```json\n{\"action\": \"Final Answer\", \"action_input\": {\"time\": \"09:00\"}}\n```"],
        &[],
    );
    assert_eq!(visible, "I know.\n");
    assert!(step.calls.is_empty());
    assert_eq!(step.answer, "{\"time\":\"09:00\"}");
    assert_eq!(step.unshown, step.answer, "not yet shown");
}

#[test]
fn a_reply_without_an_action_is_itself_the_answer() {
    let (visible, step) = read(&["It is nine ", "o'clock."], &[]);
    assert_eq!(visible, "It is nine o'clock.");
    assert_eq!(step.answer, "It is nine o'clock.");
    assert!(step.unshown.is_empty(), "already shown");
    let (_, marked) = read(&["Thought: easy\nFinal Answer: Nine."], &[]);
    assert_eq!(marked.answer, "Nine.");
    assert_eq!(marked.thought, "easy");
}

#[test]
fn a_steers_text_follows_the_observation_it_came_after() {
    let mut steered = round();
    steered.steered = vec!["Make it Osaka.".into()];
    let pad = super::scratchpad(&[steered, round()]);
    let osaka = pad
        .find("The user adds: Make it Osaka.")
        .expect("the text is there");
    let observations: Vec<_> = pad.match_indices("Observation: 09:00").collect();
    assert!(
        observations[0].0 < osaka && osaka < observations[1].0,
        "{pad}"
    );
}
