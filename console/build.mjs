// Builds the console into dist/: the page, and its script and style under names that
// carry their content's hash. The same sources and lockfile give the same bytes, which
// CI checks against the committed dist/ (the binary embeds it).
import { readFileSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import * as esbuild from "esbuild";

rmSync("dist", { recursive: true, force: true });
mkdirSync("dist/assets", { recursive: true });
const result = await esbuild.build({
  entryPoints: { app: "src/main.ts", style: "src/style.css" },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  outdir: "dist/assets",
  entryNames: "[name]-[hash]",
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});
const built = Object.keys(result.metafile.outputs).map((path) => `/${path.replace(/^dist\//, "")}`);
const script = built.find((path) => path.endsWith(".js"));
const style = built.find((path) => path.endsWith(".css"));
const page = readFileSync("index.html", "utf8")
  .replace("{{script}}", script)
  .replace("{{style}}", style);
writeFileSync("dist/index.html", page);
console.log(`console: ${script}, ${style}`);
