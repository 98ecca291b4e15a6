// Times the drawing of one finished run's page (CONSOLE_RUN on CONSOLE_URL) in headless
// Debian Chromium: from navigation to the end event drawn with every round, 5 times after
// one warm-up; prints each time and the median.
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
await browser.close();
