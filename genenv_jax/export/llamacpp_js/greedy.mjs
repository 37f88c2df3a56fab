// llama.cpp's greedy decoding of given prompt token ids, through node-llama-cpp's prebuilt CPU
// binary (genenv_jax/export/llamacpp.py runs it; `make llamacpp` installs node-llama-cpp).
//   node greedy.mjs NODE_MODULES MODEL.gguf MAX_NEW THREADS KV_TYPE < [[ids...], ...]
// prints {"outputs": [[ids...], ...]}: MAX_NEW tokens per prompt, end-of-generation
// tokens included (yieldEogToken), each prompt in a fresh context so none sees another's cache.
// KV_TYPE is the KV cache's element type (llama.cpp's default is F16; F32 keeps it exact) and
// flash attention is off, so the attention is the plain softmax(QK^T)V that ours computes.
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, maxNew, threads, kvType] = process.argv.slice(2);
const entry = path.join(modules, "node-llama-cpp", "dist", "index.js");
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(entry).href);
const prompts = JSON.parse(fs.readFileSync(0, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const outputs = [];
for (const prompt of prompts) {
  const context = await model.createContext({
    contextSize: Math.max(64, prompt.length + Number(maxNew) + 8), batchSize: 512, threads: Number(threads),
    sequences: 1, flashAttention: false, experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType});
  const out = [];
  const tokens = context.getSequence().evaluate(prompt, {temperature: 0, yieldEogToken: true});
  for await (const token of tokens) {
    out.push(token);
    if (out.length >= Number(maxNew)) break;
  }
  outputs.push(out);
  await context.dispose();
}
await model.dispose();
console.log(JSON.stringify({outputs}));
