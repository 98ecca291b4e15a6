// Drives the console in headless Chromium against real servers on the scripted model:
// - the explorer lists runs newest first; "waiting for me" holds the waiting runs;
// - agents are listed with their labels, an agent's versions newest first and side by side,
//   an alias moved by compare-and-set; a conversation deleted, or refused while it waits;
//   the tenant's tokens today shown against its limits; the replicas shown to the admin
//   token, which never goes with a tenant's call;
// - a run waiting for approval is approved from its page and ends, its timeline drawn
//   (rounds, the tool call and its result, tokens), a call's inspector opened; a run's
//   budget shown against what it spent, its calls drawn as they formed and its kept
//   reasoning on its rounds; a call is declined on its own with a reason; a
//   client tool's output is sent from its page; a waiting run is cancelled from its page; a live run's answer grows on its
//   page; a run taken over by a second replica on PostgreSQL (the first killed) shows the
//   marker on that replica's page, and once its events are retired its rounds are drawn
//   from its thoughts; a run whose service is killed and started again is followed to its end, the
//   page saying it is reconnecting meanwhile and marking the round made again, its void
//   text struck out; a sub-agent's run is drawn under its call;
// - a run queued behind a waiting one is shown queued, naming it, and runs once it ends;
// - a run a newer one rolled back is shown interrupted, naming it, and rolled back;
// - a steer sent into a waiting run shows its text at the top of the run's next round;
// - a finished run is run again from its page, and the new run opens;
// - a parent of three live children draws them under their calls, with the explorer open
//   beside it, never holding more than two streams;
// - the operator page shows the server's and each service's health, with keys on too;
// - a new version of an agent is made from an edited configuration, a refused one showing
//   the API's words with its field selected;
// - a deep link loads by itself; an unknown run is "No such run";
// - text from runs and agents holding markup runs nothing and adds no element;
// - with API keys on, no key shows the API's refusal, a key lists its tenant's runs, and
//   the first tenant's run is "No such run";
// - no request leaves the service's origin; no element overflows at 1280 or at 400 px wide;
//   the page breaks no rule of its Content-Security-Policy; an accessibility scan finds no
//   serious or critical violation.
// CONSOLE_URL and CONSOLE_KEYED_URL are the servers (keys off, on), CONSOLE_KEY a key of
// the second; screenshots go to CONSOLE_SHOTS.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { chromium } from "playwright-core";
import * as esbuild from "esbuild";

const base = process.env.CONSOLE_URL;
const keyed = process.env.CONSOLE_KEYED_URL;
const key = process.env.CONSOLE_KEY;
const shots = process.env.CONSOLE_SHOTS ?? "shots";
mkdirSync(shots, { recursive: true });
await esbuild.build({
  entryPoints: ["test/support.ts"],
  bundle: true,
  platform: "node",
  format: "esm",
  outfile: "node_modules/.cache/console-test/support.mjs",
  logLevel: "warning",
});
const { run, agent, start, versioned, delegated, delegating: startDelegating, queuedBehind, stoppedBy, steering, longest, cancel } = await import("./node_modules/.cache/console-test/support.mjs");

const HOSTILE = `<img src=x onerror="window.__hacked=1"><script>window.__hacked=2</script> <a href="javascript:window.__hacked=3">x</a>`;
const paris = await run(base, "What time is it in Paris?", "end", "", 100000n, true);
const hostile = await run(base, HOSTILE);
const outputs = await run(base, "What does your clock say?", "outputs");
const doomed = await run(base, "May I read the clock, or not?", "approval");
const waiting = await run(base, "May I read the clock?", "approval");
await agent(base, "hostile-agent", HOSTILE);
await versioned(base, "support-bot");
const farewell = await run(base, "A conversation to delete");
const stillWaiting = await run(base, "A conversation that cannot go yet", "approval");
const refused = await run(base, "May I? I will take no for an answer.", "approval");
const theirs = await run(keyed, "A question of acme's", "end", key);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
// A service of this test's own, to kill and start again on one port and data directory.
const freePort = () =>
  new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
const ownPort = await freePort();
const ownBase = `http://127.0.0.1:${ownPort}`;
const ownData = `${process.env.CONSOLE_WORK ?? shots}/data-restarted`;
rmSync(ownData, { recursive: true, force: true });
const serveOn = async (port, data, llmPort, more = [], env = {}) => {
  const child = spawn(process.env.CONSOLE_BIN, ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", data, ...more], {
    env: { ...process.env, OPENAI_BASE_URL: `http://127.0.0.1:${llmPort}/v1`, OPENAI_API_KEY: "", ...env },
    stdio: "ignore",
  });
  for (let tries = 0; tries < 200; tries += 1) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/`)).ok) return child;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the test's own service did not start");
};
const serve = () => serveOn(ownPort, ownData, process.env.CONSOLE_LLM_PORT);
let own = await serve();
// And one on the model that calls the `helper` tool: a parent agent calling a sub-agent.
const delegatingPort = await freePort();
const delegatingBase = `http://127.0.0.1:${delegatingPort}`;
const delegatingData = `${process.env.CONSOLE_WORK ?? shots}/data-delegating`;
rmSync(delegatingData, { recursive: true, force: true });
const delegating = await serveOn(delegatingPort, delegatingData, process.env.CONSOLE_DELEGATING_LLM_PORT);

