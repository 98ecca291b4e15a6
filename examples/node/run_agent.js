// A Node.js client of agent-runner: @grpc/grpc-js with the service's protos loaded at run time.
//
// Shows: the loader options that make events usable, metadata (tenant or API key), a run whose
// events print as they stream, a tool preset passed as a google.protobuf.Struct (a plain object
// is silently dropped there), reading the message and its thoughts back, a deadline (which
// cancels the run on the server) followed by Attach, Cancel, and listing the tenant's runs.
//
//   npm ci
//   AGENT_RUNNER_ADDR=127.0.0.1:50051 AGENT_RUNNER_MODEL=openai/gpt-4o-mini node run_agent.js
//
// Exits non-zero when the service does not behave as shown.

'use strict';

const path = require('node:path');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const ADDR = process.env.AGENT_RUNNER_ADDR || '127.0.0.1:50051';
const MODEL = process.env.AGENT_RUNNER_MODEL || 'openai/gpt-4o-mini';

// longs: String   uint64 fields (seq, token counts) arrive as strings, without precision loss.
// enums: String   enums arrive by name ('FINISH_REASON_STOP'), not as numbers.
// defaults: true  zero values (0, '', false) are present instead of missing.
// oneofs: true    `event.event` names which oneof field is set ('delta', 'end' …).
const definition = protoLoader.loadSync(
  ['agentrunner/v1/agent.proto', 'agentrunner/v1/tools.proto'],
  {
    includeDirs: [path.join(__dirname, '..', '..', 'proto')],
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  },
);
const v1 = grpc.loadPackageDefinition(definition).agentrunner.v1;

function metadata() {
  const md = new grpc.Metadata();
  // An API key names its tenant; a server without keys takes the tenant from x-tenant-id.
  if (process.env.AGENT_RUNNER_API_KEY) {
    md.set('authorization', `Bearer ${process.env.AGENT_RUNNER_API_KEY}`);
  } else {
    md.set('x-tenant-id', process.env.AGENT_RUNNER_TENANT || 'examples');
  }
  return md;
}

const deadline = (seconds) => ({ deadline: new Date(Date.now() + seconds * 1000) });

// A google.protobuf.Struct in the shape the loader expects. A plain object given for a
// Struct field is dropped without an error, so a tool preset would silently do nothing.
function toValue(value) {
  if (value === null || value === undefined) return { nullValue: 'NULL_VALUE' };
  if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
  switch (typeof value) {
    case 'number': return { numberValue: value };
    case 'boolean': return { boolValue: value };
    case 'string': return { stringValue: value };
    default: return { structValue: toStruct(value) };
  }
}

function toStruct(object) {
  return { fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, toValue(v)])) };
}

function runRequest(query) {
  const [provider, ...rest] = MODEL.split('/');
  return {
    query,
    agent: {
      model: { provider, name: rest.join('/'), parameters: toStruct({ temperature: 0 }) },
      instruction: 'You are a precise assistant. Use tools for the time.',
      maxIteration: 5,
      // The preset overrides what the model passes and is hidden from it.
      tools: [{ provider: 'time', name: 'current_time', parameters: toStruct({ timezone: 'Asia/Tokyo' }) }],
    },
  };
}

function show(event) {
  switch (event.event) {
    case 'started':
      console.log(`[started] ${event.started.provider}/${event.started.model}`);
      break;
    case 'delta':
      process.stdout.write(event.delta.text);
      break;
    case 'toolCallDelta':
      // A call's arguments as the model writes them: a preview; run only toolStarted's.
      if (event.toolCallDelta.name) process.stdout.write(`\n[forming] ${event.toolCallDelta.name} `);
      process.stdout.write(event.toolCallDelta.argumentsDelta);
      break;
    case 'reasoningDelta':
      // The model's reasoning, when the agent asks for it (seq 0 when not kept).
      process.stdout.write(`\x1b[2m${event.reasoningDelta.text}\x1b[0m`);
      break;
    case 'toolStarted':
      console.log(`\n[tool] ${event.toolStarted.toolCall.provider}/${event.toolStarted.toolCall.name} ${event.toolStarted.toolCall.arguments}`);
      break;
    case 'toolFinished':
      console.log(`[tool] -> ${event.toolFinished.toolCall.observation}`);
      break;
    case 'end': {
      const { usage } = event.end;
      console.log(`\n[end] ${event.end.finishReason}, ${usage.promptTokens}+${usage.completionTokens} tokens, ${usage.latency.toFixed(2)}s`);
      break;
    }
    case 'error':
      console.log(`\n[error] ${event.error.code}: ${event.error.message}`);
      break;
    default:
      break;
  }
  return event.event;
}

