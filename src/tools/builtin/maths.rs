//! The `maths` provider: `eval_expression`, evaluated by an expression interpreter that has
//! no access to files, processes or the network.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::tools::{Tool, ToolError};

/// Longest expression accepted; keeps evaluation time bounded.
const MAX_EXPRESSION_LEN: usize = 2_000;

/// Evaluates an arithmetic or logical expression.
pub struct EvalExpression;

/// Arguments of [`EvalExpression`].
#[derive(Deserialize)]
pub struct EvalExpressionArgs {
    expression: String,
}

impl Tool for EvalExpression {
    const NAME: &'static str = "eval_expression";
    const IDEMPOTENT: bool = true;
    type Args = EvalExpressionArgs;

    fn description(&self) -> String {
        "Evaluate a mathematical expression such as (3 + 4) * 2.5 or 2^10 / 7 and return the result. \
         Supports + - * / % ^, comparisons, && || !, and functions such as math::sqrt, math::ln, \
         min, max, floor, round."
            .to_owned()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "The expression to evaluate"}
            },
            "required": ["expression"]
        })
    }

    async fn call(&self, args: EvalExpressionArgs) -> Result<String, ToolError> {
        if args.expression.len() > MAX_EXPRESSION_LEN {
            return Err(ToolError::InvalidArguments(format!(
                "expression is longer than {MAX_EXPRESSION_LEN} characters"
            )));
        }
        evalexpr::eval(&args.expression)
            .map(|value| value.to_string())
            .map_err(|err| {
                ToolError::Failed(format!("cannot evaluate {:?}: {err}", args.expression))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn eval(expression: &str) -> Result<String, ToolError> {
        EvalExpression
            .call(EvalExpressionArgs {
                expression: expression.into(),
            })
            .await
    }

    #[tokio::test]
    async fn evaluates_arithmetic() {
        assert_eq!(eval("(3 + 4) * 2").await.unwrap(), "14");
        assert_eq!(eval("7 / 2.0").await.unwrap(), "3.5");
    }

    #[tokio::test]
    async fn invalid_expressions_are_tool_errors() {
        assert!(eval("3 +").await.is_err());
        assert!(eval(&"1+".repeat(2_000)).await.is_err());
    }
}
