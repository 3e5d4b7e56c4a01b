// llama.cpp on the same GGUF, for comparison with `diskformer bench` (node-llama-cpp 3.22.1 =
// llama.cpp v0.5.0, CPU build, default F16 KV cache and flash attention "auto").
// Prefill: one batch of P random token ids in a fresh sequence. Decode: G greedy tokens after it,
// one token per evaluation. A warm-up run first; median [min, max] of the measured reps.
//
// Install (once): cd /tmp/nlc && npm install -E --omit=optional node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
// Usage: NODE_PATH=/tmp/nlc/node_modules node bench/llamacpp_bench.mjs MODEL.gguf [-p 128] [-n 64] [-t 2] [--reps 3] [--json]
import {createRequire} from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const opt = (name, dflt) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : dflt; };
const modelPath = args[0];
if (!modelPath || modelPath.startsWith("-")) {
  console.error("usage: node llamacpp_bench.mjs MODEL.gguf [-p 128] [-n 64] [-t 2] [--reps 3] [--json]");
  process.exit(2);
}
const P = opt("-p", 128), G = opt("-n", 64), threads = opt("-t", 2), reps = opt("--reps", 3);

// node-llama-cpp lives outside the repo (NODE_PATH or /tmp/nlc), so resolve it by hand: ESM
// imports ignore NODE_PATH.
const roots = [...(process.env.NODE_PATH || "").split(":").filter(Boolean), "/tmp/nlc/node_modules"];
let lib;
for (const r of roots) {
  try { lib = await import(createRequire(path.join(r, "x.js")).resolve("node-llama-cpp")); break; } catch {}
}
if (!lib) { console.error("node-llama-cpp not found (set NODE_PATH)"); process.exit(2); }

const llama = await lib.getLlama({gpu: false, build: "never", logLevel: "error"});
const t0 = performance.now();
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const loadMs = performance.now() - t0;
const nVocab = Number(model.fileInfo.tensorInfo.find(t => t.name === "token_embd.weight").dimensions[1]);

let seed = 12345;  // fixed ids, so both engines and every rep see the same kind of work
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const prompt = Array.from({length: P}, () => Math.floor(rand() * nVocab));

const ctx = await model.createContext({contextSize: P + G + 16, threads, batchSize: Math.max(512, P)});

async function once() {
  const seq = ctx.getSequence();
  const a = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  const b = performance.now();
  let n = 0;
  for await (const tok of seq.evaluate([prompt[P - 1]], {temperature: 0})) {
    void tok;
    if (++n >= G) break;
  }
  const c = performance.now();
  seq.dispose();
  return {prefill: P / ((b - a) / 1e3), decode: G / ((c - b) / 1e3)};
}

await once();  // warm-up
const runs = [];
for (let i = 0; i < reps; ++i) runs.push(await once());
const stat = xs => { const s = [...xs].sort((x, y) => x - y); const m = s.length >> 1;
  return {median: s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2, min: s[0], max: s.at(-1)}; };
const pre = stat(runs.map(r => r.prefill)), dec = stat(runs.map(r => r.decode));
const result = {
  engine: `llama.cpp ${llama.llamaCppRelease.release} (node-llama-cpp 3.22.1)`, model: modelPath, threads, reps,
  load_ms: loadMs, prefill: {tokens: P, tok_s_median: pre.median, min: pre.min, max: pre.max},
  decode: {tokens: G, tok_s: dec.median, ms_per_token: 1e3 / dec.median, min: dec.min, max: dec.max},
};
if (args.includes("--json")) {
  console.log(JSON.stringify(result, null, 2));
} else {
  console.log(`${result.engine}, ${threads} threads, ${reps} reps (median [min, max])`);
  console.log(`load     ${loadMs.toFixed(0)} ms`);
  console.log(`prefill  ${P} tokens  ${pre.median.toFixed(1)} tok/s  [${pre.min.toFixed(1)}, ${pre.max.toFixed(1)}]`);
  console.log(`decode   ${G} tokens  ${dec.median.toFixed(2)} tok/s  [${dec.min.toFixed(2)}, ${dec.max.toFixed(2)}]  ${(1e3 / dec.median).toFixed(2)} ms/token`);
}
await ctx.dispose(); await model.dispose(); await llama.dispose();
