// What the console's browser test needs from the API beside the page: runs and an agent
// to look at, made over gRPC-Web with the same generated client (Node's fetch carries it).
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AgentService, ConversationPolicy, Reasoning } from "../src/gen/agentrunner/v1/agent_pb.js";
import { AgentRegistry } from "../src/gen/agentrunner/v1/agents_pb.js";

function transport(baseUrl: string, key = "") {
  const signed: Interceptor = (next) => (request) => {
    if (key) request.header.set("authorization", `Bearer ${key}`);
    return next(request);
  };
  return createGrpcWebTransport({ baseUrl, interceptors: [signed] });
}

/// How a run made for the test stops: at its end, or where it waits for the caller.
export type Until = "end" | "approval" | "outputs";

/// Runs `query` on the scripted model with the time tool (needing approval, or run by the
/// caller itself, as `until` says), keeping the model's reasoning when asked; returns the
/// run's message id once it ends or waits.
export async function run(baseUrl: string, query: string, until: Until = "end", key = "", maxTokens?: bigint, keepReasoning = false) {
  const agents = createClient(AgentService, transport(baseUrl, key));
  const stream = agents.run({
    query,
    agent: {
      model: { provider: "openai", name: "mock" },
      tools: until === "outputs" ? [] : [{ provider: "time", name: "current_time", requireApproval: until === "approval" }],
      budget: maxTokens === undefined ? undefined : { maxTokens },
      reasoning: keepReasoning ? Reasoning.KEEP : Reasoning.UNSPECIFIED,
    },
    clientTools: until === "outputs" ? [{ name: "current_time", description: "The caller's clock" }] : [],
  });
  let id = "";
  for await (const event of stream) {
    id = event.messageId;
    if (event.event.case === "approvalRequired" || event.event.case === "toolCallsRequired") break;
  }
  return id;
}

/// A run of the most rounds a run makes (`max_iteration` 99, on a model that calls the tool
/// in every round it may), to its end; returns its id.
export async function longest(baseUrl: string) {
  const agents = createClient(AgentService, transport(baseUrl));
  let id = "";
  for await (const event of agents.run({
    query: "What time is it, many times over?",
    agent: { model: { provider: "openai", name: "mock" }, maxIteration: 99, tools: [{ provider: "time", name: "current_time" }] },
  })) {
    id = event.messageId;
  }
  return id;
}

