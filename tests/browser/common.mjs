// Shared by the page (harness.mjs) and the worker (worker.mjs): boot Pyodide
// offline from this server and run Python code in one of two ways.
import { loadPyodide } from "./node_modules/pyodide/pyodide.mjs";

const BOOT = `
import json, sys
sys.path.insert(0, "/numr")

def _harness_json(value):
    return json.dumps(value, default=repr)
`;

// noJspi: hide JS Promise Integration from Pyodide before it loads, as in a browser without
// it (Pyodide looks for WebAssembly.Suspending): run_sync is then unavailable everywhere.
export async function boot({ noJspi = false } = {}) {
  const t0 = performance.now();
  if (noJspi) {
    delete WebAssembly.Suspending;
    delete WebAssembly.promising;
    if ("Suspending" in WebAssembly) throw new Error("could not hide WebAssembly.Suspending");
  }
  const pyodide = await loadPyodide({ indexURL: new URL("./node_modules/pyodide/", import.meta.url).href });
  // The transport module, served by the test's HTTP server, goes into the FS as a top-level module.
  const resp = await fetch(new URL("/numr/transport_browser.py", import.meta.url));
  if (!resp.ok) throw new Error(`fetching the transport failed: ${resp.status}`);
  pyodide.FS.mkdirTree("/numr");
  pyodide.FS.writeFile("/numr/transport_browser.py", new Uint8Array(await resp.arrayBuffer()));
  pyodide.runPython(BOOT);
  return { pyodide, bootMs: performance.now() - t0 };
}

// mode "async": pyodide.runPythonAsync, the route on which run_sync can block (JSPI).
// mode "callback": plain synchronous pyodide.runPython, called from a setTimeout callback, as
// Python entered from a JS event handler is; if the code returns an awaitable (a coroutine),
// it is awaited from JS afterwards.
// The answer is always a JSON string: {"ok": true, "result": ...} or {"ok": false, "error": "..."}.
export async function run(pyodide, code, mode) {
  let value;
  try {
    if (mode === "async") {
      value = await pyodide.runPythonAsync(code);
    } else if (mode === "callback") {
      const box = await new Promise((resolve, reject) =>
        setTimeout(() => {
          try {
            resolve({ v: pyodide.runPython(code) });
          } catch (e) {
            reject(e);
          }
        }, 0),
      );
      value = box.v;
      if (value && typeof value === "object" && typeof value.then === "function") {
        const awaitable = value;
        value = await awaitable;
        if (awaitable.destroy) awaitable.destroy();
      }
    } else {
      throw new Error(`unknown mode ${mode}`);
    }
    const toJson = pyodide.globals.get("_harness_json");
    const text = toJson(value);
    toJson.destroy();
    if (value && typeof value.destroy === "function") value.destroy();
    return `{"ok": true, "result": ${text}}`;
  } catch (e) {
    return JSON.stringify({ ok: false, error: String(e && e.message ? e.message : e) });
  }
}
