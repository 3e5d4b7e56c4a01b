// llama.cpp (node-llama-cpp 3.22.1 = llama.cpp v0.5.0) as an oracle: evaluates token ids on a
// GGUF and writes the logits of every position as raw f32 [positions, vocab].
// Usage: node logits.mjs MODEL.gguf IDS.json OUT.f32
// Exact settings (testing.md §3a): CPU, flash attention off, F32 KV cache, so with F32 weights
// only summation order separates llama.cpp from an f32 engine.
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const [modelPath, idsPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node logits.mjs MODEL.gguf IDS.json OUT.f32");
  process.exit(2);
}
const ids = JSON.parse(fs.readFileSync(idsPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({
  contextSize: Math.max(256, ids.length + 16), threads: 2, batchSize: 512,
  flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = ctx.getSequence();
const out = await seq.controlledEvaluate(ids.map(t => [t, {generateNext: {logits: true}}]));
const nVocab = out[0].next.logits.size;
const buf = new Float32Array(ids.length * nVocab);
out.forEach((o, i) => { for (const [t, v] of o.next.logits) buf[i * nVocab + t] = v; });
fs.writeFileSync(outPath, Buffer.from(buf.buffer));
await ctx.dispose(); await model.dispose(); await llama.dispose();
