//! What every prompt of a run is built from, once, when the run starts: the filled
//! instruction (with what a structured answer must look like), the history, the query and
//! the images a model can see.

use super::agent::Agent;
use crate::llm::{ContentPart, Feature, ResolvedModel};
use crate::runner::spec::{InputImage, RunSpec};
use crate::runner::strategy::PromptContext;

/// What every prompt of the run is built from.
pub(super) fn prompt_context(spec: &RunSpec, agent: &Agent) -> PromptContext {
    let model = &spec.agent.model;
    PromptContext {
        model: model.name.clone(),
        instruction: with_output_instruction(spec.filled_instruction(), agent),
        history: agent.history.turns.clone(),
        query: spec.query.clone(),
        parameters: model.parameters.clone(),
        stop: model.stop.clone(),
        user: spec.user.clone(),
        files: image_parts(spec, &agent.model),
        response_schema: agent
            .output
            .as_ref()
            .filter(|output| output.native)
            .map(|output| output.schema().clone()),
        repair: None,
        keep_tool_choice: spec.agent.keep_tool_choice,
    }
}

/// The instruction, and after it what the answer must look like when the model does not
/// take schemas natively.
fn with_output_instruction(instruction: String, agent: &Agent) -> String {
    let Some(extra) = agent
        .output
        .as_ref()
        .and_then(|output| output.instruction(agent.strategy.kind()))
    else {
        return instruction;
    };
    if instruction.trim().is_empty() {
        extra
    } else {
        format!("{}\n\n{extra}", instruction.trim_end())
    }
}

/// The query's images for a model that can see them; others get the text alone.
fn image_parts(spec: &RunSpec, model: &ResolvedModel) -> Vec<ContentPart> {
    if spec.files.is_empty() {
        return Vec::new();
    }
    if !model.info.has(Feature::Vision) {
        tracing::info!(
            files = spec.files.len(),
            model = %model.info.name,
            "the model has no vision feature; the query's images are left out"
        );
        return Vec::new();
    }
    spec.files.iter().map(InputImage::content_part).collect()
}
