// Times the drawing of one finished run's page (CONSOLE_RUN on CONSOLE_URL) in headless
// Debian Chromium: from navigation to the end event drawn with every round, 5 times after
// one warm-up; prints each time and the median.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const base = process.env.CONSOLE_URL;
const run = process.env.CONSOLE_RUN;
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
const times = [];
for (let attempt = 0; attempt <= 5; attempt++) {
  const started = Date.now();
  await page.goto(`${base}/runs/${run}`);
  await page.locator(".timeline .end").waitFor({ timeout: 60_000 });
  const rounds = await page.locator(".timeline .round").count();
  const calls = await page.locator(".timeline .call").count();
  const took = Date.now() - started;
  if (attempt > 0) times.push(took);
  console.log(`${attempt === 0 ? "warm-up" : `render ${attempt}`}: ${took} ms (${rounds} rounds, ${calls} calls)`);
}
times.sort((a, b) => a - b);
console.log(`median of ${times.length}: ${times[Math.floor(times.length / 2)]} ms`);

// A live run streaming as fast as its model writes, its page open from its first event.
const live = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await live.addInitScript(() => {
  window.longTasks = [];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.longTasks.push([entry.startTime, entry.duration]);
  }).observe({ type: "longtask", buffered: true });
});
const cli = spawn(process.env.CONSOLE_BIN, ["run", "Talk fast.", "--addr", process.env.CONSOLE_FAST_ADDR, "--model", "openai/mock", "--json"]);
const lines = createInterface({ input: cli.stdout });
const deltas = [];
let liveRun = "";
const firstEvent = new Promise((resolve) => {
  lines.on("line", (line) => {
    const event = JSON.parse(line);
    if (!liveRun) resolve((liveRun = event.message_id));
    if (event.type === "delta") deltas.push(Date.now());
  });
});
await live.goto(`${process.env.CONSOLE_FAST_URL}/runs/${await firstEvent}`);
await live.locator("#cancel").waitFor({ timeout: 10_000 });
// Tasks from here on are the stream's; the page's load (parsing the bundle) came before.
const streaming = await live.evaluate(() => performance.now());
// Let it stream a while with the page drawing, then cancel.
await live.waitForTimeout(1500);
const clicked = Date.now();
await live.click("#cancel");
await live.locator(".timeline .end").waitFor({ timeout: 30_000 });
const answered = Date.now() - clicked;
const seconds = deltas.length > 1 ? (deltas[deltas.length - 1] - deltas[0]) / 1000 : 0;
const tasks = await live.evaluate(() => window.longTasks);
const during = tasks.filter(([start]) => start >= streaming).map(([, duration]) => duration);
const loading = tasks.filter(([start]) => start < streaming).map(([, duration]) => duration);
const longest = Math.max(0, ...during);
const count = during.length;
console.log(`live: ${deltas.length} deltas in ${seconds.toFixed(2)} s (${Math.round(deltas.length / Math.max(seconds, 0.001))} a second) to the CLI beside the page`);
console.log(`live: longest main-thread task while it streamed ${longest.toFixed(0)} ms (${count} over 50 ms; loading the page: ${loading.map((d) => d.toFixed(0)).join(", ") || "none"} ms); Cancel answered (end drawn) in ${answered} ms`);
cli.kill();
await browser.close();
