#!/usr/bin/env node
// Runs every benchmark (or those named: `node bench/run.mjs cdp`), prints one table
// (name, metric, value, baseline, ratio, goal) and writes bench/results/<timestamp>.json.
// Baselines are measured in the same run because these machines are noisy.
//   BENCH_STRICT=1  exit non-zero when a goal is missed (by default goals only print)
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const ALL = ['create', 'cdp', 'fast', 'spares', 'computer', 'extensions', 'playwright', 'profiles', 'liveview', 'replays', 'curl', 'load', 'network', 'bombs', 'proxies', 'telemetry', 'audit', 'bidi', 'bidi_alone', 'metrics', 'apps', 'managed_auth', 'density', 'cluster', 'relay', 'agent_tools', 'vaults', 'telemetry_export', 'audit_export', 'burst', 'config_registry'];
const selected = process.argv.slice(2).length ? process.argv.slice(2) : ALL;
for (const name of selected) if (!ALL.includes(name)) throw new Error(`unknown benchmark ${name} (have: ${ALL.join(', ')})`);

const log = (m) => process.stderr.write(`  ${m}\n`);
const rows = [];
const errors = [];
for (const name of selected) {
  process.stderr.write(`bench/${name} ...\n`);
  const t0 = Date.now();
  try {
    const mod = await import(join(here, `${name}.mjs`));
    rows.push(...(await mod.run({ log })));
  } catch (err) {
    errors.push({ name, error: String(err?.stack || err) });
    process.stderr.write(`bench/${name} FAILED: ${err?.stack || err}\n`);
  }
  process.stderr.write(`bench/${name} took ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
}

const fmt = (v, d = 2) => (typeof v === 'number' && Number.isFinite(v) ? v.toFixed(d) : String(v ?? ''));
const table = rows.map((r) => ({
  name: r.name,
  metric: r.metric,
  value: fmt(r.value),
  baseline: fmt(r.baseline),
  ratio: fmt(r.ratio, 3),
  goal: r.goal ? `${r.goal} ${r.met ? 'met' : 'MISSED'}` : '',
}));
const cols = ['name', 'metric', 'value', 'baseline', 'ratio', 'goal'];
const width = Object.fromEntries(cols.map((c) => [c, Math.max(c.length, ...table.map((t) => t[c].length))]));
const line = (t) => cols.map((c) => (c === 'name' || c === 'metric' || c === 'goal' ? t[c].padEnd(width[c]) : t[c].padStart(width[c]))).join('  ');
console.log(line(Object.fromEntries(cols.map((c) => [c, c]))));
console.log(cols.map((c) => '-'.repeat(width[c])).join('  '));
for (const t of table) console.log(line(t));
for (const r of rows.filter((r) => r.note && r.goal)) console.log(`  ${r.name}: ${r.note}`);

const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const outDir = join(here, 'results');
mkdirSync(outDir, { recursive: true });
const file = join(outDir, `${stamp}.json`);
writeFileSync(file, JSON.stringify({
  when: new Date().toISOString(),
  machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 2 ** 30), kernel: os.release(), node: process.version },
  results: rows,
  errors,
}, null, 2));
console.log(`results written to ${file}`);

const missed = rows.filter((r) => r.met === false);
if (errors.length) process.exitCode = 1;
else if (missed.length && process.env.BENCH_STRICT) process.exitCode = 1;
