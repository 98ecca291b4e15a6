//! Integration tests: the real server on an ephemeral port, driven through the generated
//! tonic clients, against a scripted OpenAI-compatible server that speaks the real wire
//! format and records what it was sent. One test binary keeps builds short.

// Test code: a panic is the failure report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod a2a;
mod anthropic;
mod api_requests;
mod approvals;
mod auth;
mod browsers;
mod budgets;
mod citations;
mod cli;
mod cli_agents;
mod client_tools;
mod connections;
mod conversation_policy;
mod conversations;
mod forming_calls;
mod full_disk;
mod hardening;
mod hostile_inputs;
mod interrupt;
mod llm_failures;
mod loop_correctness;
mod mcp;
mod observability;
mod operations;
mod persistence;
mod postgres;
mod process;
mod queued_runs;
mod reasoning;
mod relay;
mod replicas;
mod replicas_agents;
mod replicas_budgets;
mod replicas_bus;
mod replicas_queue;
mod replicas_shared;
mod resilience;
mod run_again;
mod run_control;
mod run_function_calling;
mod run_listing;
mod run_react;
mod steer;
mod stored_agents;
mod structured_output;
mod sub_agent_limits;
mod sub_agents;
mod support;
mod takeover;
mod tenant_limits;
mod tool_providers;
mod validation;
