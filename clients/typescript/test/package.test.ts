// The package as its users get it, against the real local runner: `npm pack`,
// the tarball installed offline (a fresh, empty npm cache: nothing can be
// fetched) into two scratch projects, a CommonJS one that uses require and
// an ESM one that uses import, and a script run in each; then every
// ts/typescript/js/javascript block of the Markdown files that show this
// client, type-checked with tsc and run unchanged in those projects; and the
// install lines of the READMEs, run as written in a fresh project, offline:
// the signing packages' line against a stand-in registry on 127.0.0.1 that
// serves, from npm's cache, the very tarballs package-lock.json pins.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { cp, mkdtemp, readdir, readFile, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { SIGV4_INSTALL } from "../dist/esm/index.js";
import { recordingProxy, repoRoot, startRunner, type Runner } from "./helpers.js";

/** clients/typescript/: this file runs from its dist-test/. */
const packageDir = fileURLToPath(new URL("../", import.meta.url));

/** The Markdown files whose ts/js blocks must each be a complete program. */
const MARKDOWN = ["README.md", "docs/clients.md", "clients/typescript/README.md"];
/** The fences of programs; any other block (```text, ```sh, ```go, ...) is not this test's. */
const TS_FENCES = new Set(["ts", "typescript"]);
const JS_FENCES = new Set(["js", "javascript"]);

let runner: Runner;
let dir: string;
let cjs: string;
let esm: string;
let packed: { files: string[]; size: number };
/** The `npm pack` of this package, in dir. */
let tarball: string;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd: options.cwd, env: options.env ?? process.env, timeout: options.timeoutMs ?? 60_000, maxBuffer: 1 << 22 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : null) : 0;
      resolve({ code, stdout, stderr: stderr + (err && code === null ? `\n${err.message}` : "") });
    });
  });
}

