// Drives the console in headless Chromium against a real server: the runs explorer lists
// the runs newest first, "waiting for me" holds the run waiting for an approval, its page
// draws the timeline and approving it ends the run; a deep link loads by itself; a run of
// no one is "not found"; the page breaks no rule of its Content-Security-Policy.
// CONSOLE_URL is the server; CONSOLE_SHOTS the folder for screenshots.
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";
import * as esbuild from "esbuild";

const base = process.env.CONSOLE_URL;
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
const { run } = await import("./node_modules/.cache/console-test/support.mjs");

const first = await run(base, "What time is it in Paris?");
const second = await run(base, "And in Tokyo?");
const waiting = await run(base, "May I read the clock?", true);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const problems = [];
const fail = async (message) => {
  console.error(`console test: ${message}`);
  await browser.close();
  process.exit(1);
};
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (line) => {
    if (line.type() === "error") problems.push(line.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));

  const response = await page.goto(`${base}/`);
  const policy = response.headers()["content-security-policy"] ?? "";
  if (!policy.includes("frame-ancestors 'none'") || policy.includes("unsafe-inline")) {
    await fail(`the page's policy is not strict: ${policy}`);
  }
  await page.locator("table.runs tbody tr").nth(2).waitFor({ timeout: 10_000 });
  const queries = await page.locator("table.runs tbody td.query").allTextContents();
  if (queries[0] !== "May I read the clock?" || queries[2] !== "What time is it in Paris?") {
    await fail(`runs are not newest first: ${queries.join(" | ")}`);
  }
  await page.screenshot({ path: `${shots}/console-runs.png`, fullPage: true });

  await page.click("text=Waiting for me");
  await page.locator("h1", { hasText: "Waiting for me" }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("table.runs tbody tr").length === 1);
  await page.click("table.runs tbody td.query a");
  await page.waitForURL(`**/runs/${waiting}`);
  await page.locator("#approve").waitFor({ timeout: 10_000 });
  const call = await page.locator(".wait .call .tool").first().textContent();
  if (call !== "time/current_time") await fail(`the waiting call is not shown: ${call}`);
  await page.screenshot({ path: `${shots}/console-run-waiting.png`, fullPage: true });
  await page.click("#approve");
  await page.locator(".timeline .end").waitFor({ timeout: 15_000 });
  const answer = (await page.textContent("#answer")) ?? "";
  if (!answer.includes("word")) await fail(`the approved run did not answer: ${answer}`);
  const status = await page.textContent("#status");
  if (status !== "completed") await fail(`the approved run's status: ${status}`);
  const rounds = await page.locator(".timeline .round").count();
  if (rounds !== 2) await fail(`expected two rounds, saw ${rounds}`);
  await page.screenshot({ path: `${shots}/console-run.png`, fullPage: true });

  await page.goto(`${base}/runs/${first}`);
  await page.locator(".timeline .end").waitFor({ timeout: 10_000 });
  const observation = await page.locator(".timeline .call .observation").first().textContent();
  if (!observation?.startsWith("→ ")) await fail(`the tool's result is not on the timeline: ${observation}`);

  await page.goto(`${base}/runs/01a21dd8-0000-7000-8000-000000000000`);
  await page.locator(".problem").waitFor({ timeout: 10_000 });
  const missing = await page.textContent(".problem");
  if (missing !== "No such run.") await fail(`an unknown run reads: ${missing}`);

  const cspProblems = problems.filter((text) => /Content Security Policy|Refused to/.test(text));
  if (cspProblems.length) await fail(`the page broke its policy: ${cspProblems.join("; ")}`);
  const errors = problems.filter((text) => !/404|NotFound|not_found|Failed to load resource/.test(text));
  if (errors.length) await fail(`the page logged errors: ${errors.join("; ")}`);
  console.log(`console test: listed ${queries.length} runs, approved ${waiting} from its page, drew ${rounds} rounds; ${second} listed too`);
} finally {
  await browser.close();
}
