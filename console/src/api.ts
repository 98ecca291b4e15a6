// The API's clients over gRPC-Web on this origin, with the caller's credentials: an API
// key kept for this tab only (sessionStorage, never a cookie or the URL), or, with keys
// off, the tenant typed in.
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AgentService } from "./gen/agentrunner/v1/agent_pb.js";
import { AdminService } from "./gen/agentrunner/v1/admin_pb.js";
import { AgentRegistry } from "./gen/agentrunner/v1/agents_pb.js";
import { Health } from "./gen/grpc/health/v1/health_pb.js";

const KEY = "agent-runner.key";
const ADMIN = "agent-runner.admin";
const TENANT = "agent-runner.tenant";

export function credentials() {
  return {
    key: sessionStorage.getItem(KEY) ?? "",
    tenant: sessionStorage.getItem(TENANT) ?? "",
  };
}

export function remember(key: string, tenant: string) {
  sessionStorage.setItem(KEY, key);
  sessionStorage.setItem(TENANT, tenant);
}

const signed: Interceptor = (next) => (request) => {
  const { key, tenant } = credentials();
  if (key) request.header.set("authorization", `Bearer ${key}`);
  else if (tenant) request.header.set("x-tenant-id", tenant);
  return next(request);
};

const transport = createGrpcWebTransport({
  baseUrl: location.origin,
  interceptors: [signed],
});

export const agents = createClient(AgentService, transport);
/// gRPC health, open to all (no credential is needed or sent).
export const health = createClient(Health, createGrpcWebTransport({ baseUrl: location.origin }));
export const registry = createClient(AgentRegistry, transport);

/// The admin token, kept for this tab only and sent with admin calls alone, never with a
/// tenant's.
export function rememberAdmin(token: string) {
  sessionStorage.setItem(ADMIN, token);
}

export function adminToken() {
  return sessionStorage.getItem(ADMIN) ?? "";
}

const asAdmin: Interceptor = (next) => (request) => {
  const token = adminToken();
  if (token) request.header.set("authorization", `Bearer ${token}`);
  return next(request);
};

export const admin = createClient(
  AdminService,
  createGrpcWebTransport({ baseUrl: location.origin, interceptors: [asAdmin] }),
);
