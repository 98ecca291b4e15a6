//! agent-runner: a gRPC service that runs LLM agents and keeps what they did.
//!
//! # Layout
//! The rooms, from the top down; a room imports only rooms below it
//! (`docs/architecture.md` draws them).
//! - [`app`] wires the rooms together and owns the background work; [`config`] says how.
//! - [`cli`]: the command line's client side, over the generated client.
//! - [`api`]: the only code that knows tonic and protobuf; thin handlers over the core,
//!   the A2A binding among them, gRPC-Web, and the browser console embedded.
//! - [`replica`]: what this process does as one replica among others: takes over the
//!   runs whose owner was lost, and takes the commands peers keep for its runs.
//! - [`library`]: stored agents, versions and aliases, resolved as a run starts.
//! - [`access`]: API keys and the admin token: who may call.
//! - [`runner`]: the agent loop, one driver parameterised by strategy, and the runs in
//!   progress; emits [`domain::RunEvent`]s.
//! - [`catalog`]: providers a tenant registers, persisted and live.
//! - [`llm`]: chat model clients (OpenAI-compatible and Anthropic) behind one trait.
//! - [`tools`]: the tool registry, the tool engine and the built-in tools.
//! - [`store`]: persistence behind one contract both backends (embedded, PostgreSQL)
//!   honour; the only code that knows a database.
//! - [`cluster`]: the bus between replicas (NATS, the database's notifications, or none)
//!   and the followers it feeds.
//! - [`telemetry`]: Prometheus metrics and OpenTelemetry traces for operators.
//! - [`net`]: accepting connections within bounds, for every listener.
//! - [`tasks`]: the work a component spawns for itself, stopped and waited for together.
//! - [`domain`]: plain data shared by all of the above.
//! - `mock_llm` (feature `mock-llm`): a scripted OpenAI-compatible server for benchmarks
//!   and tests; `test_utils` (feature `test-utils`): scripted models and tools.

pub mod access;
pub mod api;
pub mod app;
pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod domain;
pub mod library;
pub mod llm;
#[cfg(feature = "mock-llm")]
pub mod mock_llm;
pub mod net;
pub mod replica;
pub mod runner;
pub mod store;
pub mod tasks;
pub mod telemetry;
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils;
pub mod tools;

/// Code generated from `proto/agentrunner/v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("agentrunner.v1");

    /// The encoded descriptor set of our protos, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("agentrunner_descriptor");
}

/// Code generated from the A2A protocol's gRPC binding (`third_party/a2a`, package
/// `lf.a2a.v1`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod a2a_pb {
    tonic::include_proto!("lf.a2a.v1");

    /// The encoded descriptor set of the A2A protos, served by reflection when A2A is on.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("a2a_descriptor");
}
