// The console: a router over the page's paths, and the views that are not their own module.
import { agents, credentials, registry, remember } from "./api.js";
import { ago, el, isNotFound, link, problem } from "./dom.js";
import { showRun } from "./run.js";
import { badge, runsTable, showRuns } from "./runs.js";

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
  else if (section === "agents" && id) void showAgent(decodeURIComponent(id));
  else if (section === "operator") view.replaceChildren(el("h1", {}, "Operator"), el("p", { class: "muted" }, "Not available yet."));
  else leave = showRuns(view, params);
}

async function showConversation(id: string) {
  view.replaceChildren(el("p", {}, link("/", "← Runs")), el("h1", {}, "Conversation"), el("p", { class: "muted" }, id));
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
      el(
        "div",
        { class: "scroll" },
        el(
          "table",
          { class: "runs" },
          el("thead", {}, el("tr", {}, ...["started", "query", "status", "answer"].map((name) => el("th", {}, name)))),
          el("tbody", {}, ...rows),
        ),
      ),
      page.nextPageToken ? el("p", { class: "muted" }, "Older messages follow (first 100 shown).") : "",
    );
  } catch (err) {
    view.append(isNotFound(err) ? el("p", { class: "problem", role: "alert" }, "No such conversation.") : problem(err));
  }
}

async function showAgent(id: string) {
  view.replaceChildren(el("p", {}, link("/", "← Runs")), el("h1", {}, `Agent ${id}`));
  try {
    const agent = await registry.getAgent({ agentId: id });
    const aliases = Object.entries(agent.aliases).map(([alias, version]) => `${alias} → ${version}`);
    view.append(
      el(
        "dl",
        { class: "facts" },
        el("dt", {}, "name"),
        el("dd", {}, agent.name || "—"),
        el("dt", {}, "latest version"),
        el("dd", {}, String(agent.latestVersion)),
        el("dt", {}, "aliases"),
        el("dd", {}, aliases.join(", ") || "—"),
        el("dt", {}, "description"),
        el("dd", {}, agent.description || "—"),
      ),
    );
    const runs = await agents.listRuns({ agentId: id, pageSize: 50 });
    view.append(el("h2", {}, "Its runs"), runs.runs.length ? runsTable(runs.runs) : el("p", { class: "empty" }, "No runs."));
  } catch (err) {
    view.append(isNotFound(err) ? el("p", { class: "problem", role: "alert" }, "No such agent.") : problem(err));
  }
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
