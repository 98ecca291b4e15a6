// A run as a timeline, drawn from Attach (every event from the first, then live ones): one
// row per round with the model that answered and its tool calls, the answer as it streams,
// retries, sub-agents' runs under the calls that started them, and the run's end. A run
// waiting for an approval or for a
// client tool's output can be answered here, and any run run again.
import { FinishReason, MessageStatus, type Budget, type ChildEvent, type RunEvent, type ToolCallDelta } from "./gen/agentrunner/v1/agent_pb.js";
import type { AgentThought, ToolCall, Usage } from "./gen/agentrunner/v1/common_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { runAgain } from "./again.js";
import { agents } from "./api.js";
import { el, isNotFound, link, problem, when } from "./dom.js";
import { badge, cost } from "./runs.js";

/// How often, and how far apart, a cut stream is attached again before the page gives up.
const RECONNECTS = 60;
const RECONNECT_MS = 1000;

interface Round {
  row: HTMLElement;
  calls: HTMLElement;
}

/// How long the page draws arriving events before it lets other work (a click) run.
const SLICE_MS = 40;

/// The longest text a call's row shows before its inspector is opened.
const SHORT_CHARS = 160;
/// The longest text the inspector shows before "Show all".
const INSPECT_CHARS = 8192;

function shortened(text: string) {
  return text.length > SHORT_CHARS ? `${text.slice(0, SHORT_CHARS)}…` : text;
}

/// `text` as indented JSON when it is JSON, else as it is.
function formatted(text: string) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/// Text that grows by many small pieces a second (a streaming answer): pieces are gathered
/// and drawn once a frame, appended to one text node, so no piece costs a layout of all
/// the text before it.
function growing(element: HTMLElement) {
  const node = document.createTextNode("");
  element.replaceChildren(node);
  let pending = "";
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    node.appendData(pending);
    pending = "";
  };
  return {
    add(text: string) {
      pending += text;
      if (!scheduled) {
        scheduled = true;
        requestAnimationFrame(flush);
      }
    },
    set(text: string) {
      pending = "";
      node.data = text;
    },
    text() {
      return node.data + pending;
    },
  };
}

/// A block of text cut at INSPECT_CHARS, with a button that shows the rest.
function block(name: string, text: string) {
  const whole = formatted(text);
  const pre = el("pre", { class: name }, whole.length > INSPECT_CHARS ? `${whole.slice(0, INSPECT_CHARS)}…` : whole);
  const more = whole.length > INSPECT_CHARS ? el("button", { type: "button", class: "secondary" }, `Show all ${whole.length} characters`) : null;
  if (more) {
    more.onclick = () => {
      pre.textContent = whole;
      more.remove();
    };
  }
  return el("div", {}, el("h4", {}, name), pre, more);
}

/// What a result cut to fit one event ends with: the stored call is whole.
const CUT_MARK = "to fit one message; the stored record is whole]";

/// A call's result, and when an event carried it cut, a button that reads the call whole.
function result(call: ToolCall, whole: () => Promise<ToolCall | undefined>) {
  const shown = block("result", call.observation);
  if (!call.observation.endsWith(CUT_MARK)) return shown;
  const read = el("button", { type: "button", class: "secondary read-whole" }, "Read the whole result");
  const box = el("div", {}, shown, read);
  read.onclick = async () => {
    read.disabled = true;
    try {
      const stored = await whole();
      if (stored) box.replaceChildren(block("result", stored.observation));
    } catch (err) {
      box.append(problem(err));
      read.disabled = false;
    }
  };
  return box;
}

/// A call's arguments and result in full, with its provider, id, time and error.
function inspector(call: ToolCall, whole: () => Promise<ToolCall | undefined>) {
  const facts: [string, string][] = [
    ["provider", call.provider || "—"],
    ["call id", call.id],
    ["time", call.meta ? `${call.meta.timeCost.toFixed(3)} s` : "—"],
  ];
  if (call.meta?.error) facts.push(["error", call.meta.error]);
  return el(
    "div",
    { class: "inspector" },
    el("dl", { class: "facts" }, ...facts.flatMap(([name, value]) => [el("dt", {}, name), el("dd", { "data-fact": name }, value)])),
    block("arguments", call.arguments),
    call.observation ? result(call, whole) : null,
  );
}

