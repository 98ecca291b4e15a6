// Stored agents: the list with labels, and one agent's page: its versions newest first with
// their configurations, two of them side by side, its aliases moved by compare-and-set, a
// new version from a pasted or edited configuration, and its runs.
import { fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { AgentConfigSchema } from "./gen/agentrunner/v1/agent_pb.js";
import type { AgentVersion } from "./gen/agentrunner/v1/agents_pb.js";
import { agents, registry } from "./api.js";
import { ago, el, isNotFound, link, problem, table } from "./dom.js";
import { runsTable } from "./runs.js";

export async function showAgents(view: HTMLElement) {
  view.replaceChildren(el("h1", {}, "Agents"));
  try {
    const page = await registry.listAgents({ pageSize: 100 });
    if (!page.agents.length) {
      view.append(el("p", { class: "empty" }, "No stored agents."));
      return;
    }
    const rows = page.agents.map((agent) =>
      el(
        "tr",
        {},
        el("td", {}, link(`/agents/${agent.id}`, agent.id)),
        el("td", {}, agent.name),
        el("td", {}, ...Object.entries(agent.labels).map(([key, value]) => el("span", { class: "chip" }, `${key}=${value}`))),
        el("td", { class: "number" }, String(agent.latestVersion)),
        el("td", {}, Object.entries(agent.aliases).map(([alias, version]) => `${alias} → ${version}`).join(", ")),
        el("td", {}, ago(agent.updatedAt)),
      ),
    );
    const head = ["agent", "name", "labels", "latest", "aliases", "changed"];
    view.append(
      table(head, rows, "agents"),
      page.nextPageToken ? el("p", { class: "muted" }, "More agents follow (first 100 shown).") : "",
    );
  } catch (err) {
    view.append(problem(err));
  }
}

function configText(version: AgentVersion) {
  return version.config ? toJsonString(AgentConfigSchema, version.config, { prettySpaces: 2 }) : "{}";
}

/// Two versions' configurations side by side, the lines one has and the other lacks marked.
function compare(left: AgentVersion, right: AgentVersion) {
  const [a, b] = [configText(left).split("\n"), configText(right).split("\n")];
  const side = (lines: string[], other: string[], version: number) =>
    el(
      "div",
      { class: "side" },
      el("h3", {}, `version ${version}`),
      el("pre", {}, ...lines.map((line) => el("span", { class: other.includes(line) ? "same" : "changed" }, `${line}\n`))),
    );
  return el("div", { class: "compare", id: "compare" }, side(a, b, left.version), side(b, a, right.version));
}

/// The key in a configuration's JSON that an API error's field path ends on
/// (`agent.model.max_tokens` → `maxTokens`), if the message starts with one.
function fieldKey(message: string) {
  const path = /^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*)\b/.exec(message)?.[1];
  if (!path || !path.includes(".")) return "";
  const last = path.split(".").pop()?.replace(/\[\d+\]$/, "") ?? "";
  return last.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase());
}

