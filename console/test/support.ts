// What the console's browser test needs from the API beside the page: runs to look at,
// made over gRPC-Web with the same generated client (Node's fetch carries it).
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AgentService } from "../src/gen/agentrunner/v1/agent_pb.js";

export function client(baseUrl: string) {
  return createClient(AgentService, createGrpcWebTransport({ baseUrl }));
}

/// Runs `query` on the scripted model with the time tool, to its end, or until it waits
/// for an approval when `approval` holds; returns the run's message id.
export async function run(baseUrl: string, query: string, approval = false) {
  const stream = client(baseUrl).run({
    query,
    agent: {
      model: { provider: "openai", name: "mock" },
      tools: [{ provider: "time", name: "current_time", requireApproval: approval }],
    },
  });
  let id = "";
  for await (const event of stream) {
    id = event.messageId;
    if (event.event.case === "approvalRequired") break;
  }
  return id;
}