/// A run of `first` that waits for approval, and a run of `then` sent after it in its
/// conversation, which is queued behind it; returns both ids once the second is queued
/// (its stream read on in the background).
export async function queuedBehind(baseUrl: string, first: string, then: string) {
  const agents = createClient(AgentService, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  let blocker = "";
  let conversationId = "";
  for await (const event of agents.run({
    query: first,
    agent: { model, tools: [{ provider: "time", name: "current_time", requireApproval: true }] },
  })) {
    blocker = event.messageId;
    conversationId = event.conversationId;
    if (event.event.case === "approvalRequired") break;
  }
  const stream = agents
    .run({
      query: then,
      conversationId,
      conversationPolicy: ConversationPolicy.ENQUEUE,
      agent: { model, tools: [{ provider: "time", name: "current_time" }] },
    })
    [Symbol.asyncIterator]();
  const queued = (await stream.next()).value?.messageId ?? "";
  void (async () => {
    while (!(await stream.next()).done) {
      // drained
    }
  })();
  return { blocker, queued };
}

/// A run of `first` that waits for approval, stopped by a run of `then` sent after it in its
/// conversation with ROLLBACK (else INTERRUPT); returns both ids once the second has ended.
export async function stoppedBy(baseUrl: string, first: string, then: string, rollback: boolean) {
  const policy = rollback ? ConversationPolicy.ROLLBACK : ConversationPolicy.INTERRUPT;
  const agents = createClient(AgentService, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  let stopped = "";
  let conversationId = "";
  for await (const event of agents.run({
    query: first,
    agent: { model, tools: [{ provider: "time", name: "current_time", requireApproval: true }] },
  })) {
    stopped = event.messageId;
    conversationId = event.conversationId;
    if (event.event.case === "approvalRequired") break;
  }
  let by = "";
  for await (const event of agents.run({ query: then, conversationId, conversationPolicy: policy, agent: { model } })) {
    by = event.messageId;
  }
  return { stopped, by };
}

/// A run of `first` that waits for approval, and a steer of `text` sent into it (STEER);
/// returns the run's id and the steer's once the steer is accepted (its stream is read to
/// the end in the background).
export async function steering(baseUrl: string, first: string, text: string) {
  const agents = createClient(AgentService, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  let live = "";
  let conversationId = "";
  for await (const event of agents.run({
    query: first,
    agent: { model, tools: [{ provider: "time", name: "current_time", requireApproval: true }] },
  })) {
    live = event.messageId;
    conversationId = event.conversationId;
    if (event.event.case === "approvalRequired") break;
  }
  const stream = agents
    .run({ query: text, conversationId, conversationPolicy: ConversationPolicy.STEER, agent: { model } })
    [Symbol.asyncIterator]();
  const opening = (await stream.next()).value;
  const steer = opening?.event.case === "steered" ? opening.event.value.steerMessageId : "";
  void (async () => {
    while (!(await stream.next()).done) {
      // drained
    }
  })();
  return { live, steer };
}

/// Cancels the run of `messageId`.
export async function cancel(baseUrl: string, messageId: string) {
  await createClient(AgentService, transport(baseUrl)).cancel({ messageId });
}

/// A stored agent whose name and description are `text`.
export async function agent(baseUrl: string, id: string, text: string) {
  const registry = createClient(AgentRegistry, transport(baseUrl));
  await registry.createAgent({
    agentId: id,
    name: text.slice(0, 200),
    description: text,
    config: { model: { provider: "openai", name: "mock" } },
  });
}

/// Starts a run of `query` and returns its message id at its first event; the run goes on
/// (its stream read to the end in the background, or until the service goes away).
export async function start(baseUrl: string, query: string) {
  const agents = createClient(AgentService, transport(baseUrl));
  const stream = agents.run({
    query,
    agent: { model: { provider: "openai", name: "mock" }, tools: [{ provider: "time", name: "current_time" }] },
  })[Symbol.asyncIterator]();
  const first = await stream.next();
  void (async () => {
    while (!(await stream.next()).done) {
      // drained
    }
  })().catch(() => {
    // The test may kill the service under it; the page follows the run from there.
  });
  return first.value?.messageId ?? "";
}

/// A stored agent `id` with two versions (the second with another instruction) and the
/// alias `prod` on the first.
export async function versioned(baseUrl: string, id: string) {
  const registry = createClient(AgentRegistry, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  await registry.createAgent({
    agentId: id,
    name: "Support bot",
    labels: { team: "support" },
    config: { model, instruction: "Answer briefly." },
  });
  await registry.createAgentVersion({ agentId: id, config: { model, instruction: "Answer at length." } });
  await registry.setAlias({ agentId: id, alias: "prod", version: 1 });
}

/// `helper` and `boss` (which may call `helper`) on a fresh service, and a run of `boss` on
/// `query`; returns its message id at its first event, the run read on in the background.
export async function delegating(baseUrl: string, query: string) {
  const registry = createClient(AgentRegistry, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  await registry.createAgent({ agentId: "helper", description: "Answers what it is asked", config: { model } });
  await registry.createAgent({ agentId: "boss", config: { model, subAgents: [{ agentId: "helper" }] } });
  const stream = createClient(AgentService, transport(baseUrl)).run({ query, agentRef: { agentId: "boss" } })[Symbol.asyncIterator]();
  const first = await stream.next();
  void (async () => {
    while (!(await stream.next()).done) {
      // drained
    }
  })();
  return first.value?.messageId ?? "";
}

/// Two stored agents: `helper`, and `boss`, which may call `helper` as a tool; runs `boss`
/// on `query` to its end and returns the run's message id.
export async function delegated(baseUrl: string, query: string) {
  const registry = createClient(AgentRegistry, transport(baseUrl));
  const model = { provider: "openai", name: "mock" };
  await registry.createAgent({ agentId: "helper", description: "Answers what it is asked", config: { model } });
  await registry.createAgent({ agentId: "boss", config: { model, subAgents: [{ agentId: "helper" }] } });
  const stream = createClient(AgentService, transport(baseUrl)).run({ query, agentRef: { agentId: "boss" } });
  let id = "";
  for await (const event of stream) id = event.messageId;
  return id;
}