async function ok(cmd: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<string> {
  const r = await run(cmd, args, options);
  assert.equal(r.code, 0, `${cmd} ${args.join(" ")} (in ${options.cwd}) exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** The bytes of every file under p. */
async function size(p: string): Promise<number> {
  const s = await stat(p);
  if (!s.isDirectory()) return s.size;
  let n = 0;
  for (const e of await readdir(p)) n += await size(join(p, e));
  return n;
}

/** The environment of a user of `make run`: LOCKS_ENDPOINT is the runner's, nothing signs. */
function userEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, LOCKS_ENDPOINT: runner.url };
  for (const k of Object.keys(env)) if (k.startsWith("npm_") || k === "LOCKS_SIGV4" || k === "NODE_OPTIONS") delete env[k];
  return env;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "locks-ts-package-"));
  const [r] = await Promise.all([
    startRunner(),
    (async () => {
      // `npm test` has just built dist/; prepack would build it again.
      const out = await ok("npm", ["pack", "--ignore-scripts", "--json", "--loglevel=error", "--pack-destination", dir], { cwd: packageDir });
      const [info] = JSON.parse(out) as Array<{ filename: string; unpackedSize: number; files: Array<{ path: string }> }>;
      packed = { files: info!.files.map((f) => f.path), size: info!.unpackedSize };
      tarball = join(dir, info!.filename);
      cjs = join(dir, "cjs");
      esm = join(dir, "esm");
      await Promise.all(
        [
          [cjs, "commonjs"],
          [esm, "module"],
        ].map(async ([project, type]) => {
          await mkdir(project!);
          await writeFile(join(project!, "package.json"), `${JSON.stringify({ name: `scratch-${type}`, private: true, type }, null, 2)}\n`);
          // A cache of its own: offline, nothing is there to install but the tarball.
          await ok(
            "npm",
            ["install", "--offline", "--cache", join(dir, `npm-cache-${type}`), "--no-audit", "--no-fund", "--no-package-lock", "--ignore-scripts", "--loglevel=error", tarball],
            { cwd: project!, env: { ...process.env, npm_config_update_notifier: "false" } },
          );
        }),
      );
    })(),
  ]);
  runner = r;
});

after(async () => {
  await runner?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The script each scratch project runs: plain JavaScript, no options anywhere; the fence helpers from their own entry point, `@ft288/locks/fence`. */
const script = (load: string, entry: string) => `${load}

const client = Client.fromEnv(); // LOCKS_ENDPOINT
const resource = process.argv[2];
const lease = await client.tryAcquire(resource); // no ttlSeconds: 30 s
const second = await client.tryAcquire(resource).catch((e) => e);
const leader = await client.election(resource).leader();
const fence = dynamoFence(lease.fencingToken);
await lease.release();
const signed = Client.fromEnv({ env: { ...process.env, LOCKS_SIGV4: "1", AWS_REGION: "eu-west-1" } });
const signing = await signed.tryAcquire(resource).catch((e) => e);
console.log(JSON.stringify({
  entry: ${entry},
  token: lease.fencingToken,
  ttlSeconds: lease.ttlSeconds,
  held: second instanceof HeldError,
  leader: leader.fencingToken === lease.fencingToken,
  fence: fence.values[":fence"].N === String(lease.fencingToken) && FencedError === fenceModule.FencedError,
  released: !lease.held,
  signing: signing instanceof SigningUnavailableError ? signing.message : String(signing),
}));
`;

describe("the package", () => {
  test("the packed tarball installs offline into a CommonJS and an ESM project, alone and under 1 MB, and runs against the local runner, @ft288/locks/fence included", async () => {
    for (const f of ["dist/esm/index.js", "dist/esm/index.d.ts", "dist/esm/fence.js", "dist/esm/fence.d.ts", "dist/esm/package.json", "dist/cjs/index.js", "dist/cjs/index.d.ts", "dist/cjs/fence.js", "dist/cjs/fence.d.ts", "dist/cjs/package.json", "README.md", "LICENSE"]) {
      assert.ok(packed.files.includes(f), `the tarball has ${f}: ${packed.files.join(", ")}`);
    }
    assert.ok(!packed.files.some((f) => f.startsWith("src/") || f.startsWith("test/") || f.startsWith("dist-test/")), packed.files.join(", "));

    // The CommonJS script wraps the same body in an async function: no top-level await there.
    await writeFile(
      join(cjs, "main.js"),
      `const { Client, FencedError, HeldError, SigningUnavailableError } = require("@ft288/locks");\nconst fenceModule = require("@ft288/locks/fence");\nconst { dynamoFence } = fenceModule;\n(async () => {\n${script("", 'require.resolve("@ft288/locks")')}})().catch((err) => {\n  console.error(err);\n  process.exitCode = 1;\n});\n`,
    );
    await writeFile(
      join(esm, "main.js"),
      script(
        'import { Client, FencedError, HeldError, SigningUnavailableError } from "@ft288/locks";\nimport * as fenceModule from "@ft288/locks/fence";\nimport { dynamoFence } from "@ft288/locks/fence";',
        'import.meta.resolve("@ft288/locks")',
      ),
    );

    for (const [project, entry] of [
      [cjs, "dist/cjs/index.js"],
      [esm, "dist/esm/index.js"],
    ] as const) {
      const modules = join(project, "node_modules");
      assert.deepEqual((await readdir(modules)).sort(), [".package-lock.json", "@ft288"], "no dependency installed without signing");
      const bytes = await size(join(modules, "@ft288"));
      assert.ok(bytes < 1 << 20, `installed ${bytes} bytes`);

      const out = await ok(process.execPath, ["main.js", `ts-package-${relative(dir, project)}`], { cwd: project, env: userEnv() });
      const got = JSON.parse(out) as { entry: string; token: number; ttlSeconds: number; held: boolean; leader: boolean; fence: boolean; released: boolean; signing: string };
      assert.ok(got.entry.endsWith(entry), `${project} loaded ${got.entry}, want …/${entry}`);
      assert.ok(Number.isSafeInteger(got.token) && got.token > 0, out);
      assert.deepEqual(
        { ttlSeconds: got.ttlSeconds, held: got.held, leader: got.leader, fence: got.fence, released: got.released },
        { ttlSeconds: 30, held: true, leader: true, fence: true, released: true },
        out,
      );
      assert.ok(got.signing.includes(SIGV4_INSTALL), `without the signing packages: ${got.signing}`);
    }
  });

  test("every ts/js block of the Markdown files is a program that type-checks and runs against the local runner", async () => {
    interface Block {
      where: string;
      lang: string;
      code: string;
      file?: string;
    }
    const blocks: Block[] = [];
    for (const doc of MARKDOWN) {
      const lines = (await readFile(join(repoRoot, doc), "utf8")).split("\n");
      let open: { lang: string; line: number; indent: string; body: string[] } | undefined;
      lines.forEach((line, i) => {
        const fence = /^(\s*)```(.*)$/.exec(line);
        if (!open) {
          if (fence) open = { lang: fence[2]!.trim().split(/\s+/)[0]!.toLowerCase(), line: i + 1, indent: fence[1]!, body: [] };
        } else if (fence && fence[2]!.trim() === "") {
          if (TS_FENCES.has(open.lang) || JS_FENCES.has(open.lang)) {
            const code = open.body.map((l) => (l.startsWith(open!.indent) ? l.slice(open!.indent.length) : l)).join("\n");
            blocks.push({ where: `${doc}:${open.line}`, lang: open.lang, code: `${code}\n` });
          }
          open = undefined;
        } else {
          open.body.push(line);
        }
      });
      assert.equal(open, undefined, `${doc}: a block opened at line ${open?.line} is never closed`);
    }
    for (const doc of MARKDOWN) assert.ok(blocks.some((b) => b.where.startsWith(`${doc}:`)), `${doc} shows the TypeScript client`);

    // Each block is a file of its own: TypeScript into the ESM project (compiled
    // next to it), JavaScript into the project of its module system.
    const tsFiles: string[] = [];
    for (const b of blocks) {
      const name = `example-${b.where.replace(/[^A-Za-z0-9]+/g, "-")}`;
      if (TS_FENCES.has(b.lang)) {
        const src = join(esm, `${name}.ts`);
        await writeFile(src, b.code);
        tsFiles.push(src);
        b.file = join(esm, `${name}.js`);
      } else {
        const commonjs = /\brequire\(/.test(b.code) && !/^\s*(import|export)\s/m.test(b.code);
        b.file = join(commonjs ? cjs : esm, `${name}.js`);
        await writeFile(b.file, b.code);
      }
    }
    if (tsFiles.length > 0) {
      // What a user's strict Node.js project has: @types/node, and a target
      // that downlevels `await using` (docs: clients/typescript/README.md).
      await writeFile(
        join(dir, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            lib: ["ES2022", "ESNext.Disposable"],
            types: ["node"],
            typeRoots: [join(packageDir, "node_modules/@types")],
            strict: true,
            noEmitOnError: true,
          },
          files: tsFiles,
        }),
      );
      const tsc = join(packageDir, "node_modules/typescript/bin/tsc");
      const r = await run(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")], { cwd: dir });
      assert.equal(r.code, 0, `tsc on the TypeScript blocks (${blocks.filter((b) => TS_FENCES.has(b.lang)).map((b) => b.where).join(", ")}):\n${r.stdout}${r.stderr}`);
    }
    // One at a time: several use the same lock names.
    for (const b of blocks) {
      const r = await run(process.execPath, [b.file!], { cwd: join(b.file!, ".."), env: userEnv(), timeoutMs: 60_000 });
      assert.equal(r.code, 0, `the ${b.lang} block at ${b.where} exited ${r.code}:\n${b.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
    }
  });

  test("the READMEs' install lines run as written in a fresh project, offline, and the main README's program runs with Node alone", async () => {
    const main = await readFile(join(repoRoot, "README.md"), "utf8");
    const m = /^```js\n((?:(?!^```)[\s\S])*?)^```\n\n```sh\n([\s\S]*?)^```/m.exec(main);
    assert.ok(m, "README.md: the JavaScript example, then a ```sh block of its install lines");
    const [, program, lines] = m;
    const script = /^node (\S+\.mjs)\b/m.exec(lines!);
    assert.ok(script, `README.md: the install lines run no .mjs program:\n${lines}`);
    // This README's lines are the main README's: the test runs them once.
    const own = /\n## Install\n[\s\S]*?^```sh\n([\s\S]*?)^```/m.exec(await readFile(join(packageDir, "README.md"), "utf8"));
    assert.ok(own, "clients/typescript/README.md: a ```sh block under ## Install");
    const commands = (block: string) => block.split("\n").map((l) => l.replace(/(^|\s+)#.*$/, "").trim()).filter((l) => l !== "");
    const installs = commands(own[1]!);
    assert.deepEqual(commands(lines!).slice(0, installs.length), installs, "the main README's TypeScript install lines must be clients/typescript/README.md's");

    // The checkout at ../locks, as a fresh clone has it: no node_modules, no build.
    const work = await mkdtemp(join(tmpdir(), "locks-ts-readme-"));
    try {
      const skip = new Set(["node_modules", "dist", "dist-test"]);
      await cp(packageDir, join(work, "locks", "clients", "typescript"), {
        recursive: true,
        filter: (src) => !skip.has(relative(packageDir, src).split(/[\\/]/)[0]!) && !src.endsWith(".tgz"),
      });
      const project = join(work, "app");
      await mkdir(project);
      // What `npm init -y` writes: a CommonJS project.
      await writeFile(join(project, "package.json"), `${JSON.stringify({ name: "app", version: "1.0.0", private: true }, null, 2)}\n`);
      await writeFile(join(project, script[1]!), program!);
      // Offline: npm's cache only (the `npm ci` of `make test` fills it).
      const env = { ...userEnv(), npm_config_offline: "true", npm_config_update_notifier: "false" };
      const r = await run("bash", ["-ec", lines!], { cwd: project, env, timeoutMs: 300_000 });
      assert.equal(r.code, 0, `README.md's install lines exited ${r.code}:\n${lines}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
      assert.match(r.stdout, /^report written with fencing token \d+$/m, r.stdout);
      const installed = JSON.parse(await readFile(join(project, "node_modules", "@ft288", "locks", "package.json"), "utf8")) as { name: string };
      assert.equal(installed.name, "@ft288/locks");
    } finally {
      await rm(work, { recursive: true, force: true });
    }
    // npm pack leaves the tarball in clients/typescript/: git ignores it
    // (exit 1: not ignored; 128: not a git checkout, nothing to check).
    const ignored = await run("git", ["-C", repoRoot, "check-ignore", "-q", "clients/typescript/ft288-locks-0.1.0.tgz"], { cwd: repoRoot });
    assert.notEqual(ignored.code, 1, "git check-ignore clients/typescript/ft288-locks-0.1.0.tgz: not ignored; add it to .gitignore");
  });
});

/** Where the stand-in registry serves name@version's tarball: where the npm registry does. */
const tarballPath = (name: string, version: string) => `/${name}/-/${name.split("/").pop()}-${version}.tgz`;

/**
 * A stand-in for the npm registry on 127.0.0.1, serving the packages of
 * clients/typescript/package-lock.json (every version it pins) and nothing
 * else: a package document per name, built from the lock's entries, and each
 * tarball read from npm's cache by the integrity the lock pins (the `npm ci`
 * of `make test` put them there; npm checks them against that integrity
 * again). It answers npm's audit with no advisories, and records every
 * request it gets.
 */
async function lockRegistry(): Promise<{ url: string; requests: string[]; close(): Promise<void> }> {
  interface Entry {
    version: string;
    integrity?: string;
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
    peerDependenciesMeta?: Record<string, unknown>;
    bin?: Record<string, string>;
    engines?: Record<string, string>;
    os?: string[];
    cpu?: string[];
    license?: string;
  }
  const lock = JSON.parse(await readFile(join(packageDir, "package-lock.json"), "utf8")) as { packages: Record<string, Entry> };
  const cache = (await ok("npm", ["config", "get", "cache"], { cwd: packageDir })).trim();
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const docs = new Map<string, { name: string; "dist-tags": { latest: string }; versions: Record<string, unknown> }>();
  const files = new Map<string, string>();
  for (const [path, e] of Object.entries(lock.packages)) {
    if (path === "") continue;
    const name = path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
    assert.match(e.integrity ?? "", /^sha512-/, `package-lock.json: ${path} pins no sha512 integrity`);
    const digest = Buffer.from(e.integrity!.slice("sha512-".length), "base64").toString("hex");
    const file = join(cache, "_cacache", "content-v2", "sha512", digest.slice(0, 2), digest.slice(2, 4), digest.slice(4));
    await stat(file).catch(() => assert.fail(`${name}@${e.version} is not in npm's cache (${file}): run npm ci in clients/typescript first`));
    const tgz = tarballPath(name, e.version);
    files.set(tgz, file);
    const doc = docs.get(name) ?? { name, "dist-tags": { latest: e.version }, versions: {} };
    const { integrity, ...manifest } = e;
    doc.versions[e.version] = { name, ...manifest, dist: { tarball: url + tgz, integrity } };
    // latest: the newest pinned version (x.y.z, compared part by part as numbers).
    if (e.version.localeCompare(doc["dist-tags"].latest, "en", { numeric: true }) > 0) doc["dist-tags"].latest = e.version;
    docs.set(name, doc);
  }

  const requests: string[] = [];
  server.on("request", async (req, res) => {
    req.resume();
    const path = decodeURIComponent(new URL(req.url ?? "/", url).pathname);
    requests.push(`${req.method} ${path}`);
    if (req.method === "POST" && path.startsWith("/-/npm/v1/security/")) {
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
      return;
    }
    const doc = docs.get(path.slice(1));
    const file = files.get(path);
    if (req.method === "GET" && doc) {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(doc));
    } else if (req.method === "GET" && file) {
      res.writeHead(200, { "content-type": "application/octet-stream" }).end(await readFile(file));
    } else {
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not found" }));
    }
  });
  return {
    url,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe("signing", () => {
  test("the README's signing install line runs as written (against a stand-in registry of the lock's tarballs), installs what its comment says, and the client then signs", async () => {
    const readme = await readFile(join(packageDir, "README.md"), "utf8");
    const block = [...readme.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((b) => b[1]!).find((b) => b.includes("@smithy/signature-v4"));
    assert.ok(block, "clients/typescript/README.md: a ```sh block that installs @smithy/signature-v4");
    const line = block.trim();
    assert.equal(line.split("\n").length, 1, `one line: ${line}`);
    const command = line.replace(/\s+#.*$/, "");
    assert.equal(command, SIGV4_INSTALL, "the README's line is the one SigningUnavailableError names");
    const claim = /#\s*~(\d+) packages, ~(\d+) MB/.exec(line);
    assert.ok(claim, `the line's comment says how much it installs: ${line}`);

    const registry = await lockRegistry();
    const gateway = await recordingProxy(runner.url);
    const work = await mkdtemp(join(tmpdir(), "locks-ts-signing-"));
    try {
      // A project with the package installed as the README says, offline.
      await writeFile(join(work, "package.json"), `${JSON.stringify({ name: "app", version: "1.0.0", private: true }, null, 2)}\n`);
      await ok("npm", ["install", "--offline", "--cache", join(work, ".npm-offline"), "--no-audit", "--no-fund", "--loglevel=error", tarball], {
        cwd: work,
        env: { ...userEnv(), npm_config_update_notifier: "false" },
      });
      const before = new Set(await readdir(join(work, "node_modules")));

      // The line as written; the registry is the stand-in, npm's cache empty:
      // whatever it installs, it had to ask the stand-in for.
      // No user configuration (a scoped registry there would go around the
      // stand-in) and no proxy for it.
      await writeFile(join(work, ".npmrc-empty"), "");
      const env = {
        ...userEnv(),
        npm_config_registry: `${registry.url}/`,
        npm_config_cache: join(work, ".npm"),
        npm_config_userconfig: join(work, ".npmrc-empty"),
        npm_config_noproxy: "127.0.0.1",
        npm_config_update_notifier: "false",
      };
      const r = await run("bash", ["-ec", line], { cwd: work, env, timeoutMs: 300_000 });
      assert.equal(r.code, 0, `${line}\nexited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- registry\n${registry.requests.join("\n")}`);

      // Every package the line added is one whose tarball the stand-in served.
      const installed = JSON.parse(await readFile(join(work, "node_modules", ".package-lock.json"), "utf8")) as { packages: Record<string, { version: string }> };
      const added = Object.entries(installed.packages).filter(([p]) => !p.startsWith("node_modules/@ft288/") && p !== "");
      for (const [p, e] of added) {
        const name = p.slice(p.lastIndexOf("node_modules/") + "node_modules/".length);
        assert.ok(registry.requests.includes(`GET ${tarballPath(name, e.version)}`), `${p}@${e.version}: its tarball was not fetched from the stand-in registry`);
      }
      for (const name of ["@smithy/signature-v4", "@aws-sdk/credential-provider-node"]) {
        assert.ok(added.some(([p]) => p === `node_modules/${name}`), `${name} installed`);
      }
      assert.ok(registry.requests.some((q) => q.endsWith(".tgz")), registry.requests.join("\n"));
      // The comment's figures, within a third: they are what a user plans for.
      const bytes = (await size(join(work, "node_modules"))) - (await size(join(work, "node_modules", "@ft288")));
      const [packages, mb] = [Number(claim[1]), Number(claim[2])];
      assert.ok(Math.abs(added.length - packages) <= packages / 3, `the comment says ~${packages} packages; the line installed ${added.length}`);
      assert.ok(Math.abs(bytes / 1e6 - mb) <= mb / 3, `the comment says ~${mb} MB; the line installed ${(bytes / 1e6).toFixed(1)} MB`);
      assert.ok(before.has("@ft288"));
      console.log(`the signing line installed ${added.length} packages, ${(bytes / 1e6).toFixed(1)} MB; the stand-in registry answered ${registry.requests.length} requests`);

      // The client now signs: its request reaches the gateway with a SigV4
      // Authorization for execute-api in the configured region.
      await writeFile(
        join(work, "sign.js"),
        `const { Client } = require("@ft288/locks");
(async () => {
  const lease = await Client.fromEnv().tryAcquire(process.argv[2]);
  await lease.release();
  console.log(JSON.stringify({ token: lease.fencingToken }));
})().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
`,
      );
      const signEnv: NodeJS.ProcessEnv = {
        ...userEnv(),
        LOCKS_ENDPOINT: gateway.url,
        LOCKS_SIGV4: "1",
        AWS_REGION: "eu-west-1",
        AWS_ACCESS_KEY_ID: "AKIDEXAMPLE",
        AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
      };
      for (const k of ["AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"]) delete signEnv[k];
      const out = await ok(process.execPath, ["sign.js", `ts-signing-${Date.now()}`], { cwd: work, env: signEnv });
      assert.ok(Number.isSafeInteger((JSON.parse(out) as { token: number }).token), out);
      assert.ok(gateway.requests.length >= 2, JSON.stringify(gateway.requests));
      for (const q of gateway.requests) {
        assert.match(q.authorization ?? "", /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/eu-west-1\/execute-api\/aws4_request, SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}$/, `${q.method} ${q.path}`);
      }
    } finally {
      await Promise.all([registry.close(), gateway.close()]);
      await rm(work, { recursive: true, force: true });
    }
  });
});
