// "Run again": the run's request as `ExportRun` gives it, sent to `Run` as it is or on
// another version of its stored agent. Values removed as possible credentials are named
// first, and the run goes only once the person has read that.
import { agents } from "./api.js";
import { el, problem } from "./dom.js";

/// The form that runs `id` again; `go` opens the new run's page at its first event.
export function runAgain(id: string, agentId: string, agentVersion: number, go: (messageId: string) => void) {
  const form = el("form", { class: "filters", id: "run-again" });
  const version = agentId
    ? el("input", { name: "version", type: "number", min: "1", value: String(agentVersion), "aria-label": `version of ${agentId} to run`, size: "6" })
    : null;
  const button = el("button", { type: "submit", class: "secondary" }, "Run again");
  const outcome = el("div", { id: "run-again-outcome", "aria-live": "polite" });
  if (version) form.append(el("label", {}, `${agentId} version `, version));
  form.append(button, outcome);
  let warned = false;
  form.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    outcome.replaceChildren();
    button.disabled = true;
    try {
      const { request, removed } = await agents.exportRun({ messageId: id });
      if (!request) return;
      if (removed.length && !warned) {
        warned = true;
        outcome.append(el("p", { class: "muted" }, `Removed as possible credentials: ${removed.join(", ")}. Run again without them?`));
        button.textContent = "Run again without them";
        return;
      }
      if (version && request.agentRef) request.agentRef.version = Number(version.value);
      // The new run's page follows it; this stream ends at its first event, which must not
      // stop it.
      request.cancelOnDisconnect = false;
      for await (const event of agents.run(request)) {
        go(event.messageId);
        break;
      }
    } catch (err) {
      outcome.append(problem(err));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}
