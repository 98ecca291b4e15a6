//! A final answer held to a JSON Schema: how the model is told, how an answer is checked,
//! and what the repair round says. No I/O: the loop decides when to check and what a
//! failure ends in.

use serde_json::Value;

use crate::domain::{FieldError, StrategyKind};
use crate::runner::spec::{OutputFallback, OutputSpec};
use crate::runner::strategy::Repair;
use crate::tools::schema::{PatternBudget, Schema, SchemaError};

/// The most validation problems an answer's check reports.
const MAX_PROBLEMS: usize = 10;

/// The run's output schema, compiled.
pub struct Output {
    schema: Schema,
    /// What an answer that stays invalid ends in.
    pub fallback: OutputFallback,
    /// The model takes the schema natively (OpenAI's `response_format`).
    pub native: bool,
}

impl Output {
    /// Checks `spec`'s schema (its patterns counted against the request's `budget`);
    /// `native` when the model takes schemas itself. The answer is one JSON object, as
    /// OpenAI requires of `response_format`, so the schema must describe one.
    pub fn new(
        spec: &OutputSpec,
        native: bool,
        budget: &mut PatternBudget,
    ) -> Result<Self, FieldError> {
        let field = "agent.output_schema";
        let schema = Schema::check(&spec.schema, budget)
            .map_err(|err: SchemaError| FieldError::new(field, err.to_string()))?;
        let object = match spec.schema.get("type") {
            Some(Value::String(kind)) => kind == "object",
            Some(Value::Array(kinds)) => kinds.len() == 1 && kinds[0] == "object",
            _ => false,
        };
        if !object {
            return Err(FieldError::new(field, "must describe a JSON object"));
        }
        Ok(Self {
            schema,
            fallback: spec.fallback,
            native,
        })
    }

    /// The schema, for native structured output.
    pub fn schema(&self) -> &Value {
        self.schema.value()
    }

    /// What the instruction adds for a model that does not take schemas natively.
    pub fn instruction(&self, strategy: StrategyKind) -> Option<String> {
        if self.native {
            return None;
        }
        let what = match strategy {
            StrategyKind::FunctionCalling => {
                "Your final answer must be a single JSON document, and nothing else,"
            }
            StrategyKind::ChainOfThought => {
                "The action_input of your Final Answer must be a single JSON document"
            }
        };
        Some(format!(
            "{what} valid against this JSON Schema:\n{}",
            self.schema.value()
        ))
    }

    /// The document `answer` holds, or what is wrong with it.
    pub fn check(&self, answer: &str) -> Result<Value, String> {
        let document = document_in(answer)?;
        let validator = self
            .schema
            .validator()
            .map_err(|err| format!("the output schema {err}"))?;
        let problems: Vec<String> = validator
            .iter_errors(&document)
            .take(MAX_PROBLEMS)
            .map(|err| {
                let at = err.instance_path().to_string();
                if at.is_empty() {
                    err.to_string()
                } else {
                    format!("at {at}: {err}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(document)
        } else {
            Err(problems.join("; "))
        }
    }

    /// The repair round's request: the answer back, with what is wrong.
    pub fn repair(answer: &str, problems: &str) -> Repair {
        Repair {
            answer: answer.to_owned(),
            problems: problems.to_owned(),
        }
    }
}

/// The JSON document of an answer, allowing the code fence models like to put around it.
fn document_in(answer: &str) -> Result<Value, String> {
    let text = answer.trim();
    let text = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|inner| inner.trim_end().strip_suffix("```"))
        .unwrap_or(text)
        .trim();
    if text.is_empty() {
        return Err("the answer is empty, not a JSON document".to_owned());
    }
    serde_json::from_str(text).map_err(|err| format!("the answer is not a JSON document ({err})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn output() -> Output {
        let spec = OutputSpec {
            schema: json!({"type": "object", "properties": {"city": {"type": "string"},
                "temp": {"type": "integer"}}, "required": ["city", "temp"]}),
            fallback: OutputFallback::Text,
        };
        Output::new(&spec, false, &mut PatternBudget::new()).unwrap()
    }

    #[test]
    fn answers_are_read_as_documents_and_checked() {
        let output = output();
        assert_eq!(
            output.check("```json\n{\"city\": \"Paris\", \"temp\": 21}\n```"),
            Ok(json!({"city": "Paris", "temp": 21}))
        );
        let missing = output.check(r#"{"city": "Paris"}"#).unwrap_err();
        assert!(
            missing.contains("\"temp\" is a required property"),
            "{missing}"
        );
        let typed = output
            .check(r#"{"city": "Paris", "temp": "warm"}"#)
            .unwrap_err();
        assert!(typed.starts_with("at /temp: "), "{typed}");
        assert!(output
            .check("It is warm in Paris.")
            .unwrap_err()
            .contains("not a JSON document"));
        assert!(output.check("  ").is_err());
    }

    #[test]
    fn a_schema_that_does_not_compile_names_the_field() {
        let spec = OutputSpec {
            schema: json!({"type": "no-such-type"}),
            fallback: OutputFallback::Error,
        };
        let err = Output::new(&spec, false, &mut PatternBudget::new())
            .err()
            .unwrap();
        assert!(err
            .to_string()
            .starts_with("agent.output_schema is not a valid JSON Schema"));
    }

    #[test]
    fn a_schema_of_anything_but_an_object_is_refused() {
        for schema in [
            json!({"type": "array", "items": {"type": "string"}}),
            json!({"type": "integer"}),
            json!({"properties": {"a": {"type": "string"}}}),
        ] {
            let spec = OutputSpec {
                schema,
                fallback: OutputFallback::Text,
            };
            let err = Output::new(&spec, false, &mut PatternBudget::new())
                .err()
                .unwrap();
            assert_eq!(
                err.to_string(),
                "agent.output_schema must describe a JSON object"
            );
        }
    }

    #[test]
    fn the_instruction_fits_the_strategy_and_native_models_need_none() {
        let output = output();
        let fc = output.instruction(StrategyKind::FunctionCalling).unwrap();
        assert!(fc.contains("\"required\":[\"city\",\"temp\"]"), "{fc}");
        let react = output.instruction(StrategyKind::ChainOfThought).unwrap();
        assert!(react.starts_with("The action_input of your Final Answer"));
        let native = Output {
            native: true,
            ..output
        };
        assert!(native.instruction(StrategyKind::FunctionCalling).is_none());
    }
}
