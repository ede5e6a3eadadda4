// A minimal anywidget-style model for tests/test_explorer_frontend.py: get/set/on/off/save_changes/send,
// recording what the view set. `results` arrives as base64 and is handed to the view as a DataView (what
// anywidget gives; at an odd byte offset, to exercise the unaligned path), an ArrayBuffer or a Uint8Array.
import widget, { views, Store } from "/numr_web/static/explorer.js";

function bytesFrom(b64, kind) {
  const raw = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  if (kind === "arraybuffer") return raw.buffer;
  if (kind === "uint8array") return raw;
  const big = new Uint8Array(raw.length + 3);
  big.set(raw, 3);
  return new DataView(big.buffer, 3, raw.length);
}

class Model {
  constructor(state) {
    this.state = { ...state };
    this.handlers = new Map();
    this.sets = [];
    this.saves = 0;
    this.sent = [];
  }
  get(k) { return this.state[k]; }
  set(k, v) {
    this.state[k] = v;
    this.sets.push([k, v]);
    this.emit(`change:${k}`);
  }
  on(ev, f) {
    if (!this.handlers.has(ev)) this.handlers.set(ev, new Set());
    this.handlers.get(ev).add(f);
  }
  off(ev, f) {
    if (ev == null) this.handlers.clear();
    else if (f == null) this.handlers.delete(ev);
    else this.handlers.get(ev)?.delete(f);
  }
  emit(ev) { for (const f of [...(this.handlers.get(ev) ?? [])]) f(); }
  save_changes() { this.saves += 1; }
  send(content) { this.sent.push(content); }
  handlerCount() { let n = 0; for (const s of this.handlers.values()) n += s.size; return n; }
}

// every "<trait>_b64" key becomes the binary trait "<trait>" (results, input_data)
function decodeState(state, kind) {
  const out = { ...state };
  for (const key of Object.keys(out)) {
    if (!key.endsWith("_b64")) continue;
    out[key.slice(0, -4)] = bytesFrom(out[key], kind);
    delete out[key];
  }
  return out;
}

window.mount = (state, kind = "dataview") => {
  window.model = new Model(decodeState(state, kind));
  const el = document.getElementById("app");
  window.cleanup = widget.render({ model: window.model, el });
  return true;
};

// what the kernel side does: change traits, then fire their change events; resolves once every view is drawn
// (new results redraw every view in the task that handles the change events)
window.pyUpdate = (patch, kind = "dataview") => {
  const p = decodeState(patch, kind);
  Object.assign(window.model.state, p);
  for (const k of Object.keys(p)) window.model.emit(`change:${k}`);
  // (the change events' handlers draw in a microtask: wait past it)
  return new Promise((resolve) => setTimeout(() => resolve(true), 0));
};
// one view module on its own (a unit test of that view): a Store over the model, the view's element, every change
// emitted once
window.mountView = (name, state, kind = "dataview") => {
  window.model = new Model(decodeState(state, kind));
  const el = document.getElementById("app");
  const root = document.createElement("div");
  root.className = "nw-explorer";
  const ac = new AbortController();
  const store = new Store(window.model, ac.signal, root);
  root.append(views[name](store, "unit"), store.tip.el);
  el.replaceChildren(root);
  store.decode();
  store.emit(["results", "selection", "controls", "status", "lesson", "paint"]);
  window.store = store;
  window.cleanup = () => ac.abort();
  return true;
};
window.viewNames = Object.keys(views);
window.harnessReady = true;
