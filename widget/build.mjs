// Builds the Explorer's front-end into numr_web/static (committed; CI rebuilds it and diffs).
// Deterministic: no source maps, no timestamps, a fixed target, so `npm ci && npm run build` twice gives the same bytes.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(here, "../numr_web/static");
const common = { bundle: true, minify: true, sourcemap: false, legalComments: "none", logLevel: "warning", absWorkingDir: here };

await build({ ...common, entryPoints: ["src/index.ts"], outfile: `${out}/explorer.js`, format: "esm", target: "es2022", platform: "browser" });
await build({ ...common, entryPoints: ["src/explorer.css"], outfile: `${out}/explorer.css` });
