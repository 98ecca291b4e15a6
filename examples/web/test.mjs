// Drives the page in headless Chromium: a run streams into it over gRPC-Web (the answer
// grows before the run ends), the conversation's messages and the tenant's runs are
// listed, and an error the
// service returns arrives with its gRPC code. WEB_PAGE_URL is the page (served from an
// origin the service lists for CORS), WEB_SCREENSHOT where its picture goes.
import { chromium } from "playwright-core";

const pageUrl = process.env.WEB_PAGE_URL;
const screenshot = process.env.WEB_SCREENSHOT ?? "web.png";
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const fail = async (message) => {
  console.error(`web example: ${message}`);
  await browser.close();
  process.exit(1);
};
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  page.on("console", (line) => console.log(`page: ${line.text()}`));
  await page.goto(pageUrl);
  await page.fill("#query", "What time is it?");
  await page.click("#run");

  // The answer grows while the run streams.
  const lengths = new Set();
  const deadline = Date.now() + 30_000;
  while ((await page.textContent("#status")) !== "ended") {
    if (Date.now() > deadline) await fail(`no end: ${await page.textContent("#status")}`);
    const length = ((await page.textContent("#answer")) ?? "").length;
    if (length > 0) lengths.add(length);
    await page.waitForTimeout(20);
  }
  const answer = (await page.textContent("#answer")) ?? "";
  if (!answer) await fail("the run ended without an answer");
  if (lengths.size < 2) await fail(`the answer did not stream (lengths seen: ${[...lengths]})`);
  const events = await page.locator("#events li").allTextContents();
  if (!events[0]?.includes("started") || !events.at(-1)?.includes("end")) {
    await fail(`events out of order: ${events.join(", ")}`);
  }

  // The conversation's messages, listed by a unary call.
  await page.locator("#messages tbody tr").first().waitFor({ timeout: 10_000 });
  const row = await page.locator("#messages tbody tr").first().locator("td").allTextContents();
  if (row[2] !== "What time is it?" || row[3] !== answer) {
    await fail(`the listed message is not the run: ${row.join(" | ")}`);
  }
  // The tenant's runs, newest first: the run just made leads the list, completed.
  await page.locator("#runs tbody tr").first().waitFor({ timeout: 10_000 });
  const run = await page.locator("#runs tbody tr").first().locator("td").allTextContents();
  if (run[0] !== row[0] || run[1] !== "COMPLETED" || run[2] !== "What time is it?") {
    await fail(`the newest listed run is not the run: ${run.join(" | ")}`);
  }
  await page.screenshot({ path: screenshot, fullPage: true });

  // An error comes back with its gRPC code, read from the trailers.
  await page.fill("#model", "no-such-provider/none");
  await page.click("#run");
  await page.locator("#status.failed").waitFor({ timeout: 10_000 });
  const refused = (await page.textContent("#status")) ?? "";
  if (!/InvalidArgument|NotFound|FailedPrecondition/.test(refused)) {
    await fail(`the refusal lost its code: ${refused}`);
  }
  console.log(`web example: streamed ${events.length} events (${lengths.size} answer lengths seen), listed the message and the run, refusal read as "${refused}"`);
} finally {
  await browser.close();
}
