// The page's side: one Pyodide in the page and one in each of two dedicated workers.
//   await window.harnessReady  -> boot times in ms {page, worker, "worker-nojspi"}
//   await window.runPython(code, {where, mode})
//     where: "page" | "worker" | "worker-nojspi" (a worker whose Pyodide was booted without JSPI)
//     mode:  "async" (pyodide.runPythonAsync) | "callback" (plain pyodide.runPython from a setTimeout
//            callback; a returned coroutine is then awaited from JS)
//     -> JSON string {"ok": true, "result": <the code's last expression>} | {"ok": false, "error": ...}
//   index.html?workers=0 boots the page's Pyodide only (scripts/browser-bench needs no workers).
import { boot, run } from "./common.mjs";

function startWorker(query) {
  const worker = new Worker(new URL(`./worker.mjs${query}`, import.meta.url), { type: "module" });
  const pending = new Map();
  let nextId = 1;
  let ready;
  const booted = new Promise((resolve, reject) => (ready = { resolve, reject }));
  worker.onmessage = (event) => {
    const msg = event.data;
    if (msg.id === 0) {
      if (msg.ready) ready.resolve(msg.bootMs);
      else ready.reject(new Error(`worker boot failed: ${msg.error}`));
      return;
    }
    pending.get(msg.id)(msg.json);
    pending.delete(msg.id);
  };
  worker.onerror = (e) => ready.reject(new Error(`worker error: ${e.message}`));
  const call = async (code, mode) => {
    await booted;
    const id = nextId++;
    return new Promise((resolve) => {
      pending.set(id, resolve);
      worker.postMessage({ id, code, mode });
    });
  };
  return { booted, call };
}

const withWorkers = new URL(window.location.href).searchParams.get("workers") !== "0";
const workers = withWorkers ? { worker: startWorker(""), "worker-nojspi": startWorker("?nojspi=1") } : {};
const pageBooted = boot();
const names = Object.keys(workers);

window.harnessReady = Promise.all([pageBooted, ...names.map((name) => workers[name].booted)]).then(
  ([page, ...booted]) => Object.fromEntries([["page", page.bootMs], ...names.map((name, i) => [name, booted[i]])]),
);

window.runPython = async (code, { where = "page", mode = "async" } = {}) => {
  if (where in workers) return workers[where].call(code, mode);
  if (where !== "page") throw new Error(`unknown context ${where}`);
  const { pyodide } = await pageBooted;
  return run(pyodide, code, mode);
};
