// The console: a router over the page's paths, and the views that are not their own module.
import { showAgent, showAgents } from "./agents.js";
import { ConnectError } from "@connectrpc/connect";
import { admin, adminToken, agents, credentials, health, remember, rememberAdmin } from "./api.js";
import { ago, el, isNotFound, link, problem, table, when } from "./dom.js";
import { HealthCheckResponse_ServingStatus } from "./gen/grpc/health/v1/health_pb.js";
import { showRun } from "./run.js";
import { badge, showRuns } from "./runs.js";

const view = document.getElementById("view") as HTMLElement;
let leave: () => void = () => {};

function route() {
  leave();
  leave = () => {};
  const path = location.pathname.replace(/\/+$/, "");
  const [, section, id] = path.split("/");
  const params = new URLSearchParams(location.search);
  if (section === "runs" && id) leave = showRun(view, decodeURIComponent(id));
  else if (section === "conversations" && id) void showConversation(decodeURIComponent(id));
  else if (section === "agents" && id) void showAgent(view, decodeURIComponent(id));
  else if (section === "agents") void showAgents(view);
  else if (section === "operator") void showUsage();
  else leave = showRuns(view, params);
}

async function showConversation(id: string) {
  const remove = el("button", { type: "button", id: "delete", class: "secondary" }, "Delete conversation");
  const outcome = el("div", { id: "delete-outcome" });
  remove.onclick = async () => {
    if (!window.confirm("Delete this conversation and every record of its runs?")) return;
    outcome.replaceChildren();
    try {
      await agents.deleteConversation({ conversationId: id });
      history.pushState(null, "", "/");
      route();
    } catch (err) {
      outcome.append(problem(err));
    }
  };
  view.replaceChildren(
    el("p", {}, link("/", "← Runs")),
    el("h1", {}, "Conversation"),
    el("p", { class: "muted" }, id),
    el("div", { class: "actions" }, remove, outcome),
  );
  try {
    const page = await agents.listMessages({ conversationId: id, pageSize: 100 });
    const rows = page.messages.map((message) =>
      el(
        "tr",
        {},
        el("td", {}, String(message.createdAt ? ago(message.createdAt) : "")),
        el("td", { class: "query" }, link(`/runs/${message.id}`, message.query || "(empty query)")),
        el("td", {}, badge(message.status)),
        el("td", { class: "answer-cell" }, message.answer),
      ),
    );
    view.append(
      table(["started", "query", "status", "answer"], rows),
      page.nextPageToken ? el("p", { class: "muted" }, "Older messages follow (first 100 shown).") : "",
    );
  } catch (err) {
    view.append(isNotFound(err) ? el("p", { class: "problem", role: "alert" }, "No such conversation.") : problem(err));
  }
}

/// The services' health as a probe sees it: the whole server and each service the console
/// uses, asked in parallel.
async function showHealth() {
  const services: [string, string][] = [
    ["server", ""],
    ["runs", "agentrunner.v1.AgentService"],
    ["stored agents", "agentrunner.v1.AgentRegistry"],
    ["tools", "agentrunner.v1.ToolRegistry"],
  ];
  const list = el("dl", { class: "facts", id: "health" });
  view.append(el("h2", {}, "Health"), list);
  const answers = await Promise.all(
    services.map(async ([name, service]) => {
      try {
        const { status } = await health.check({ service });
        return [name, HealthCheckResponse_ServingStatus[status].toLowerCase().replace("_", " ")];
      } catch (err) {
        return [name, `unreachable: ${ConnectError.from(err).rawMessage}`];
      }
    }),
  );
  for (const [name, status] of answers) {
    list.append(el("dt", {}, name), el("dd", { class: status === "serving" ? "good" : "problem" }, status));
  }
}

/// The caller's tenant today against the limits its calls run under.
async function showUsage() {
  view.replaceChildren(el("h1", {}, "Usage today"));
  try {
    const usage = await agents.getUsage({});
    const limits = usage.limits;
    const of = (used: string, limit: bigint | number | string | undefined) =>
      limit && String(limit) !== "0" ? `${used} of ${limit}` : `${used} (no limit)`;
    const day = String(usage.day).replace(/(\d{4})(\d{2})(\d{2})/, "$1-$2-$3");
    const rows: [string, string][] = [
      ["tenant", usage.tenant],
      [`tokens on ${day} (UTC)`, of(String(usage.tokensToday), limits?.tokensPerDay)],
      ["runs not yet ended", of(String(usage.liveRuns), limits?.maxConcurrentRuns)],
      ["runs started per minute", of("—", limits?.runsPerMinute)],
      ["tokens per run", of("—", limits?.maxRunTokens)],
      ["cost per run", of("—", limits?.maxRunCost)],
      ["seconds per run", of("—", limits?.maxRunSeconds)],
      ["tool calls per run", of("—", limits?.maxRunToolCalls)],
    ];
    view.append(
      el("dl", { class: "facts", id: "usage" }, ...rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)])),
      el("p", { class: "muted" }, "The limits are your API key's, else the server's."),
    );
  } catch (err) {
    view.append(problem(err));
  }
  await showHealth();
  showReplicas();
}

/// The replicas on the store, for the holder of the admin token.
function showReplicas() {
  const token = el("input", { id: "admin-token", type: "password", placeholder: "admin token", "aria-label": "admin token", size: "24" });
  token.value = adminToken();
  const list = el("div", { id: "replicas" });
  const form = el("form", { class: "filters", id: "admin" }, token, el("button", { type: "submit" }, "Show replicas"));
  const load = async () => {
    list.replaceChildren();
    try {
      const { replicas } = await admin.listReplicas({});
      const rows = replicas.map((replica) =>
        el(
          "tr",
          {},
          el("td", {}, replica.id + (replica.answering ? " (this one)" : "")),
          el("td", {}, replica.live ? "live" : "gone"),
          el("td", {}, when(replica.startedAt)),
          el("td", {}, replica.leaseUntil ? when(replica.leaseUntil) : "—"),
          el("td", { class: "number" }, String(replica.runsHeld)),
        ),
      );
      const head = ["replica", "lease", "started", "lease until", "runs held"];
      list.append(
        table(head, rows),
      );
    } catch (err) {
      list.append(problem(err));
    }
  };
  form.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    rememberAdmin(token.value.trim());
    void load();
  });
  view.append(el("h2", {}, "Replicas"), el("p", { class: "muted" }, "For operators: needs the admin token, kept for this tab only and sent with these calls alone."), form, list);
  if (token.value) void load();
}

// Links within the console change the view without reloading the page.
document.addEventListener("click", (clicked) => {
  const anchor = (clicked.target as Element | null)?.closest("a[data-nav]");
  if (!anchor || clicked.defaultPrevented || clicked.button !== 0 || clicked.metaKey || clicked.ctrlKey) return;
  const href = anchor.getAttribute("href");
  if (!href?.startsWith("/")) return;
  clicked.preventDefault();
  history.pushState(null, "", href);
  route();
});
window.addEventListener("popstate", route);

const signin = document.getElementById("signin") as HTMLFormElement;
const keyInput = document.getElementById("key") as HTMLInputElement;
const tenantInput = document.getElementById("tenant") as HTMLInputElement;
const held = credentials();
keyInput.value = held.key;
tenantInput.value = held.tenant;
signin.addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  remember(keyInput.value.trim(), tenantInput.value.trim());
  route();
});

route();
