//! Chainable edits of a run request, so a test says what differs from the default request
//! instead of reaching through optional fields.

use agent_runner::pb;

/// Builder-style changes to a [`pb::RunRequest`].
pub trait RunRequestExt: Sized {
    /// The agent configuration, created if absent.
    fn agent_mut(&mut self) -> &mut pb::AgentConfig;

    /// The model configuration, created if absent.
    fn model_mut(&mut self) -> &mut pb::ModelConfig {
        self.agent_mut().model.get_or_insert_with(Default::default)
    }

    /// Another model of the same provider.
    fn model(mut self, name: &str) -> Self {
        self.model_mut().name = name.to_owned();
        self
    }

    /// Another LLM provider.
    fn provider(mut self, provider: &str) -> Self {
        self.model_mut().provider = provider.to_owned();
        self
    }

    /// Chat or completion mode.
    fn mode(mut self, mode: pb::ModelMode) -> Self {
        self.model_mut().mode = mode as i32;
        self
    }

    /// An explicit strategy.
    fn strategy(mut self, strategy: pb::Strategy) -> Self {
        self.agent_mut().strategy = strategy as i32;
        self
    }

    /// The iteration limit.
    fn max_iteration(mut self, limit: u32) -> Self {
        self.agent_mut().max_iteration = limit;
        self
    }

    /// Calls of the agent tool `name` wait for approval.
    fn needs_approval(mut self, name: &str) -> Self {
        for tool in &mut self.agent_mut().tools {
            if tool.name == name {
                tool.require_approval = true;
            }
        }
        self
    }

    /// At most `turns` turns of history.
    fn memory_turns(mut self, turns: u32) -> Self {
        self.agent_mut().memory = Some(pb::MemoryConfig { max_turns: turns });
        self
    }
}

impl RunRequestExt for pb::RunRequest {
    fn agent_mut(&mut self) -> &mut pb::AgentConfig {
        self.agent.get_or_insert_with(Default::default)
    }
}
