// A dedicated Web Worker with its own Pyodide; the page sends {id, code, mode}.
// worker.mjs?nojspi=1 boots Pyodide with JSPI hidden (see common.mjs).
import { boot, run } from "./common.mjs";

const booted = boot({ noJspi: new URL(import.meta.url).searchParams.get("nojspi") === "1" });
booted.then(
  ({ bootMs }) => postMessage({ id: 0, ready: true, bootMs }),
  (e) => postMessage({ id: 0, ready: false, error: String(e && e.stack ? e.stack : e) }),
);

onmessage = async (event) => {
  const { id, code, mode } = event.data;
  const { pyodide } = await booted;
  postMessage({ id, json: await run(pyodide, code, mode) });
};
