// The runs explorer: a tenant's runs newest first, a page at a time (older pages by the
// page token, never all at once), filtered; "waiting for me" lists the runs that wait for
// an approval or a client tool's output. The first page refreshes by polling ListRuns;
// no stream is held.
import { create } from "@bufbuild/protobuf";
import {
  FinishReason,
  ListRunsRequestSchema,
  MessageStatus,
  type RunSummary,
} from "./gen/agentrunner/v1/agent_pb.js";
import { agents } from "./api.js";
import { ago, el, link, problem, table } from "./dom.js";

const POLL_MS = 5000;
const WAITING = [MessageStatus.WAITING_APPROVAL, MessageStatus.WAITING_TOOL_OUTPUTS];
const STATUSES: [string, MessageStatus[]][] = [
  ["any status", []],
  ["running", [MessageStatus.RUNNING]],
  ["queued", [MessageStatus.QUEUED]],
  ["waiting", WAITING],
  ["completed", [MessageStatus.COMPLETED]],
  ["failed", [MessageStatus.FAILED]],
  ["cancelled", [MessageStatus.CANCELLED]],
  ["interrupted", [MessageStatus.INTERRUPTED]],
];

export function statusName(status: MessageStatus) {
  return (MessageStatus[status] ?? String(status)).toLowerCase().replaceAll("_", " ");
}

export function badge(status: MessageStatus) {
  const name = statusName(status);
  return el("span", { class: `badge ${name.split(" ")[0]}` }, name);
}

export function tokens(run: { usage?: { totalTokens: bigint } }) {
  return String(run.usage?.totalTokens ?? 0n);
}

export function cost(usage?: { totalPrice: string; currency: string }) {
  if (!usage || !usage.totalPrice || usage.totalPrice === "0") return "";
  return `${usage.totalPrice} ${usage.currency}`;
}

function row(run: RunSummary) {
  const agent = run.agentId ? `${run.agentId}@${run.agentVersion}` : "inline";
  const query = run.query + (run.queryTruncated ? "…" : "");
  return el(
    "tr",
    {},
    el("td", { title: run.createdAt ? new Date(Number(run.createdAt.seconds) * 1000).toISOString() : "" }, ago(run.createdAt)),
    el("td", { class: "query" }, link(`/runs/${run.messageId}`, query || "(empty query)")),
    el("td", {}, run.agentId ? link(`/agents/${run.agentId}`, agent) : agent),
    el("td", {}, run.model),
    el("td", {}, badge(run.status)),
    el("td", {}, run.finishReason ? (FinishReason[run.finishReason] ?? "").toLowerCase() : ""),
    el("td", { class: "number" }, String(run.rounds)),
    el("td", { class: "number" }, tokens(run)),
    el("td", { class: "number" }, cost(run.usage)),
    el("td", { class: "number" }, run.usage ? `${run.usage.latency.toFixed(2)} s` : ""),
  );
}

export function runsTable(runs: RunSummary[]) {
  const head = ["started", "query", "agent", "model", "status", "finish", "rounds", "tokens", "cost", "latency"];
  return table(head, runs.map(row));
}

/// Draws the explorer into `view`; returns a function that stops its polling.
export function showRuns(view: HTMLElement, params: URLSearchParams): () => void {
  const waiting = params.get("view") === "waiting";
  const filters = el("form", { class: "filters", id: "filters" });
  const status = el("select", { name: "status", "aria-label": "status" });
  STATUSES.forEach(([name], index) => status.append(el("option", { value: String(index) }, name)));
  status.value = params.get("status") ?? "0";
  const field = (name: string, label: string) =>
    el("input", { name, placeholder: label, "aria-label": label, value: params.get(name) ?? "", size: "16" });
  const agentId = field("agent", "agent id");
  const conversation = field("conversation", "conversation id");
  const user = field("user", "end user");
  if (!waiting) filters.append(status);
  filters.append(agentId, conversation, user, el("button", { type: "submit" }, "Filter"));
  const note = el("p", { class: "muted", id: "note" });
  const body = el("div", { id: "runs" });
  const older = el("button", { id: "older", type: "button" }, "Older →");
  const newest = el("button", { id: "newest", type: "button" }, "← Newest");
  view.replaceChildren(
    el("h1", {}, waiting ? "Waiting for me" : "Runs"),
    filters,
    note,
    body,
    el("div", { class: "pager" }, newest, older),
  );

  let tokens: string[] = [""];
  let timer: number | undefined;
  let stopped = false;
  const request = () =>
    create(ListRunsRequestSchema, {
      pageSize: 50,
      pageToken: tokens[tokens.length - 1],
      statuses: waiting ? WAITING : STATUSES[Number(status.value)]?.[1] ?? [],
      agentId: agentId.value.trim(),
      conversationId: conversation.value.trim(),
      user: user.value.trim(),
    });
  const load = async () => {
    window.clearTimeout(timer);
    try {
      const page = await agents.listRuns(request());
      if (stopped) return;
      body.replaceChildren(
        page.runs.length ? runsTable(page.runs) : el("p", { class: "empty" }, waiting ? "Nothing waits for you." : "No runs."),
      );
      note.textContent = page.stoppedEarly
        ? "Searched 10,000 runs without filling the page: older ones may match."
        : tokens.length > 1 ? `Page ${tokens.length}` : "Newest first; refreshes every 5 s.";
      older.hidden = !page.nextPageToken;
      older.onclick = () => {
        tokens.push(page.nextPageToken);
        void load();
      };
    } catch (err) {
      if (!stopped) body.replaceChildren(problem(err));
    }
    newest.hidden = tokens.length === 1;
    if (!stopped && tokens.length === 1) timer = window.setTimeout(load, POLL_MS);
  };
  newest.onclick = () => {
    tokens = [""];
    void load();
  };
  filters.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    const next = new URLSearchParams(params);
    for (const [name, input] of [["agent", agentId], ["conversation", conversation], ["user", user]] as const) {
      if (input.value.trim()) next.set(name, input.value.trim());
      else next.delete(name);
    }
    if (!waiting) next.set("status", status.value);
    history.replaceState(null, "", `/?${next}`);
    tokens = [""];
    void load();
  });
  void load();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
