// A page that runs one agent turn over gRPC-Web, lists the conversation's messages and the
// tenant's recent runs,
// with the client generated from agent-runner's protos (no hand-written framing).
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AgentService, MessageStatus } from "./gen/agentrunner/v1/agent_pb.js";

const params = new URLSearchParams(location.search);
const element = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const serverInput = element<HTMLInputElement>("server");
const modelInput = element<HTMLInputElement>("model");
serverInput.value = params.get("server") ?? location.origin;
modelInput.value = params.get("model") ?? "openai/gpt-4o-mini";

let conversationId = "";

function agents() {
  const transport = createGrpcWebTransport({ baseUrl: serverInput.value });
  return createClient(AgentService, transport);
}

function show(status: string, failed = false) {
  const output = element<HTMLOutputElement>("status");
  output.textContent = status;
  output.className = failed ? "failed" : "";
}

async function run(query: string) {
  const [provider, name] = modelInput.value.split("/", 2);
  const answer = element<HTMLParagraphElement>("answer");
  const events = element<HTMLOListElement>("events");
  answer.textContent = "";
  events.replaceChildren();
  show("running");
  const stream = agents().run({
    conversationId,
    query,
    agent: { model: { provider, name } },
    cancelOnDisconnect: true,
  });
  for await (const event of stream) {
    conversationId = event.conversationId;
    const item = document.createElement("li");
    item.textContent = `#${event.seq} ${event.event.case ?? "?"}`;
    events.append(item);
    switch (event.event.case) {
      case "delta":
        answer.textContent += event.event.value.text;
        break;
      case "toolStarted":
        item.textContent += ` ${event.event.value.toolCall?.name ?? ""}`;
        break;
      case "end":
        answer.textContent = event.event.value.answer;
        show("ended");
        break;
      case "error":
        show(`failed: ${event.event.value.message}`, true);
        break;
    }
  }
}

async function listMessages() {
  const page = await agents().listMessages({ conversationId, pageSize: 20 });
  const rows = page.messages.map((message) => {
    const row = document.createElement("tr");
    for (const text of [
      message.id,
      MessageStatus[message.status] ?? String(message.status),
      message.query,
      message.answer,
    ]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  });
  element<HTMLTableElement>("messages").tBodies[0].replaceChildren(...rows);
}

function cells(values: string[]) {
  const row = document.createElement("tr");
  for (const text of values) {
    const cell = document.createElement("td");
    cell.textContent = text;
    row.append(cell);
  }
  return row;
}

// The tenant's runs, newest first (one page; `nextPageToken` would ask for the next).
async function listRuns() {
  const page = await agents().listRuns({ pageSize: 10 });
  const rows = page.runs.map((run) =>
    cells([
      run.messageId,
      MessageStatus[run.status] ?? String(run.status),
      run.query,
      String(run.rounds),
      String(run.usage?.totalTokens ?? 0n),
    ]),
  );
  element<HTMLTableElement>("runs").tBodies[0].replaceChildren(...rows);
}

element<HTMLFormElement>("ask").addEventListener("submit", async (submitted) => {
  submitted.preventDefault();
  const button = element<HTMLButtonElement>("run");
  button.disabled = true;
  try {
    await run(element<HTMLTextAreaElement>("query").value);
    await listMessages();
    await listRuns();
  } catch (err) {
    const error = ConnectError.from(err);
    show(`${Code[error.code]}: ${error.rawMessage}`, true);
  } finally {
    button.disabled = false;
  }
});
