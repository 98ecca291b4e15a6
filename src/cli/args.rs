//! The command line: `serve` runs the service; every other subcommand is a client of a
//! running one.

use std::path::PathBuf;

use crate::config::ServeArgs;

/// `agent-runner` command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "agent-runner",
    version,
    about = "Runs LLM agents behind a gRPC API"
)]
pub struct Cli {
    /// Which server the client subcommands reach; the flags go before or after the
    /// subcommand.
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve the gRPC API.
    Serve(ServeArgs),
    /// Run one query through an agent and show the run as it streams.
    Run(RunArgs),
    /// Talk with an agent: each line you type is a turn of one conversation.
    Chat(ChatArgs),
    /// Follow a message's events: those after --after, then live ones until it ends.
    Attach(AttachArgs),
    /// Show a stored message and its thoughts as a tree.
    Show(ShowArgs),
    /// List the tools agents can use.
    Tools(ToolsArgs),
    /// Ask a running server's health service; exits 0 when both services are SERVING.
    Health,
    /// Create, list and revoke API keys on a running server (needs
    /// `AGENT_RUNNER_ADMIN_TOKEN`).
    Keys(KeysArgs),
    /// Stored agents: create from a file, list, show, versions, aliases.
    Agents(AgentsArgs),
}

/// How the CLI reaches a running server; the flags go before or after a subcommand (they
/// are the top-level command's, passed down to every subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server, `host:port`; a wildcard address means this machine.
    #[arg(
        long,
        global = true,
        env = "AGENT_RUNNER_LISTEN",
        default_value = "127.0.0.1:50051"
    )]
    pub addr: String,
    /// Connect over TLS, trusting this CA certificate (PEM).
    #[arg(long, global = true, env = "AGENT_RUNNER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// The name the server's certificate is checked against [default: the host of --addr].
    #[arg(long, global = true)]
    pub tls_server_name: Option<String>,
    /// A client certificate (PEM) for servers that require one (mTLS).
    #[arg(long, global = true, requires = "tls_client_key")]
    pub tls_client_cert: Option<PathBuf>,
    /// The key of --tls-client-cert (PEM).
    #[arg(long, global = true, requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
    /// The API key calls are made with (sent as `authorization: Bearer <key>`).
    #[arg(
        long,
        global = true,
        env = "AGENT_RUNNER_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// The tenant to act for on a server without API keys (the `x-tenant-id` header).
    #[arg(long, global = true, env = "AGENT_RUNNER_TENANT")]
    pub tenant_id: Option<String>,
}

/// What a run (or each turn of a chat) asks of the agent.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// A stored agent, `ID`, `ID@VERSION` or `ID:ALIAS`; then --model, --instruction and
    /// --max-iteration change this run only (the instruction is appended).
    #[arg(long, value_name = "ID[@VERSION|:ALIAS]")]
    pub agent: Option<String>,
    /// The model, `provider/name` (a provider of the server's configuration)
    /// [env: AGENT_RUNNER_MODEL, for runs without --agent].
    #[arg(long, short)]
    pub model: Option<String>,
    /// A tool the agent may call, `provider/name`; repeat for more.
    #[arg(
        long = "tool",
        short = 't',
        value_name = "PROVIDER/NAME",
        conflicts_with = "agent"
    )]
    pub tools: Vec<String>,
    /// How the agent calls tools [default: function calling when the model can].
    #[arg(long, value_enum, conflicts_with = "agent")]
    pub strategy: Option<StrategyArg>,
    /// Show the model's reasoning (stream: shown, not kept; keep: shown and stored).
    #[arg(long, value_enum, conflicts_with = "agent")]
    pub reasoning: Option<ReasoningArg>,
    /// What a turn does when the conversation has a live run [default: the agent's, else
    /// the server's].
    #[arg(long, value_enum)]
    pub conversation_policy: Option<PolicyArg>,
    /// The system prompt (with --agent: added to the stored one).
    #[arg(long, short)]
    pub instruction: Option<String>,
    /// Tool rounds at most (1 to 99) [default: the server's, 10].
    #[arg(long)]
    pub max_iteration: Option<u32>,
    /// Add the turn to this conversation [default: a new one].
    #[arg(long, short)]
    pub conversation: Option<String>,
    /// Print the events as JSON lines, one object per event, for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Refuses, as a usage error, a run or chat with no model: neither `--agent`, `--model`
