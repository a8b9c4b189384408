// make helm-check: lints and renders the chart with its default values and with every option on
// (ci/all-on-values.yaml), then validates each rendered manifest twice:
//  - kubernetes-models: the Kubernetes JSON schemas (required fields, types, enums, formats);
//  - kubestrict (Go, k8s.io/api types): unknown or misspelled fields, which those schemas accept.
// Then it proves both can fail: a misspelled container key and a missing required field are
// put into a rendered StatefulSet, and the check fails unless each is refused.
// Usage: node check.mjs <helm> <kubestrict>
import { execFileSync, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, stringify } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const chart = join(here, "hangar");
const [helm, kubestrict] = process.argv.slice(2);
if (!helm || !kubestrict) throw new Error("usage: node check.mjs <helm> <kubestrict>");

// apiVersion/kind → the kubernetes-models class that validates it.
const models = {
  "v1/ConfigMap": "kubernetes-models/v1/ConfigMap",
  "v1/Secret": "kubernetes-models/v1/Secret",
  "v1/Service": "kubernetes-models/v1/Service",
  "v1/ServiceAccount": "kubernetes-models/v1/ServiceAccount",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
  "networking.k8s.io/v1/Ingress": "kubernetes-models/networking.k8s.io/v1/Ingress",
};

let failures = 0;
const fail = (msg) => {
  failures++;
  console.error(`FAIL ${msg}`);
};

function run(cmd, args, input) {
  const r = spawnSync(cmd, args, { input, encoding: "utf8" });
  return { ok: r.status === 0, out: r.stdout, err: r.stderr };
}

// Every problem with one manifest set, as text; empty when it passes both validators.
async function problems(yamlText) {
  const found = [];
  const docs = parseAllDocuments(yamlText).map((d) => d.toJS()).filter(Boolean);
  if (docs.length === 0) found.push("no manifests rendered");
  for (const doc of docs) {
    const key = `${doc.apiVersion}/${doc.kind}`;
    const name = `${key} ${doc.metadata?.name}`;
    if (!models[key]) {
      found.push(`${name}: no schema known to this check`);
      continue;
    }
    const cls = Object.values(await import(models[key]))[0];
    try {
      new cls(doc).validate();
    } catch (e) {
      found.push(`${name}: schema: ${e.message.split("\n").slice(0, 6).join(" | ")}`);
    }
  }
  const strict = run(kubestrict, [], yamlText);
  if (!strict.ok) found.push(strict.err.trim() || "kubestrict failed");
  return { found, count: docs.length };
}

// The oldest Kubernetes the chart supports (Chart.yaml kubeVersion): user namespaces on by default.
const kube = ["--kube-version", "1.33.0"];

const sets = [
  { name: "default values", args: [] },
  { name: "every option on", args: ["-f", join(chart, "ci", "all-on-values.yaml")] },
  { name: "bitnami postgresql + disk quota", args: ["-f", join(chart, "ci", "bitnami-values.yaml")] },
  { name: "store url in values", args: ["--set", "replicas=2", "--set", "store.url=postgresql://hangar:pw@db:5432/hangar"] },
];

let sample;
for (const set of sets) {
  const lintSet = run(helm, ["lint", "--strict", ...kube, chart, ...set.args]);
  if (!lintSet.ok) fail(`helm lint (${set.name}):\n${lintSet.out}${lintSet.err}`);
  else console.log(`helm lint --strict (${set.name}): ok`);
  const t = run(helm, ["template", "hangar", chart, "--namespace", "browsers", ...kube, ...set.args]);
  if (!t.ok) {
    fail(`helm template (${set.name}): ${t.err.trim()}`);
    continue;
  }
  const { found, count } = await problems(t.out);
  if (found.length) fail(`${set.name}:\n  ${found.join("\n  ")}`);
  else console.log(`${set.name}: ${count} manifests valid (kubernetes-models schemas, strict fields)`);
  if (set.args.length) sample = t.out;
}

// The check must be able to fail: each broken copy must be refused.
if (sample) {
  const mutations = {
    "a misspelled container key (imagePullPolcy)": (ss) => {
      ss.spec.template.spec.containers[0].imagePullPolcy = "Always";
    },
    "a missing required field (container name)": (ss) => {
      delete ss.spec.template.spec.containers[0].name;
    },
    "a wrong enum value (imagePullPolicy: Sometimes)": (ss) => {
      ss.spec.template.spec.containers[0].imagePullPolicy = "Sometimes";
    },
  };
  for (const [what, mutate] of Object.entries(mutations)) {
    const docs = parseAllDocuments(sample).map((d) => d.toJS()).filter(Boolean);
    mutate(docs.find((d) => d.kind === "StatefulSet"));
    const { found } = await problems(docs.map((d) => stringify(d)).join("---\n"));
    if (found.length === 0) fail(`self-test: ${what} was not refused`);
    else console.log(`self-test: ${what} refused (${found[0].slice(0, 120)})`);
  }
}

// A template that does not render, or a value the chart refuses, must fail helm template.
const refused = run(helm, ["template", "hangar", chart, ...kube, "--set", "replicas=3"]);
if (refused.ok || !refused.err.includes("replicas > 1 needs a PostgreSQL store"))
  fail(`self-test: replicas=3 on SQLite was not refused by the chart's own check: ${refused.err.trim()}`);
else console.log("self-test: replicas=3 without PostgreSQL refused by the chart");

console.log(failures ? `helm-check: ${failures} failure(s)` : "helm-check: all passed");
process.exit(failures ? 1 : 0);