const problems = [];
const foreign = [];
const fail = async (message) => {
  console.error(`console test: ${message}`);
  await browser.close();
  process.exit(1);
};
const watch = (page, origin) => {
  page.on("console", (line) => line.type() === "error" && problems.push(line.text()));
  page.on("pageerror", (error) => problems.push(error.message));
  page.on("request", (request) => {
    if (!request.url().startsWith(origin) && !request.url().startsWith("data:")) foreign.push(request.url());
  });
};
const overflowing = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll("body *")]
      .filter((element) => {
        const box = element.getBoundingClientRect();
        if (box.width === 0 || box.right <= document.documentElement.clientWidth + 1) return false;
        // Inside a box that scrolls sideways (a wide table), it is reachable, not cut.
        for (let up = element.parentElement; up; up = up.parentElement) {
          if (["auto", "scroll"].includes(getComputedStyle(up).overflowX)) return false;
        }
        return true;
      })
      .map((element) => `${element.tagName.toLowerCase()}.${element.className}`),
  );
const texts = (page, selector) => page.locator(selector).allTextContents();

try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(page, base);

  // The explorer.
  const response = await page.goto(`${base}/`);
  const policy = response.headers()["content-security-policy"] ?? "";
  if (!policy.includes("frame-ancestors 'none'") || policy.includes("unsafe-inline")) {
    await fail(`the page's policy is not strict: ${policy}`);
  }
  await page.locator("table.runs tbody tr").nth(7).waitFor({ timeout: 10_000 });
  // The first load (the page, its script and style; the API's calls aside) is small.
  const loaded = await page.evaluate(() =>
    [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")]
      .filter((entry) => !entry.name.includes("/agentrunner."))
      .reduce((sum, entry) => sum + entry.transferSize, 0),
  );
  if (loaded === 0 || loaded > 250_000) await fail(`the first load took ${loaded} bytes (at most 250 KB)`);
  const queries = await texts(page, "table.runs tbody td.query");
  if (queries[3] !== "May I read the clock?" || queries[7] !== "What time is it in Paris?" || queries[6] !== HOSTILE) {
    await fail(`runs are not listed newest first, each by its query: ${queries.join(" | ")}`);
  }
  if ((await overflowing(page)).length) await fail(`overflows at 1280 px: ${await overflowing(page)}`);
  await page.screenshot({ path: `${shots}/console-runs.png`, fullPage: true });

  // The inbox, and approving from a run's page.
  await page.click("nav >> text=Waiting for me");
  await page.locator("h1", { hasText: "Waiting for me" }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("table.runs tbody tr").length === 5);
  await page.click(`a[href="/runs/${waiting}"]`);
  await page.waitForURL(`**/runs/${waiting}`);
  await page.locator("#approve").waitFor({ timeout: 10_000 });
  const call = await page.locator(".wait .call .tool").first().textContent();
  if (call !== "time/current_time") await fail(`the waiting call is not shown: ${call}`);
  await page.screenshot({ path: `${shots}/console-run-waiting.png`, fullPage: true });
  await page.click("#approve");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const answer = (await page.textContent("#answer")) ?? "";
  if (!answer.includes("word19")) await fail(`the approved run did not answer: ${answer}`);
  if ((await page.textContent("#status")) !== "completed") await fail("the approved run is not completed");
  const rounds = await page.locator(".timeline .round").count();
  if (rounds !== 2) await fail(`expected two rounds, saw ${rounds}`);
  const head = (await page.locator(".round-head").first().textContent()) ?? "";
  if (!/tokens/.test(head)) await fail(`a round shows no tokens: ${head}`);
  const observation = await page.locator(".timeline .call .observation").first().textContent();
  if (!observation?.startsWith("→ ")) await fail(`the tool's result is not on the timeline: ${observation}`);
  // The budget in force, and what the run spent against it; the call drawn as it formed
  // (replayed from the run's events), then replaced by the call as made.
  await page.addInitScript(() => {
    window.formed = [];
    new MutationObserver((changes) => {
      for (const change of changes) {
        for (const node of change.removedNodes) {
          if (node.classList?.contains("forming")) window.formed.push(node.querySelector(".forming-args")?.textContent);
        }
      }
    }).observe(document, { childList: true, subtree: true });
  });
  await page.goto(`${base}/runs/${paris}`);
  await page.locator(".timeline .end").waitFor({ timeout: 10_000 });
  const announced = (await page.textContent(".timeline .started .budget")) ?? "";
  const against = (await page.textContent(".timeline .end .budget")) ?? "";
  if (!announced.includes("≤ 100000 tokens") || !/\d+ of 100000 tokens/.test(against)) {
    await fail(`the budget is not shown against its limit: ${announced} / ${against}`);
  }
  const formed = await page.evaluate(() => window.formed);
  if (JSON.stringify(formed) !== JSON.stringify(['{"timezone": "UTC"}'])) {
    await fail(`the call was not drawn as it formed: ${JSON.stringify(formed)}`);
  }
  if (await page.locator(".timeline .call.forming").count()) await fail("a formed call stayed on the timeline");
  // The reasoning the run kept, dimmed above each round's text; none in the answer.
  const reasoning = await texts(page, ".timeline .round .reasoning");
  if (reasoning.length !== 2 || !reasoning.every((text) => text === "First the clock, then the answer. ")) {
    await fail(`the kept reasoning is not on its rounds: ${JSON.stringify(reasoning)}`);
  }
  if (((await page.textContent("#answer")) ?? "").includes("First the clock")) await fail("reasoning leaked into the answer");

  // A call's inspector: its arguments as indented JSON, its provider and id.
  await page.locator(".timeline .call summary").first().click();
  const inspected = (await page.locator(".timeline .call .inspector pre.arguments").first().textContent()) ?? "";
  if (inspected !== '{\n  "timezone": "UTC"\n}') await fail(`the inspector's arguments: ${JSON.stringify(inspected)}`);
  if ((await page.locator(".timeline .call .inspector dd[data-fact=provider]").first().textContent()) !== "time") {
    await fail("the inspector does not name the call's provider");
  }
  await page.screenshot({ path: `${shots}/console-run.png`, fullPage: true });

  // Run again: the same request from the run's page opens the new run, which ends.
  await page.click("#run-again button");
  await page.waitForURL((url) => url.pathname.startsWith("/runs/") && !url.pathname.endsWith(paris), { timeout: 10_000 });
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  if (!((await page.textContent(".facts")) ?? "").includes("What time is it in Paris?")) await fail("the run again did not ask the same question");
  if ((await page.textContent("#status")) !== "completed") await fail("the run again did not complete");

  // A client tool's output sent from the page.
  await page.goto(`${base}/runs/${outputs}`);
  await page.locator("#submit-outputs").waitFor({ timeout: 10_000 });
  // The output ends as a result an event carried cut ends (the cut itself is the
  // service's, tested against it): its inspector offers to read the stored call whole.
  await page.fill(".wait textarea", "It is 10:10 on my clock.\n[cut from 99 bytes to fit one message; the stored record is whole]");
  await page.click("#submit-outputs");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const sent = await page.locator(".timeline .call .observation").first().textContent();
  if (!sent?.includes("10:10")) await fail(`the output sent is not the call's result: ${sent}`);
  await page.locator(".timeline .call summary").first().click();
  await page.locator(".timeline .call .read-whole").first().click();
  await page.locator(".timeline .call .read-whole").waitFor({ state: "detached", timeout: 10_000 });
  const read = (await page.locator(".timeline .call pre.result").first().textContent()) ?? "";
  if (!read.includes("10:10")) await fail(`the call read whole is not shown: ${read}`);
  await page.screenshot({ path: `${shots}/console-call-read-whole.png`, fullPage: true });

  // A call declined on its own, with a reason the model reads.
  await page.goto(`${base}/runs/${refused}`);
  await page.locator("#decide").waitFor({ timeout: 10_000 });
  await page.selectOption(".decision select", "decline");
  await page.fill(".decision input", "not during the demo");
  await page.click("#decide");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const declined = (await page.locator(".timeline .call .observation").first().textContent()) ?? "";
  if (!declined.includes("declined this call: not during the demo")) await fail(`the declined call's result: ${declined}`);

  // Cancel from the page.
  await page.goto(`${base}/runs/${doomed}`);
  await page.locator("#cancel").waitFor({ timeout: 10_000 });
  await page.click("#cancel");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  if ((await page.textContent("#status")) !== "cancelled") await fail("the run was not cancelled");

  // A live run's answer grows while its page is open.
  const live = await start(base, "Tell me the time, slowly.");
  await page.goto(`${base}/runs/${live}`);
  const lengths = new Set();
  const until = Date.now() + 15_000;
  while (!(await page.locator(".timeline .end").count())) {
    if (Date.now() > until) await fail("the live run did not end on its page");
    const length = ((await page.textContent("#answer")) ?? "").length;
    if (length) lengths.add(length);
    await page.waitForTimeout(20);
  }
  if (lengths.size < 3) await fail(`the answer did not grow live (lengths seen: ${[...lengths]})`);

  // A run queued behind a waiting one of its conversation: shown queued, naming the run
  // ahead; it starts and ends on its page once that one is cancelled.
  const { blocker, queued } = await queuedBehind(base, "May I go first?", "And then me?");
  await page.goto(`${base}/runs/${queued}`);
  await page.locator(".timeline .queued").waitFor({ timeout: 10_000 });
  const ahead = (await page.textContent(".timeline .queued")) ?? "";
  if (!ahead.includes(blocker) || !ahead.includes("1 ahead")) await fail(`the queued run does not name the run ahead: ${ahead}`);
  if ((await page.textContent("#status")) !== "queued") await fail("the queued run is not shown queued");
  if ((await page.textContent(".facts"))?.includes(blocker) !== true) await fail("the facts do not name the run ahead");
  await page.screenshot({ path: `${shots}/console-run-queued.png`, fullPage: true });
  await cancel(base, blocker);
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  if ((await page.textContent("#status")) !== "completed") await fail("the queued run did not run once the run ahead ended");

  // A run waiting for approval that a newer run of its conversation rolled back: shown
  // interrupted, naming the run that stopped it, and rolled back.
  const { stopped, by } = await stoppedBy(base, "Shall I wait?", "No, start over.", true);
  await page.goto(`${base}/runs/${stopped}`);
  await page.locator(".timeline .end").waitFor({ timeout: 10_000 });
  if ((await page.textContent("#status")) !== "interrupted") await fail("the stopped run is not shown interrupted");
  if ((await page.textContent(".timeline .end"))?.includes(by) !== true) await fail("the end does not name the run that stopped it");
  const stoppedFacts = (await page.textContent(".facts")) ?? "";
  if (!stoppedFacts.includes(by) || !stoppedFacts.includes("rolled back")) await fail(`the facts do not say who stopped it and that it was rolled back: ${stoppedFacts}`);
  await page.screenshot({ path: `${shots}/console-run-interrupted.png`, fullPage: true });

  // A steer sent into a run waiting for approval: approved from its page, the run's next
  // round shows the user's text at its top, and the conversation keeps one message.
  const steerText = "Use Tokyo time, please.";
  const { live: steeredRun, steer } = await steering(base, "What time is it?", steerText);
  if (!steer) await fail("the steer was not answered `steered`");
  await page.goto(`${base}/runs/${steeredRun}`);
  await page.locator("#approve").waitFor({ timeout: 10_000 });
  await page.click("#approve");
  // The scripted model calls the tool again after a user's turn: approved too, then it answers.
  await page.locator('.timeline .round[data-position="2"] .steered').waitFor({ timeout: 15_000 });
  await page.locator("#approve").waitFor({ timeout: 15_000 });
  await page.click("#approve");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const joined = (await page.textContent('.timeline .round[data-position="2"] .steered')) ?? "";
  if (!joined.includes(steerText)) await fail(`round 2 does not show the steer's text: ${joined}`);
  if ((await page.locator(".steered li").count()) !== 1) await fail("the steer's text is shown more than once");
  await page.screenshot({ path: `${shots}/console-run-steered.png`, fullPage: true });
  await page.reload();
  await page.locator(".timeline .end").waitFor({ timeout: 10_000 });
  if ((await page.locator(".steered li").count()) !== 1) await fail("the steer's text is not drawn once again from the stored run");

  // Deep links by themselves; markup in runs' and agents' text stays text.
  await page.goto(`${base}/runs/${hostile}`);
  await page.locator(".timeline .end").waitFor({ timeout: 10_000 });
  await page.goto(`${base}/agents/hostile-agent`);
  await page.locator(".facts dd", { hasText: "onerror" }).first().waitFor({ timeout: 10_000 });
  await page.goto(`${base}/?agent=hostile-agent`);
  await page.goto(`${base}/`);
  await page.locator("table.runs tbody tr").first().waitFor();
  const hacked = await page.evaluate(() => window.__hacked ?? null);
  const injected = await page.locator("main img, main script, main a[href^='javascript']").count();
  if (hacked !== null || injected) await fail(`markup in text ran (${hacked}) or became elements (${injected})`);
  await page.goto(`${base}/runs/01a21dd8-0000-7000-8000-000000000000`);
  await page.locator(".problem").waitFor({ timeout: 10_000 });
  if ((await page.textContent(".problem")) !== "No such run.") await fail("an unknown run is not 'No such run.'");

  // Agents: the list, versions newest first side by side, an alias moved by
  // compare-and-set (a stale expectation is refused in words).
  await page.goto(`${base}/agents`);
  await page.locator("#agents td", { hasText: "support-bot" }).waitFor({ timeout: 10_000 });
  const labels = await texts(page, "#agents .chip");
  if (!labels.includes("team=support")) await fail(`the agent's labels are not listed: ${labels}`);
  await page.click("#agents a[href='/agents/support-bot']");
  await page.locator("#versions li").nth(1).waitFor({ timeout: 10_000 });
  const versions = await texts(page, "#versions summary");
  if (!versions[0]?.startsWith("version 2") || !versions[1]?.startsWith("version 1")) {
    await fail(`versions are not newest first: ${versions}`);
  }
  const changed = await texts(page, "#compare .changed");
  if (!changed.some((line) => line.includes("Answer at length.")) || !changed.some((line) => line.includes("Answer briefly."))) {
    await fail(`the two versions' difference is not marked: ${changed}`);
  }
  await page.fill("#move-alias [name=alias]", "prod");
  await page.fill("#move-alias [name=version]", "2");
  await page.fill("#move-alias [name=expected]", "2");
  await page.click("#move-alias button");
  await page.locator("#alias-outcome .problem").waitFor({ timeout: 10_000 });
  const stale = (await page.textContent("#alias-outcome")) ?? "";
  if (!stale.startsWith("FailedPrecondition")) await fail(`a stale expectation read: ${stale}`);
  await page.fill("#move-alias [name=expected]", "1");
  await page.click("#move-alias button");
  await page.locator("#alias-outcome", { hasText: "Moved." }).waitFor({ timeout: 10_000 });
  if (!((await page.textContent("#aliases")) ?? "").includes("prod → 2")) await fail("the alias did not move");
  await page.screenshot({ path: `${shots}/console-agent.png`, fullPage: true });

  // A new version from an edited configuration: JSON that is no configuration is refused
  // on the page; one the API refuses shows its words with the field it names selected; a
  // good one becomes the newest version.
  await page.fill("#new-config", "{ not json");
  await page.click("#new-version button");
  await page.locator("#new-version-outcome .problem").waitFor({ timeout: 10_000 });
  if (!((await page.textContent("#new-version-outcome")) ?? "").startsWith("Not an agent configuration")) await fail("broken JSON is not refused in words");
  await page.fill("#new-config", JSON.stringify({ model: { provider: "openai", name: "mock" }, maxIteration: 1000 }, null, 2));
  await page.click("#new-version button");
  await page.locator("#new-version-outcome .problem", { hasText: "max_iteration" }).waitFor({ timeout: 10_000 });
  const selected = await page.evaluate(() => {
    const area = document.querySelector("#new-config");
    return area.value.slice(area.selectionStart, area.selectionEnd);
  });
  if (selected !== '"maxIteration"') await fail(`the refused field is not selected in the text: ${selected}`);
  if ((await page.getAttribute("#new-config", "aria-invalid")) !== "true") await fail("the refused configuration is not marked invalid");
  await page.screenshot({ path: `${shots}/console-agent-refused-version.png`, fullPage: true });
  await page.fill("#new-config", JSON.stringify({ model: { provider: "openai", name: "mock" }, instruction: "Answer in French." }, null, 2));
  await page.click("#new-version button");
  await page.locator("#agent-note", { hasText: "Created version 3." }).waitFor({ timeout: 10_000 });
  await page.locator("#compare").waitFor({ timeout: 10_000 });
  const after = await texts(page, "#versions summary");
  if (!after[0]?.startsWith("version 3")) await fail(`the new version is not the newest: ${after}`);
  if (!(await texts(page, "#compare .changed")).some((line) => line.includes("Answer in French."))) await fail("the new version is not compared with the one before");

  // Deleting a conversation: refused in words while its run waits, done once none does.
  page.on("dialog", (dialog) => dialog.accept());
  const conversationOf = async (id) => {
    await page.goto(`${base}/runs/${id}`);
    const href = await page.locator(".facts a[href^='/conversations/']").getAttribute("href");
    await page.goto(`${base}${href}`);
    await page.locator("#delete").waitFor({ timeout: 10_000 });
  };
  await conversationOf(stillWaiting);
  await page.click("#delete");
  await page.locator("#delete-outcome .problem").waitFor({ timeout: 10_000 });
  const busy = (await page.textContent("#delete-outcome")) ?? "";
  if (!busy.startsWith("FailedPrecondition")) await fail(`deleting a live conversation read: ${busy}`);
  await conversationOf(farewell);
  await page.click("#delete");
  await page.waitForURL(`${base}/`);
  await page.locator("table.runs tbody tr").first().waitFor({ timeout: 10_000 });
  if ((await texts(page, "table.runs td.query")).includes("A conversation to delete")) {
    await fail("a deleted conversation's run is still listed");
  }

  // A run whose service is killed (kill -9) while its page follows it: the page says it is
  // reconnecting, attaches again after the last event it drew once the service is back,
  // and draws the run going on to its end.
  const resumed = await start(ownBase, "Tell me the time, and then some.");
  const follower = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(follower, ownBase);
  await follower.goto(`${ownBase}/runs/${resumed}`);
  await follower.waitForFunction(() => (document.getElementById("answer")?.textContent ?? "").length > 0, null, { timeout: 15_000 });
  own.kill("SIGKILL");
  await follower.locator("#reconnecting:not([hidden])").waitFor({ timeout: 15_000 });
  own = await serve();
  await follower.locator(".timeline .end").waitFor({ timeout: 30_000 });
  if (!(await follower.locator("#reconnecting").isHidden())) await fail("still reconnecting after the run ended");
  const finalAnswer = (await follower.textContent("#answer")) ?? "";
  if (!finalAnswer.includes("word19")) await fail(`the resumed run's answer: ${finalAnswer}`);
  const marker = follower.locator(".timeline .restarted");
  if ((await marker.count()) !== 1) await fail("the round made again after the restart has no marker");
  const voided = (await marker.locator("s.void").textContent()) ?? "";
  if (!voided.startsWith("word0")) await fail(`the void text is not struck out on the marker: ${voided}`);
  await follower.screenshot({ path: `${shots}/console-takeover.png`, fullPage: true });
  await follower.close();

  // Two replicas on PostgreSQL: a run on A, its page open on B; A is killed (kill -9), B
  // takes the run over and its page draws the takeover marker and the run to its end.
  if (process.env.CONSOLE_DATABASE_URL) {
    const secret = randomBytes(32).toString("hex");
    const replica = async (id, more = []) => {
      const port = await freePort();
      const data = `${process.env.CONSOLE_WORK ?? shots}/data-replica-${id}`;
      rmSync(data, { recursive: true, force: true });
      const flags = ["--database-url", process.env.CONSOLE_DATABASE_URL, "--replica-id", id, ...more];
      const child = await serveOn(port, data, process.env.CONSOLE_LLM_PORT, flags, { AGENT_RUNNER_SECRET_KEY: secret });
      return { child, base: `http://127.0.0.1:${port}` };
    };
    const [a, b] = [await replica("console-a"), await replica("console-b")];
    try {
      const taken = await start(a.base, "Tell me the time on two replicas.");
      const onB = await browser.newPage({ viewport: { width: 1280, height: 800 } });
      watch(onB, b.base);
      await onB.goto(`${b.base}/runs/${taken}`);
      await onB.waitForFunction(() => (document.getElementById("answer")?.textContent ?? "").length > 0, null, { timeout: 15_000 });
      a.child.kill("SIGKILL");
      await onB.locator(".timeline .restarted").waitFor({ timeout: 30_000 });
      await onB.locator(".timeline .end").waitFor({ timeout: 30_000 });
      if (!((await onB.textContent("#answer")) ?? "").includes("word19")) await fail("the run taken over on B did not end on its page");
      await onB.screenshot({ path: `${shots}/console-takeover-replicas.png`, fullPage: true });
      await onB.close();

      // The same run, its events retired (it ended "three days ago", a replica keeps one
      // day): its page draws its rounds from its stored thoughts and says so.
      const sql = (statement) =>
        spawnSync("psql", [process.env.CONSOLE_DATABASE_URL, "-qtAc", statement], { encoding: "utf8" }).stdout.trim();
      sql(`UPDATE messages SET ended_at = now() - interval '3 days' WHERE id = '${taken}'`);
      const retention = `${process.env.CONSOLE_WORK ?? shots}/retention.toml`;
      writeFileSync(retention, "[store]\nevent_retention_days = 1\n");
      const c = await replica("console-c", ["--config", retention]);
      try {
        for (let tries = 0; sql(`SELECT events_retired FROM messages WHERE id = '${taken}'`) !== "t"; tries += 1) {
          if (tries > 100) await fail("the run's events were not retired");
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        const retired = await browser.newPage({ viewport: { width: 1280, height: 800 } });
        watch(retired, c.base);
        await retired.goto(`${c.base}/runs/${taken}`);
        await retired.locator(".timeline .retired").waitFor({ timeout: 10_000 });
        await retired.locator(".timeline .end").waitFor({ timeout: 10_000 });
        const drawn = await retired.locator(".timeline .round").count();
        const call = (await retired.locator(".timeline .call .tool").first().textContent()) ?? "";
        if (drawn !== 2 || !call.includes("current_time")) await fail(`the retired run's rounds: ${drawn} drawn, call ${call}`);
        if (!((await retired.textContent("#answer")) ?? "").includes("word19")) await fail("the retired run's answer is not shown");
        await retired.screenshot({ path: `${shots}/console-run-retired.png`, fullPage: true });
        await retired.close();
      } finally {
        c.child.kill("SIGKILL");
      }
    } finally {
      a.child.kill("SIGKILL");
      b.child.kill("SIGKILL");
    }
  } else {
    console.log("console test: skipped the two-replica step (no PostgreSQL)");
  }

  // A sub-agent's run drawn under the call that started it, its answer in place, linked to
  // its own page, which links back to the parent.
  const boss = await delegated(delegatingBase, "Ask your helper.");
  const parent = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(parent, delegatingBase);
  await parent.goto(`${delegatingBase}/runs/${boss}`);
  await parent.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const nested = parent.locator(".call .child");
  if ((await nested.count()) !== 1) await fail(`expected one sub-agent run under its call, saw ${await nested.count()}`);
  const childAnswer = (await nested.locator(".child-answer").textContent()) ?? "";
  if (!childAnswer.includes("word19")) await fail(`the sub-agent's answer is not in place: ${childAnswer}`);
  const childTool = await parent.locator(".call:has(.child) .tool").textContent();
  if (!childTool?.endsWith("helper")) await fail(`the sub-agent is not under its call: ${childTool}`);
  await parent.screenshot({ path: `${shots}/console-sub-agent.png`, fullPage: true });
  await nested.locator("a").click();
  await parent.locator(".facts a[href='/runs/" + boss + "']").waitFor({ timeout: 10_000 });
  await parent.close();

  // A finished run of the most rounds a run makes draws every round and call (how fast is
  // console/bench.sh's business, not a test's).
  const longPort = await freePort();
  const longData = `${process.env.CONSOLE_WORK ?? shots}/data-long`;
  rmSync(longData, { recursive: true, force: true });
  const long = await serveOn(longPort, longData, process.env.CONSOLE_LONG_LLM_PORT);
  try {
    const longBase = `http://127.0.0.1:${longPort}`;
    const longRun = await longest(longBase);
    const longPage = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    watch(longPage, longBase);
    await longPage.goto(`${longBase}/runs/${longRun}`);
    await longPage.locator(".timeline .end").waitFor({ timeout: 30_000 });
    const drawn = [await longPage.locator(".timeline .round").count(), await longPage.locator(".timeline .call").count()];
    await longPage.close();
    if (drawn[0] !== 100 || drawn[1] !== 297) await fail(`the longest run drew ${drawn[0]} rounds and ${drawn[1]} calls, not 100 and 297`);
  } finally {
    long.kill();
  }

  // A parent with three live children, its page and the explorer open in one browser: the
  // children are drawn under their calls as they run, and the two pages hold at most two
  // streams at once (a browser keeps six HTTP/1.1 connections to a host; the run page
  // follows the parent alone, the explorer polls).
  const fanoutPort = await freePort();
  const fanoutBase = `http://127.0.0.1:${fanoutPort}`;
  const fanoutData = `${process.env.CONSOLE_WORK ?? shots}/data-fanout`;
  rmSync(fanoutData, { recursive: true, force: true });
  const fanout = await serveOn(fanoutPort, fanoutData, process.env.CONSOLE_FANOUT_LLM_PORT);
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const open = new Set();
    let most = 0;
    const streaming = (request) => /\/agentrunner\.v1\.AgentService\/(Attach|Run)$/.test(request.url());
    context.on("request", (request) => {
      if (!streaming(request)) return;
      open.add(request);
      most = Math.max(most, open.size);
    });
    for (const settled of ["requestfinished", "requestfailed"]) context.on(settled, (request) => open.delete(request));
    const explorer = await context.newPage();
    watch(explorer, fanoutBase);
    await explorer.goto(`${fanoutBase}/`);
    const three = await startDelegating(fanoutBase, "Ask three helpers at once.");
    const family = await context.newPage();
    watch(family, fanoutBase);
    await family.goto(`${fanoutBase}/runs/${three}`);
    await family.locator(".call .child").nth(2).waitFor({ timeout: 20_000 });
    const liveChildren = await family.locator(".call .child").count();
    await family.locator(".timeline .end").waitFor({ timeout: 60_000 });
    const answers = await texts(family, ".call .child .child-answer");
    if (liveChildren !== 3 || answers.length !== 3 || !answers.every((text) => text.includes("word19"))) {
      await fail(`the three children were not drawn under their calls: ${liveChildren} live, answers ${JSON.stringify(answers)}`);
    }
    await explorer.reload();
    await explorer.locator("table.runs td.query", { hasText: "Ask three helpers at once." }).waitFor({ timeout: 10_000 });
    if (most < 1 || most > 2) await fail(`the pages held ${most} streams at once (one to two expected)`);
    await family.screenshot({ path: `${shots}/console-three-children.png`, fullPage: true });
    await context.close();
  } finally {
    fanout.kill("SIGKILL");
  }

  // The tenant's usage today against its limits.
  await page.click("nav >> text=Usage");
  await page.locator("#usage dd").nth(1).waitFor({ timeout: 10_000 });
  const used = (await texts(page, "#usage dd"))[1] ?? "";
  if (!/^[1-9]\d* \(no limit\)$/.test(used)) await fail(`tokens today read: ${used}`);
  // Beside it, the server's health and each service's, as a probe sees them.
  await page.locator("#health dd").nth(3).waitFor({ timeout: 10_000 });
  const healthy = await texts(page, "#health dd");
  if (healthy.length !== 4 || healthy.some((status) => status !== "serving")) await fail(`health read: ${healthy}`);

  // At 400 px wide.
  await page.setViewportSize({ width: 400, height: 800 });
  for (const path of ["/", `/runs/${paris}`]) {
    await page.goto(`${base}${path}`);
    await page.locator(path === "/" ? "table.runs" : ".timeline .end").waitFor({ timeout: 10_000 });
    const wide = await overflowing(page);
    if (wide.length) await fail(`overflows at 400 px on ${path}: ${[...new Set(wide)].join(", ")}`);
  }
  await page.screenshot({ path: `${shots}/console-run-narrow.png`, fullPage: true });

  // The replicas, with the admin token (kept for the tab, sent with admin calls alone).
  const operator = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(operator, keyed);
  const tenantCalls = [];
  operator.on("request", (request) => {
    if (request.url().includes("/agentrunner.v1.AgentService/")) tenantCalls.push(request.headers()["authorization"] ?? "");
  });
  await operator.goto(`${keyed}/operator`);
  await operator.fill("#key", key);
  await operator.click("#signin button");
  await operator.fill("#admin-token", process.env.CONSOLE_ADMIN_TOKEN);
  await operator.click("#admin button");
  await operator.locator("#replicas td", { hasText: "(this one)" }).waitFor({ timeout: 10_000 });
  if ((await texts(operator, "#health dd"))[0] !== "serving") await fail("health is not open with API keys on");
  const replica = await texts(operator, "#replicas tbody td");
  if (replica[1] !== "live") await fail(`the replica is not shown live: ${replica}`);
  if (tenantCalls.some((header) => header.includes(process.env.CONSOLE_ADMIN_TOKEN))) {
    await fail("the admin token went with a tenant's call");
  }
  await operator.screenshot({ path: `${shots}/console-operator.png`, fullPage: true });
  await operator.close();

  // API keys on: no key, a key, another tenant's run.
  const signed = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(signed, keyed);
  await signed.goto(`${keyed}/`);
  await signed.locator(".problem").waitFor({ timeout: 10_000 });
  const refusal = (await signed.textContent(".problem")) ?? "";
  if (!refusal.startsWith("Unauthenticated")) await fail(`no key did not show the refusal: ${refusal}`);
  await signed.fill("#key", key);
  await signed.click("#signin button");
  await signed.locator("table.runs td.query", { hasText: "A question of acme's" }).waitFor({ timeout: 10_000 });
  if (await signed.evaluate(() => document.cookie)) await fail("the key went into a cookie");
  if (signed.url().includes(key)) await fail("the key went into the URL");
  await signed.goto(`${keyed}/runs/${theirs}`);
  await signed.locator(".timeline .end").waitFor({ timeout: 10_000 });
  await signed.goto(`${keyed}/runs/${paris}`);
  await signed.locator(".problem").waitFor({ timeout: 10_000 });
  if ((await signed.textContent(".problem")) !== "No such run.") await fail("another tenant's run is not 'No such run.'");

  // An accessibility scan (axe-core) of the explorer, a run page and an agent's page: no
  // serious or critical violation. axe is injected as a script, which the page's policy
  // would refuse: this one page bypasses it.
  const audited = await browser.newPage({ viewport: { width: 1280, height: 800 }, bypassCSP: true });
  for (const [path, ready] of [["/", "table.runs"], [`/runs/${paris}`, ".timeline .end"], ["/agents", "#agents"], ["/agents/support-bot", "#versions"]]) {
    await audited.goto(`${base}${path}`);
    await audited.locator(ready).first().waitFor({ timeout: 10_000 });
    await audited.addScriptTag({ path: "node_modules/axe-core/axe.min.js" });
    const violations = await audited.evaluate(async () =>
      (await window.axe.run(document, { runOnly: ["wcag2a", "wcag2aa"] })).violations
        .filter((violation) => ["serious", "critical"].includes(violation.impact))
        .map((violation) => `${violation.id} (${violation.nodes.length})`),
    );
    if (violations.length) await fail(`accessibility on ${path}: ${violations.join(", ")}`);
  }

  const cspProblems = problems.filter((text) => /Content Security Policy|Refused to/.test(text));
  if (cspProblems.length) await fail(`the page broke its policy: ${cspProblems.join("; ")}`);
  if (foreign.length) await fail(`requests left the service's origin: ${foreign.join(", ")}`);
  console.log(
    `console test: listed ${queries.length} runs newest first, approved, answered and cancelled waiting runs from their pages, ` +
      `markup stayed text, 1280 and 400 px fit, keys held per tab (${theirs} seen only with its key)`,
  );
} finally {
  await browser.close();
  own.kill("SIGKILL");
  delegating.kill("SIGKILL");
}