/// A new version from a pasted or edited configuration, starting from `start` (the newest
/// version's). JSON that is no agent configuration is refused here; what the API refuses is
/// shown in its words, and the field it names is selected in the text.
function newVersionForm(id: string, start: string, created: (version: number) => void) {
  const config = el("textarea", {
    name: "config",
    id: "new-config",
    rows: "12",
    spellcheck: "false",
    "aria-label": "configuration of the new version (JSON)",
    "aria-describedby": "new-version-outcome",
  });
  config.value = start;
  const outcome = el("div", { id: "new-version-outcome", "aria-live": "polite" });
  const refused = (text: string) => {
    config.setAttribute("aria-invalid", "true");
    outcome.append(el("p", { class: "problem", role: "alert" }, text));
    const key = fieldKey(text.replace(/^[A-Za-z]+: /, ""));
    const at = key ? config.value.indexOf(`"${key}"`) : -1;
    if (at >= 0) {
      config.focus();
      config.setSelectionRange(at, at + key.length + 2);
    }
  };
  const form = el("form", { id: "new-version", class: "stack" }, config, el("button", { type: "submit" }, "Create version"), outcome);
  form.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    outcome.replaceChildren();
    config.removeAttribute("aria-invalid");
    let parsed;
    try {
      parsed = fromJsonString(AgentConfigSchema, config.value);
    } catch (err) {
      refused(`Not an agent configuration: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    try {
      const version = await registry.createAgentVersion({ agentId: id, config: parsed });
      created(version.version);
    } catch (err) {
      const error = ConnectError.from(err);
      refused(`${Code[error.code]}: ${error.rawMessage}`);
    }
  });
  return form;
}

export async function showAgent(view: HTMLElement, id: string, note = "") {
  view.replaceChildren(el("p", {}, link("/agents", "← Agents")), el("h1", {}, `Agent ${id}`));
  if (note) view.append(el("p", { class: "muted", id: "agent-note", role: "status" }, note));
  try {
    const agent = await registry.getAgent({ agentId: id });
    const aliases = el("dd", { id: "aliases" });
    const drawAliases = (map: Record<string, number>) =>
      (aliases.textContent = Object.entries(map).map(([alias, version]) => `${alias} → ${version}`).join(", ") || "—");
    drawAliases(agent.aliases);
    view.append(
      el(
        "dl",
        { class: "facts" },
        el("dt", {}, "name"),
        el("dd", {}, agent.name || "—"),
        el("dt", {}, "description"),
        el("dd", {}, agent.description || "—"),
        el("dt", {}, "labels"),
        el("dd", {}, Object.entries(agent.labels).map(([key, value]) => `${key}=${value}`).join(", ") || "—"),
        el("dt", {}, "latest version"),
        el("dd", {}, String(agent.latestVersion)),
        el("dt", {}, "aliases"),
        aliases,
      ),
    );

    // Moving an alias: with an expected version, only if it still points there.
    const alias = el("input", { name: "alias", placeholder: "alias", "aria-label": "alias", size: "10" });
    const version = el("input", { name: "version", type: "number", min: "1", placeholder: "to version", "aria-label": "to version", size: "6" });
    const expected = el("input", { name: "expected", type: "number", min: "0", placeholder: "expected now", "aria-label": "expected version now", size: "6" });
    const outcome = el("div", { id: "alias-outcome" });
    const form = el("form", { class: "filters", id: "move-alias" }, alias, version, expected, el("button", { type: "submit" }, "Move alias"), outcome);
    form.addEventListener("submit", async (submitted) => {
      submitted.preventDefault();
      outcome.replaceChildren();
      try {
        const moved = await registry.setAlias({
          agentId: id,
          alias: alias.value.trim(),
          version: Number(version.value),
          expectedVersion: expected.value === "" ? undefined : Number(expected.value),
        });
        drawAliases(moved.aliases);
        outcome.append(el("span", { class: "muted" }, "Moved."));
      } catch (err) {
        outcome.append(problem(err));
      }
    });
    view.append(el("h2", {}, "Aliases"), form);

    const versions = await registry.listAgentVersions({ agentId: id, pageSize: 100 });
    view.append(el("h2", {}, "Versions, newest first"));
    const list = el("ol", { class: "versions", id: "versions", reversed: "" });
    for (const each of versions.versions) {
      list.append(el("li", { value: String(each.version) }, el("details", {}, el("summary", {}, `version ${each.version} · ${ago(each.createdAt)}`), el("pre", {}, configText(each)))));
    }
    view.append(list);
    if (versions.versions.length >= 2) {
      const [newest, previous] = versions.versions;
      view.append(el("h2", {}, `Version ${previous.version} beside version ${newest.version}`), compare(previous, newest));
    }
    const newest = versions.versions[0];
    view.append(
      el("h2", {}, "New version"),
      el("p", { class: "muted" }, "Paste or edit a configuration (JSON of AgentConfig); it is checked as a run would resolve it."),
      newVersionForm(id, newest ? configText(newest) : "{}", (created) => void showAgent(view, id, `Created version ${created}.`)),
    );
    const runs = await agents.listRuns({ agentId: id, pageSize: 50 });
    view.append(el("h2", {}, "Its runs"), runs.runs.length ? runsTable(runs.runs) : el("p", { class: "empty" }, "No runs."));
  } catch (err) {
    view.append(isNotFound(err) ? el("p", { class: "problem", role: "alert" }, "No such agent.") : problem(err));
  }
}
