// Uses a built site's search the way a reader's browser does: runs mkdocs-material's own search
// worker (assets/javascripts/workers/search.*.min.js, with the lunr it bundles) in node against
// the site's search/search_index.json, asks each query, and prints the best hits. Exits 1 when
// the index does not load or a query finds nothing.
//
//   mkdocs build --strict --site-dir /tmp/site
//   node docs_tools/search_check.js /tmp/site open_dispatcher "token bucket" nucleo_trio_limiter_kinds
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");

const [site, ...queries] = process.argv.slice(2);
if (!site || queries.length === 0) {
  console.error("usage: node search_check.js SITE_DIR QUERY...");
  process.exit(2);
}
const workers = path.join(site, "assets", "javascripts", "workers");
const script = fs.readdirSync(workers).find((name) => /^search\..*\.min\.js$/.test(name));
if (!script) {
  console.error(`no search worker in ${workers}`);
  process.exit(1);
}

// The worker's world: it listens for messages and answers with postMessage.
const listeners = [];
let answer = null;
const worker = {
  addEventListener: (type, listener) => listeners.push(listener),
  postMessage: (message) => answer(message),
  importScripts: () => {},
  console,
  setTimeout,
  Promise,
};
worker.self = worker;
vm.createContext(worker);
vm.runInContext(fs.readFileSync(path.join(workers, script), "utf8"), worker);

// One request, one reply (the worker's message types: 0 setup, 1 ready, 2 query, 3 result).
function ask(data) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the search worker did not answer")), 30000);
    answer = (message) => {
      clearTimeout(timer);
      resolve(message);
    };
    for (const listener of listeners) listener({ data });
  });
}

(async () => {
  const index = JSON.parse(fs.readFileSync(path.join(site, "search", "search_index.json"), "utf8"));
  const pages = new Set(index.docs.map((doc) => doc.location.split("#")[0]));
  const ready = await ask({ type: 0, data: { ...index, options: { suggest: true } } });
  if (ready.type !== 1) throw new Error(`the index did not load (reply ${JSON.stringify(ready)})`);
  console.log(`index: ${index.docs.length} sections of ${pages.size} pages`);
  let empty = 0;
  for (const query of queries) {
    const reply = await ask({ type: 2, data: query });
    const hits = reply.data.items.map((group) => group[0].location);
    if (hits.length === 0) empty += 1;
    console.log(`${JSON.stringify(query)}: ${hits.length} results; ${hits.slice(0, 3).join(", ")}`);
  }
  process.exit(empty ? 1 : 0);
})().catch((error) => {
  console.error(error.message);
  process.exit(1);
});