/// nor the environment's model (a default for inline runs only, never an override of a
/// stored agent's).
pub fn check_model(command: &Command) -> Result<(), clap::Error> {
    let agent = match command {
        Command::Run(args) => &args.agent,
        Command::Chat(args) => &args.agent,
        Command::Serve(_)
        | Command::Attach(_)
        | Command::Show(_)
        | Command::Tools(_)
        | Command::Health
        | Command::Keys(_)
        | Command::Agents(_) => return Ok(()),
    };
    let from_env = std::env::var(MODEL_ENV).is_ok_and(|model| !model.is_empty());
    if agent.agent.is_some() || agent.model.is_some() || from_env {
        return Ok(());
    }
    Err(<Cli as clap::CommandFactory>::command().error(
        clap::error::ErrorKind::MissingRequiredArgument,
        format!("--model (or {MODEL_ENV}, or --agent) is required"),
    ))
}

/// The environment variable naming the model of runs without `--agent`.
pub const MODEL_ENV: &str = "AGENT_RUNNER_MODEL";

/// `--strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// Function calling.
    Fc,
    /// Chain of thought (ReAct).
    Cot,
}

/// `--reasoning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningArg {
    /// Neither shown nor kept.
    Off,
    /// Shown as it is written, never stored.
    Stream,
    /// Shown and kept with the run.
    Keep,
}

/// `--conversation-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// Refused while another run of the conversation is live.
    Reject,
    /// Runs beside it, from the same history.
    Parallel,
    /// Waits for it, then runs with its answer in the history.
    Enqueue,
    /// Stops it (keeping what it answered so far), then runs.
    Interrupt,
    /// Stops it and leaves it out of the history, then runs.
    Rollback,
    /// Joins it as a user turn before its next model call (runs on its own if it makes none).
    Steer,
}

/// `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The user's query.
    pub query: String,
    /// The agent.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `chat`.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// The agent.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `attach`.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The message to follow.
    pub message_id: String,
    /// Replay only events after this sequence number.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Print the events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// `show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The message to show.
    pub message_id: String,
    /// Print the message and its thoughts as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `tools`.
#[derive(Debug, clap::Args)]
pub struct ToolsArgs {
    /// Only this provider's tools.
    #[arg(long)]
    pub provider: Option<String>,
}

/// `keys` and its subcommands.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    /// What to do with keys.
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// What `keys` does.
#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create a key for a tenant; prints the key alone on the last line.
    Create {
        /// The tenant the key acts for.
        #[arg(long)]
        tenant: String,
        /// A name for people, e.g. `ci`.
        #[arg(long, default_value = "")]
        name: String,
        /// The key's limits.
        #[command(flatten)]
        limits: KeyLimits,
    },
    /// List a tenant's keys, one per line, id first; never the secrets.
    List {
        /// The tenant.
        #[arg(long)]
        tenant: String,
    },
    /// Revoke a key; calls with it fail from the next one on.
    Revoke {
        /// The key's id (the first column of `keys list`).
        id: String,
    },
}

/// `agents` and its subcommands.
#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    /// What to do with stored agents.
    #[command(subcommand)]
    pub command: AgentsCommand,
}

/// What `agents` does.
#[derive(Debug, clap::Subcommand)]
pub enum AgentsCommand {
    /// Create the agent a TOML or JSON file describes, or add a version to it when it
    /// exists; prints `ID@VERSION`.
    Create {
        /// The file: `id`, `name`, `description`, `[labels]`, `[agent]` (the config) and
        /// `[[client_tools]]`.
        file: PathBuf,
    },
    /// List agents, one per line: id, latest version, aliases, name.
    List {
        /// Only agents with this label, `key=value`; repeat for more.
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
    },
    /// Show a version as the file `create` reads (JSON).
    Show {
        /// `ID`, `ID@VERSION` or `ID:ALIAS`.
        agent: String,
    },
    /// List an agent's versions, newest first.
    Versions {
        /// The agent.
        agent_id: String,
    },
    /// Point an alias at a version.
    Alias {
        /// The agent.
        agent_id: String,
        /// The alias, e.g. `prod`.
        alias: String,
        /// The version.
        version: u32,
        /// Move it only if it points at this version now (0: only if it is new).
        #[arg(long)]
        expect: Option<u32>,
    },
    /// Delete an agent with its versions.
    Delete {
        /// The agent.
        agent_id: String,
    },
}