/// A budget's limits, in words.
function limits(budget: Budget) {
  return [
    budget.maxTokens !== undefined && `≤ ${budget.maxTokens} tokens`,
    budget.maxCost && `≤ ${budget.maxCost} cost`,
    budget.maxSeconds !== undefined && `≤ ${budget.maxSeconds} s`,
    budget.maxToolCalls !== undefined && `≤ ${budget.maxToolCalls} tool calls`,
  ]
    .filter(Boolean)
    .join(", ");
}

/// What a run spent against its budget's limits.
function spent(budget: Budget, usage?: Usage) {
  return [
    budget.maxTokens !== undefined && `${usage?.totalTokens ?? 0n} of ${budget.maxTokens} tokens`,
    budget.maxCost && `${usage?.totalPrice || "0"} of ${budget.maxCost} cost`,
    budget.maxSeconds !== undefined && `${(usage?.latency ?? 0).toFixed(1)} of ${budget.maxSeconds} s`,
  ]
    .filter(Boolean)
    .join(", ");
}

/// Draws run `id` into `view`; returns a function that closes its stream.
/** The status a run's `end` event leaves its message in. */
function endStatus(reason: FinishReason): MessageStatus {
  switch (reason) {
    case FinishReason.CANCELLED:
      return MessageStatus.CANCELLED;
    case FinishReason.INTERRUPTED:
      return MessageStatus.INTERRUPTED;
    default:
      return MessageStatus.COMPLETED;
  }
}