// Reads a server stream to its end; `onEvent` may act on each event.
function collect(call, onEvent = () => {}) {
  return new Promise((resolve, reject) => {
    const events = [];
    call.on('data', (event) => {
      events.push(event);
      show(event);
      onEvent(event);
    });
    call.on('error', (err) => reject(Object.assign(err, { events })));
    call.on('end', () => resolve(events));
  });
}

const unary = (client, method, request) => new Promise((resolve, reject) => {
  client[method](request, metadata(), deadline(10), (err, reply) => (err ? reject(err) : resolve(reply)));
});

async function runAndReadBack(agents) {
  console.log('== a run, then its records');
  const events = await collect(agents.Run(runRequest('What time is it in Tokyo?'), metadata(), deadline(60)));
  const end = events[events.length - 1];
  assert.equal(end.event, 'end');

  const message = await unary(agents, 'GetMessage', { messageId: end.messageId });
  assert.equal(message.status, 'MESSAGE_STATUS_COMPLETED');
  assert.equal(message.answer, end.end.answer);
  const { thoughts } = await unary(agents, 'ListThoughts', { messageId: end.messageId });
  const calls = thoughts.flatMap((thought) => thought.toolCalls);
  // The preset (a Struct) reached the tool: Tokyo time, whatever the model asked for.
  assert.match(calls[0].observation, /JST/);
  console.log(`stored: ${message.status}, ${thoughts.length} thoughts, tool said ${JSON.stringify(calls[0].observation)}`);
  return end.messageId;
}

async function deadlineThenAttach(agents) {
  console.log('== a deadline cancels the run; Attach replays what followed');
  let seen = [];
  try {
    await collect(agents.Run(runRequest('What time is it?'), metadata(), deadline(0.5)));
    assert.fail('the deadline passes before the run ends');
  } catch (err) {
    assert.equal(err.code, grpc.status.DEADLINE_EXCEEDED, err.message);
    seen = err.events;
  }
  const last = seen[seen.length - 1];
  console.log(`deadline passed after event ${last.seq}`);
  const rest = await collect(agents.Attach({ messageId: last.messageId, afterSeq: last.seq }, metadata(), deadline(60)));
  assert.equal(Number(rest[0].seq), Number(last.seq) + 1, 'Attach resumes right after the last event seen');
  assert.equal(rest[rest.length - 1].end.finishReason, 'FINISH_REASON_CANCELLED');
}

async function cancel(agents) {
  console.log('== Cancel');
  let asked = false;
  const events = await collect(agents.Run(runRequest('Tell me the time, slowly.'), metadata(), deadline(60)), (event) => {
    if (event.event === 'delta' && !asked) {
      asked = true;
      agents.Cancel({ messageId: event.messageId }, metadata(), deadline(10), (err) => {
        if (err) console.error(`cancel failed: ${err.message}`);
      });
    }
  });
  assert.equal(events[events.length - 1].end.finishReason, 'FINISH_REASON_CANCELLED');
  return events[0].messageId;
}

// The tenant's runs, newest first: the two runs above are listed in the order they were
// made, each with its status; a filter keeps only the cancelled ones.
async function listRuns(agents, first, cancelled) {
  console.log('== ListRuns');
  const page = await unary(agents, 'ListRuns', { pageSize: 100 });
  const ids = page.runs.map((run) => run.messageId);
  assert.ok(ids.indexOf(cancelled) < ids.indexOf(first) && ids.indexOf(cancelled) >= 0, 'newest first');
  const summary = page.runs.find((run) => run.messageId === first);
  assert.equal(summary.status, 'MESSAGE_STATUS_COMPLETED');
  const onlyCancelled = await unary(agents, 'ListRuns', { statuses: ['MESSAGE_STATUS_CANCELLED'], pageSize: 100 });
  assert.ok(onlyCancelled.runs.every((run) => run.status === 'MESSAGE_STATUS_CANCELLED'));
  assert.ok(onlyCancelled.runs.some((run) => run.messageId === cancelled));
  console.log(`listed ${page.runs.length} runs; the newest: ${page.runs[0].query} (${page.runs[0].status})`);
}

async function main() {
  const agents = new v1.AgentService(ADDR, grpc.credentials.createInsecure());
  try {
    const first = await runAndReadBack(agents);
    await deadlineThenAttach(agents);
    const cancelled = await cancel(agents);
    await listRuns(agents, first, cancelled);
  } finally {
    agents.close();
  }
  console.log('node example: ok');
}

main().catch((err) => {
  console.error(`error: ${err.message}`);
  process.exit(1);
});