/// The limits a key is created with; 0 (or empty) leaves one to the server's.
#[derive(Debug, clap::Args, serde::Serialize)]
pub struct KeyLimits {
    /// Runs in progress at once with this key [default: the server's limit].
    #[arg(long, default_value_t = 0)]
    max_concurrent_runs: u32,
    /// Runs started per minute with this key [default: the server's limit].
    #[arg(long, default_value_t = 0)]
    runs_per_minute: u32,
    /// LLM tokens per UTC day with this key [default: the server's limit].
    #[arg(long, default_value_t = 0)]
    tokens_per_day: u64,
    /// Ceiling on each run's tokens [default: the server's].
    #[arg(long, default_value_t = 0)]
    max_run_tokens: u64,
    /// Ceiling on each run's cost, a decimal such as 0.50 [default: the server's].
    #[arg(long, default_value = "")]
    max_run_cost: String,
    /// Ceiling on each run's running seconds [default: the server's].
    #[arg(long, default_value_t = 0)]
    max_run_seconds: u32,
    /// Ceiling on each run's tool calls [default: the server's].
    #[arg(long, default_value_t = 0)]
    max_run_tool_calls: u32,
    /// Sub-agents' runs in progress at once over the tenant's trees [default: the
    /// server's limit].
    #[arg(long, default_value_t = 0)]
    max_concurrent_child_runs: u32,
    /// Streams following runs open at once on one replica [default: the server's
    /// limit].
    #[arg(long, default_value_t = 0)]
    max_follow_streams: u32,
    /// Runs queued at once in one conversation [default: the server's limit].
    #[arg(long, default_value_t = 0)]
    max_queued_per_conversation: u32,
}

impl KeyLimits {
    /// These limits as the message the server takes. Each flag is the field of its name,
    /// mapped through protobuf's JSON as agent files are, so the two cannot drift apart
    /// unseen (a test checks that every field has its flag).
    pub fn message(&self) -> anyhow::Result<crate::pb::TenantLimits> {
        let json = serde_json::to_value(self)?;
        super::proto_json::from_json("agentrunner.v1.TenantLimits", json)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use prost_reflect::DescriptorPool;

    use super::*;

    /// Every field of `TenantLimits` has its `keys create` flag, and each flag's value
    /// lands in the field of its name: a field added to the message without a flag (or a
    /// flag renamed) fails here.
    #[test]
    fn every_limit_has_its_flag_and_lands_in_its_field() {
        let pool = DescriptorPool::decode(crate::pb::FILE_DESCRIPTOR_SET).unwrap();
        let fields: Vec<String> = pool
            .get_message_by_name("agentrunner.v1.TenantLimits")
            .unwrap()
            .fields()
            .map(|field| field.name().to_owned())
            .collect();
        // Each field set to a value of its own, as its flag writes it.
        let expected: Vec<(String, String)> = fields
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let value = if name == "max_run_cost" {
                    "0.5".to_owned()
                } else {
                    (i + 1).to_string()
                };
                (name, value)
            })
            .collect();
        let mut args: Vec<String> = ["agent-runner", "keys", "create", "--tenant", "t"]
            .map(str::to_owned)
            .into();
        for (name, value) in &expected {
            args.extend([format!("--{}", name.replace('_', "-")), value.clone()]);
        }
        let Command::Keys(KeysArgs {
            command: KeysCommand::Create { limits, .. },
        }) = Cli::try_parse_from(&args).unwrap().command
        else {
            panic!("not keys create");
        };
        let message = limits.message().unwrap();
        let got: Vec<(String, String)> =
            super::super::proto_json::set_fields("agentrunner.v1.TenantLimits", &message)
                .unwrap()
                .into_iter()
                .map(|(name, value)| {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    (name, value)
                })
                .collect();
        assert_eq!(got, expected);
    }
}