export function showRun(view: HTMLElement, id: string): () => void {
  const abort = new AbortController();
  const status = el("span", { id: "status" });
  const facts = el("dl", { class: "facts" });
  const actions = el("div", { class: "actions" });
  const again = el("div", { class: "actions" });
  const answer = el("p", { class: "answer", id: "answer" });
  const answerText = growing(answer);
  const timeline = el("ol", { class: "timeline", id: "timeline" });
  const waits = el("div", { id: "waits" });
  view.replaceChildren(
    el("p", {}, link("/", "← Runs")),
    el("h1", {}, "Run ", status),
    facts,
    actions,
    waits,
    again,
    el("h2", {}, "Timeline"),
    timeline,
    el("h2", {}, "Answer"),
    answer,
  );
  const rounds = new Map<number, Round>();
  let budget: Budget | undefined;

  const fact = (name: string, value: Node | string) => facts.append(el("dt", {}, name), el("dd", {}, value));
  const setStatus = (value: MessageStatus) => status.replaceChildren(badge(value));
  const note = (kind: string, ...children: (Node | string)[]) =>
    timeline.append(el("li", { class: `event ${kind}` }, ...children));

  const round = (position: number): Round => {
    let found = rounds.get(position);
    if (!found) {
      const calls = el("ul", { class: "calls" });
      const row = el("li", { class: "event round", "data-position": String(position) });
      row.append(el("div", { class: "round-head" }, `Round ${position}`), calls);
      timeline.append(row);
      found = { row, calls };
      rounds.set(position, found);
    }
    return found;
  };

  // Sub-agents' runs, by the call that started them: drawn under that call, kept when the
  // call's row is drawn again.
  const children = new Map<string, { box: HTMLElement; answer: ReturnType<typeof growing> }>();

  const callRow = (call: ToolCall, state: string) => {
    const seconds = call.meta ? `${call.meta.timeCost.toFixed(2)} s` : "";
    const summary = el(
      "summary",
      {},
      el("span", { class: "tool" }, `${call.provider ? `${call.provider}/` : ""}${call.name}`),
      el("code", {}, shortened(call.arguments)),
      call.observation ? el("span", { class: "observation" }, `→ ${shortened(call.observation)}`) : null,
      seconds ? el("span", { class: "time" }, seconds) : null,
    );
    return el(
      "li",
      { class: `call ${state}`, "data-call": call.id },
      el("details", { class: "inspect" }, summary, inspector(call, async () => (await agents.getToolCall({ messageId: id, toolCallId: call.id })).toolCall)),
      children.get(call.id)?.box,
    );
  };

  const drawChild = (child: ChildEvent) => {
    const inner = child.event?.event;
    let held = children.get(child.toolCallId);
    if (!held) {
      const agent = child.agentId ? `${child.agentId}@${child.agentVersion}` : "sub-agent";
      const answer = el("p", { class: "child-answer" });
      const answerText = growing(answer);
      const box = el(
        "details",
        { class: "child", open: "", "data-child": child.messageId },
        el("summary", {}, `Sub-agent ${agent} · `, link(`/runs/${child.messageId}`, "its run")),
        answer,
      );
      held = { box, answer: answerText };
      children.set(child.toolCallId, held);
      const call = [...timeline.querySelectorAll(".call")].find((row) => row.getAttribute("data-call") === child.toolCallId);
      (call ?? timeline).append(box);
    }
    if (inner?.case === "delta") held.answer.add(inner.value.text);
    if (inner?.case === "end") held.answer.set(inner.value.answer);
    if (inner?.case === "error") held.answer.set(`failed: ${inner.value.message}`);
  };

  // The model's reasoning in a round, dimmed above its text: streamed, or kept on the thought.
  const reasoningOf = (position: number) => {
    const { row, calls } = round(position);
    return row.querySelector(".reasoning") ?? row.insertBefore(el("p", { class: "reasoning" }), row.querySelector(".thought") ?? calls);
  };

  // Texts steering runs added before a round's model call (STEER): the user's turns, at
  // the top of the round that first saw them; once each, from the event or the thought.
  const drawSteered = (position: number, steer: { messageId: string; text: string }) => {
    const { row, calls } = round(position);
    const list = row.querySelector(".steered") ?? row.insertBefore(el("ul", { class: "steered" }), row.querySelector(".thought") ?? calls);
    if ([...list.children].some((item) => item.getAttribute("data-steer") === steer.messageId)) return;
    list.append(el("li", { "data-steer": steer.messageId }, el("strong", {}, "The user adds: "), steer.text));
  };

  const drawThought = (thought: AgentThought) => {
    for (const steer of thought.steered) drawSteered(thought.position, steer);
    if (thought.reasoning) reasoningOf(thought.position).textContent = thought.reasoning;
    const { row, calls } = round(thought.position);
    const head = row.querySelector(".round-head");
    if (head) {
      const usage = thought.usage;
      head.textContent = [
        `Round ${thought.position}`,
        thought.model && `${thought.provider}/${thought.model}`,
        usage && `${usage.totalTokens} tokens`,
        usage && usage.latency > 0 && `${usage.latency.toFixed(2)} s`,
        usage && usage.queueTime > 0 && `queued ${usage.queueTime.toFixed(2)} s`,
        cost(usage),
      ]
        .filter(Boolean)
        .join(" · ");
    }
    if (thought.thought) {
      const text = row.querySelector(".thought") ?? row.insertBefore(el("p", { class: "thought" }), calls);
      text.textContent = thought.thought;
    }
    calls.replaceChildren(...thought.toolCalls.map((call) => callRow(call, call.observation ? "done" : "asked")));
  };

  // A call the model is still writing: its arguments grow under the round until the call
  // is whole (the round's thought then lists it); a retry or a takeover voids it.
  const drawForming = (forming: ToolCallDelta) => {
    const { calls } = round(forming.position);
    let row = [...calls.children].find((child) => child.getAttribute("data-forming") === forming.toolCallId);
    if (!row) {
      row = el("li", { class: "call forming", "data-forming": forming.toolCallId }, el("span", { class: "tool" }, `${forming.name || "a tool"} ⋯ `), el("code", { class: "forming-args" }));
      calls.append(row);
    }
    const args = row.querySelector(".forming-args");
    if (args) args.textContent += forming.argumentsDelta + (forming.truncated ? " …" : "");
  };
  const dropForming = (position?: number) => {
    for (const row of timeline.querySelectorAll(".call.forming")) {
      if (position === undefined || row.closest(`[data-position="${position}"]`)) row.remove();
    }
  };

  const replaceCall = (position: number, call: ToolCall, state: string) => {
    const { calls } = round(position);
    [...calls.children].find((child) => child.getAttribute("data-forming") === call.id)?.remove();
    const held = [...calls.children].find((child) => child.getAttribute("data-call") === call.id);
    const fresh = callRow(call, state);
    if (held) held.replaceWith(fresh);
    else calls.append(fresh);
  };

  const askApproval = (calls: ToolCall[]) => {
    // Each call approved or declined on its own, a reason going with a decline (the model
    // reads it); or all at once.
    const choices = calls.map((call) => {
      const choice = el("select", { "aria-label": `decision on ${call.name}`, "data-call": call.id });
      choice.append(el("option", { value: "approve" }, "approve"), el("option", { value: "decline" }, "decline"));
      const reason = el("input", { placeholder: "reason, if declined", "aria-label": `reason for ${call.name}`, size: "30" });
      return { call, choice, reason };
    });
    const approve = el("button", { type: "button", id: "approve" }, "Approve all");
    const decline = el("button", { type: "button", id: "decline", class: "secondary" }, "Decline all");
    const send = el("button", { type: "button", id: "decide", class: "secondary" }, "Send these decisions");
    const panel = el(
      "section",
      { class: "wait" },
      el("h2", {}, "Waiting for your approval"),
      el("ul", { class: "calls" }, ...choices.map(({ call, choice, reason }) => el("li", { class: "decision" }, callRow(call, "asked"), choice, reason))),
      approve,
      decline,
      send,
    );
    const act = (pick: (index: number) => boolean) => async () => {
      approve.disabled = decline.disabled = send.disabled = true;
      try {
        await agents.approveToolCalls({
          messageId: id,
          decisions: choices.map(({ call, reason }, index) => ({
            toolCallId: call.id,
            approve: pick(index),
            reason: pick(index) ? "" : reason.value.trim(),
          })),
        });
        panel.remove();
      } catch (err) {
        panel.append(problem(err));
        approve.disabled = decline.disabled = send.disabled = false;
      }
    };
    approve.onclick = act(() => true);
    decline.onclick = act(() => false);
    send.onclick = act((index) => choices[index].choice.value === "approve");
    waits.replaceChildren(panel);
  };

  const askOutputs = (calls: ToolCall[]) => {
    const fields = calls.map((call) => el("textarea", { rows: "2", "data-call": call.id, "aria-label": `output of ${call.name}` }));
    const submit = el("button", { type: "button", id: "submit-outputs" }, "Send outputs");
    const panel = el(
      "section",
      { class: "wait" },
      el("h2", {}, "Waiting for your tools' outputs"),
      ...calls.map((call, index) => el("label", {}, callRow(call, "asked"), fields[index])),
      submit,
    );
    submit.onclick = async () => {
      submit.disabled = true;
      try {
        await agents.submitToolOutputs({
          messageId: id,
          outputs: calls.map((call, index) => ({ toolCallId: call.id, output: fields[index].value })),
        });
        panel.remove();
      } catch (err) {
        panel.append(problem(err));
        submit.disabled = false;
      }
    };
    waits.replaceChildren(panel);
  };

  // Whether the run was last seen queued: its start then shows it running.
  let queued = false;
  const draw = (event: RunEvent) => {
    const payload = event.event;
    switch (payload.case) {
      case "queued":
        // Waiting behind the runs ahead in its conversation (ENQUEUE); it has not started.
        note(
          "queued",
          "Queued behind ",
          link(`/runs/${payload.value.messageId}`, payload.value.messageId),
          ` · ${payload.value.ahead} ahead`,
        );
        setStatus(MessageStatus.QUEUED);
        queued = true;
        break;
      case "steered":
        // A steer (STEER): its text joins the live run; it runs on its own only if that
        // run makes no further model call.
        note(
          "steered",
          "Steers ",
          link(`/runs/${payload.value.messageId}`, payload.value.messageId),
          " · joins it before its next model call, else runs on its own",
        );
        setStatus(MessageStatus.QUEUED);
        queued = true;
        break;
      case "userTurn":
        drawSteered(payload.value.position, { messageId: payload.value.steerMessageId, text: payload.value.text });
        break;
      case "started":
        if (queued) setStatus(MessageStatus.RUNNING);
        queued = false;
        budget = payload.value.budget;
        note(
          "started",
          `Started ${when(event.createdAt)} · ${payload.value.provider}/${payload.value.model} · up to ${payload.value.maxIteration + 1} model calls`,
          budget ? el("span", { class: "budget" }, ` · budget: ${limits(budget)}`) : "",
        );
        break;
      case "thought":
        drawThought(payload.value);
        break;
      case "toolStarted":
        if (payload.value.toolCall) replaceCall(payload.value.position, payload.value.toolCall, "running");
        break;
      case "toolFinished":
        if (payload.value.toolCall) replaceCall(payload.value.position, payload.value.toolCall, "done");
        break;
      case "delta":
        answerText.add(payload.value.text);
        break;
      case "toolCallDelta":
        drawForming(payload.value);
        break;
      case "reasoningDelta":
        reasoningOf(payload.value.position).textContent += payload.value.text;
        break;
      case "retry":
        dropForming(payload.value.position);
        note("retry", `Model call retried (attempt ${payload.value.attempt}, ${payload.value.code}): ${payload.value.message}`);
        break;
      case "roundRestarted": {
        // The round is made again (its run taken over, or resumed after a restart): what it
        // had written is void, shown struck out on the marker.
        const voided = answerText.text();
        note(
          "restarted",
          el("strong", {}, "Taken over"),
          ` · round ${payload.value.position} made again: ${payload.value.reason}`,
          voided ? el("s", { class: "void" }, voided) : "",
        );
        answerText.set("");
        dropForming();
        break;
      }
      case "approvalRequired":
        askApproval(payload.value.toolCalls);
        break;
      case "toolCallsRequired":
        askOutputs(payload.value.toolCalls);
        break;
      case "child":
        if (payload.value.depth === 1) drawChild(payload.value);
        break;
      case "end": {
        const end = payload.value;
        answerText.set(end.answer);
        waits.replaceChildren();
        const reason = (FinishReason[end.finishReason] ?? "").toLowerCase();
        note(
          "end",
          `Ended ${when(event.createdAt)} · ${reason} · ${end.iterations} model calls · ${end.usage?.totalTokens ?? 0n} tokens ${cost(end.usage)}`,
          budget ? el("span", { class: "budget" }, ` · ${spent(budget, end.usage)}`) : "",
          end.budgetExhausted ? el("strong", {}, ` · the ${end.budgetExhausted} budget ran out`) : "",
          end.interruptedBy ? el("strong", {}, " · stopped by ", link(`/runs/${end.interruptedBy}`, end.interruptedBy)) : "",
        );
        setStatus(endStatus(end.finishReason));
        actions.replaceChildren();
        break;
      }
      case "error":
        waits.replaceChildren();
        note("error", `Failed: ${payload.value.code}: ${payload.value.message}`);
        setStatus(MessageStatus.FAILED);
        actions.replaceChildren();
        break;
      default:
        break;
    }
  };

  // Follows the run's events from the first; a stream cut by the service going away (a
  // restart, a hand-over) is attached again after the last event drawn, saying so meanwhile.
  const reconnecting = el("p", { class: "reconnecting", id: "reconnecting", role: "status", hidden: "" }, "Reconnecting…");
  view.insertBefore(reconnecting, facts);
  // A run whose events were retired (`[store] event_retention_days`) keeps only its end:
  // its rounds are drawn from its stored thoughts, and the page says so.
  const drawStored = async () => {
    note("retired", "Its events were retired after the retention period: its rounds are drawn from its stored thoughts.");
    let pageToken = "";
    do {
      const page = await agents.listThoughts({ messageId: id, pageToken }, { signal: abort.signal });
      page.thoughts.forEach(drawThought);
      pageToken = page.nextPageToken;
    } while (pageToken);
  };

  const attach = async () => {
    let last = 0n;
    // Events that arrive together are drawn in slices, the page answering clicks between
    // them: a stream of thousands of deltas a second holds no task long. A slice is long
    // enough that a replayed run is not laid out again after every few of its events.
    let slice = performance.now();
    for (let attempt = 0; ; attempt += 1) {
      try {
        for await (const event of agents.attach({ messageId: id, afterSeq: last }, { signal: abort.signal })) {
          if (performance.now() - slice > SLICE_MS) {
            await new Promise((resume) => setTimeout(resume, 0));
            slice = performance.now();
          }
          reconnecting.hidden = true;
          attempt = 0;
          // Replayed from the first, a run's events start at 1 unless they were retired.
          if (last === 0n && event.seq > 1n) await drawStored();
          // An unstored event (seq 0: reasoning shown, not kept) is no place to resume.
          if (event.seq > last) last = event.seq;
          draw(event);
        }
        return;
      } catch (err) {
        const code = ConnectError.from(err).code;
        const cut = code === Code.Unavailable || code === Code.Unknown || code === Code.Canceled;
        if (abort.signal.aborted || !cut || attempt >= RECONNECTS) throw err;
        reconnecting.hidden = false;
        await new Promise((resolve) => window.setTimeout(resolve, RECONNECT_MS));
      }
    }
  };

  const follow = async () => {
    try {
      const message = await agents.getMessage({ messageId: id }, { signal: abort.signal });
      setStatus(message.status);
      fact("query", message.query);
      fact("conversation", link(`/conversations/${message.conversationId}`, message.conversationId));
      if (message.parentMessageId) fact("started by", link(`/runs/${message.parentMessageId}`, message.parentMessageId));
      if (message.agentId) fact("agent", link(`/agents/${message.agentId}`, `${message.agentId}@${message.agentVersion}`));
      fact("model", `${message.provider}/${message.model}`);
      fact("end user", message.user || "—");
      fact("created", when(message.createdAt));
      if (message.queuedBehind) fact("queued behind", link(`/runs/${message.queuedBehind}`, message.queuedBehind));
      if (message.interruptedBy) fact("interrupted by", link(`/runs/${message.interruptedBy}`, message.interruptedBy));
      if (message.rolledBack) fact("history", "rolled back: left out of later prompts");
      again.replaceChildren(
        runAgain(id, message.agentId, message.agentVersion, (next) => {
          history.pushState(null, "", `/runs/${next}`);
          window.dispatchEvent(new PopStateEvent("popstate"));
        }),
      );
      const live = [MessageStatus.RUNNING, MessageStatus.QUEUED, MessageStatus.WAITING_APPROVAL, MessageStatus.WAITING_TOOL_OUTPUTS];
      if (live.includes(message.status)) {
        const cancel = el("button", { type: "button", id: "cancel", class: "secondary" }, "Cancel run");
        cancel.onclick = async () => {
          cancel.disabled = true;
          try {
            await agents.cancel({ messageId: id });
          } catch (err) {
            actions.append(problem(err));
          }
        };
        actions.replaceChildren(cancel);
      }
      await attach();
    } catch (err) {
      if (abort.signal.aborted) return;
      view.append(isNotFound(err) ? el("p", { class: "problem", role: "alert" }, "No such run.") : problem(err));
    }
  };
  void follow();
  return () => abort.abort();
}
