// Test helpers: the real local runner, a delaying proxy in front of it, and
// a stub fetch.
import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The repository root: this file runs from clients/typescript/dist-test/. */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

export interface Runner {
  url: string;
  /** The endpoint of the runner's own in-memory dynalite (DynamoDB's JSON API). */
  dynamodb: string;
  /** What the runner counted so far (locald -counts, asked for with SIGUSR1). */
  counts(): Promise<Counts>;
  stop(): Promise<void>;
}

/** locald's request counts (local.Counts): requests by route key, try-acquires that carried wait_seconds. */
export interface Counts {
  requests: Record<string, number>;
  try_wait_seconds: number;
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
async function freePort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((resolve, reject) => srv.once("error", reject).listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/**
 * Builds local/cmd/locald and starts it on a free port over its own
 * in-memory dynalite; resolves once it logs the URL it serves. The port is
 * chosen here rather than with -addr 127.0.0.1:0, so that a locald that
 * logs the address it was given (not the one the kernel chose) works too.
 */
export async function startRunner(): Promise<Runner> {
  const dir = await mkdtemp(join(tmpdir(), "locks-ts-client-"));
  const bin = join(dir, "locald");
  await new Promise<void>((resolve, reject) => {
    execFile("go", ["build", "-o", bin, "./local/cmd/locald"], { cwd: repoRoot }, (err, _stdout, stderr) =>
      err ? reject(new Error(`go build ./local/cmd/locald: ${err.message}\n${stderr}`)) : resolve(),
    );
  });
  const env = { ...process.env };
  // Exactly as `make run` starts it: none of the variables that change it.
  for (const k of ["DYNAMODB_ENDPOINT", "DYNAMODB_RETURNS_OLD_ITEM", "TABLE_NAME", "MAX_TTL_SECONDS", "TOMBSTONE_RETENTION_SECONDS"]) delete env[k];
  const countsFile = join(dir, "counts.json");
  const child = spawn(bin, ["-addr", `127.0.0.1:${await freePort()}`, "-counts", countsFile], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
  // Resolved by the next "counts written" line: locald's answer to SIGUSR1.
  let countsWritten: (() => void)[] = [];
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let dynamodb = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`locald did not serve within 60 s\n${stderr}`)), 60_000);
    // Keep reading its log for as long as it runs, or its writes would block.
    createInterface({ input: child.stdout }).on("line", (line) => {
      try {
        const m = JSON.parse(line) as { msg?: string; url?: string; endpoint?: string };
        if (m.msg === "counts written") {
          const waiting = countsWritten;
          countsWritten = [];
          for (const w of waiting) w();
        }
        if (m.msg === "started in-memory dynalite" && m.endpoint) dynamodb = m.endpoint;
        if (m.msg === "serving the lock API" && m.url) {
          clearTimeout(timer);
          resolve(m.url);
        }
      } catch {
        // not a JSON log line
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`locald exited (${code}) before serving\n${stderr}`));
    });
  }).catch(async (err: unknown) => {
    child.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
    throw err;
  });
  let asking = Promise.resolve();
  return {
    url,
    dynamodb,
    counts() {
      // One question at a time: each waits for the line its own signal brings.
      const answer = asking.then(async () => {
        const written = new Promise<void>((resolve) => countsWritten.push(resolve));
        child.kill("SIGUSR1");
        await written;
        return JSON.parse(await readFile(countsFile, "utf8")) as Counts;
      });
      asking = answer.then(
        () => undefined,
        () => undefined,
      );
      return answer;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(t);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A resource name no other test uses. */
export function uniqueName(prefix: string): string {
  return `ts-${prefix}-${randomBytes(4).toString("hex")}`;
}

export interface Recorded {
  method: string;
  path: string;
  body: string;
  /** The request's Authorization header, when it had one. */
  authorization?: string;
  /** The target's status, once it answered (the proxy may still be holding the answer back). */
  upstream?: number;
}

export interface Proxy {
  url: string;
  requests: Recorded[];
  close(): Promise<void>;
}

/**
 * What a proxy does with a request: answer it itself (`answer`), or forward
 * it to target's `path` (the request's own when absent) and hold target's
 * answer back `holdMs`.
 */
interface ProxyStep {
  answer?: { status: number; body: string };
  path?: string;
  holdMs?: number;
}

/** An HTTP proxy to target that does with each request what `step` says, and records it in `requests`. */
async function proxy(target: string, step: (rec: Recorded) => ProxyStep): Promise<Proxy> {
  const requests: Recorded[] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const body = Buffer.concat(chunks).toString();
      const rec: Recorded = { method: req.method ?? "", path: req.url ?? "/", body, authorization: req.headers.authorization };
      requests.push(rec);
      const { answer, path = rec.path, holdMs = 0 } = step(rec);
      if (answer) {
        rec.upstream = answer.status;
        res.writeHead(answer.status, { "content-type": "application/json" }).end(answer.body);
        return;
      }
      try {
        const up = await fetch(target + path, {
          method: req.method,
          headers: { "content-type": "application/json" },
          body: req.method === "GET" ? undefined : body,
        });
        const text = await up.text();
        rec.upstream = up.status;
        if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
        const headers: Record<string, string> = {};
        up.headers.forEach((v, k) => {
          if (k !== "content-length" && k !== "transfer-encoding" && k !== "connection") headers[k] = v;
        });
        res.writeHead(up.status, headers).end(text);
      } catch (err) {
        res.writeHead(502).end(JSON.stringify({ message: String(err) }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An HTTP proxy to target that forwards every request as it is (without its AWS headers) and records it. */
export function recordingProxy(target: string): Promise<Proxy> {
  return proxy(target, () => ({}));
}

/** An HTTP proxy to target that answers acquires (POST /locks/{r}) `delayMs` late, after forwarding them at once. */
export function delayingProxy(target: string, delayMs: number): Promise<Proxy> {
  return proxy(target, (rec) => ({ holdMs: rec.method === "POST" && !rec.path.endsWith("/renew") ? delayMs : 0 }));
}

/** The try route of an acquire path (`/locks/{r}`, `/semaphores/{n}`), "wait" for its `…/wait`, "" for any other. */
export function acquireRoute(path: string): "try" | "wait" | "" {
  if (/^\/(locks|semaphores)\/[^/?]+$/.test(path)) return "try";
  if (/^\/(locks|semaphores)\/[^/?]+\/wait$/.test(path)) return "wait";
  return "";
}

/**
 * A proxy to target that answers as a stack from before the waiting routes
 * did: API Gateway's 404 `{"message":"Not Found"}` on POST `…/wait`, and a
 * try-acquire carrying `wait_seconds` > 0 served by target's waiting route
 * (the try route waited then). Everything else passes through. `requests`
 * records each request as the client sent it.
 */
export function oldStackProxy(target: string): Promise<Proxy> {
  return proxy(target, (rec) => {
    const route = rec.method === "POST" ? acquireRoute(rec.path) : "";
    if (route === "wait") return { answer: { status: 404, body: JSON.stringify({ message: "Not Found" }) } };
    let waits = false;
    try {
      const w = (JSON.parse(rec.body) as { wait_seconds?: unknown }).wait_seconds;
      waits = typeof w === "number" && w > 0;
    } catch {
      // not JSON: passed on as it is
    }
    return { path: route === "try" && waits ? rec.path + "/wait" : rec.path };
  });
}

/**
 * A fetch that sends what the released clients sent: a waiting round to the
 * try route (its `…/wait` cut off), with its `wait_seconds` and
 * `queue_ticket`. It records each acquire and the status it got.
 */
export function releasedFetch(): { fetch: typeof globalThis.fetch; acquires: { path: string; waits: boolean; status: number; fields: string[] }[] } {
  const acquires: { path: string; waits: boolean; status: number; fields: string[] }[] = [];
  const f = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input);
    const route = init.method === "POST" ? acquireRoute(url.pathname) : "";
    if (route === "") return globalThis.fetch(url, init);
    if (route === "wait") url.pathname = url.pathname.slice(0, -"/wait".length);
    const body = typeof init.body === "string" ? (JSON.parse(init.body) as Record<string, unknown>) : {};
    const res = await globalThis.fetch(url, init);
    const text = await res.text();
    let fields: string[] = [];
    if (!res.ok) {
      try {
        fields = ((JSON.parse(text) as { errors?: { field: string }[] }).errors ?? []).map((e) => e.field);
      } catch {
        // no problem document
      }
    }
    acquires.push({ path: url.pathname, waits: typeof body.wait_seconds === "number", status: res.status, fields });
    return new Response(text, { status: res.status, headers: res.headers });
  };
  return { fetch: f as typeof globalThis.fetch, acquires };
}

export interface StubRequest {
  method: string;
  url: URL;
  headers: Record<string, string>;
  text: string;
  /** The parsed JSON body, or undefined. */
  body: Record<string, unknown> | undefined;
  /** performance.now() when the request was made. */
  at: number;
}

export type StubHandler = (req: StubRequest, n: number) => Response | Promise<Response>;

/** A fetch that answers with handler and records every request; like fetch, it rejects with the signal's reason on abort. */
export function stubFetch(handler: StubHandler): { fetch: typeof globalThis.fetch; calls: StubRequest[] } {
  const calls: StubRequest[] = [];
  const f = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : input);
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const text = typeof init.body === "string" ? init.body : "";
    const req: StubRequest = {
      method: init.method ?? "GET",
      url,
      headers,
      text,
      body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
      at: performance.now(),
    };
    calls.push(req);
    const signal = init.signal;
    signal?.throwIfAborted();
    const answer = Promise.resolve(handler(req, calls.length - 1));
    if (!signal) return answer;
    return new Promise<Response>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      answer.then(
        (r) => {
          signal.removeEventListener("abort", onAbort);
          resolve(r);
        },
        (e: unknown) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      );
    });
  };
  return { fetch: f as typeof globalThis.fetch, calls };
}

/** A JSON answer. */
export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  const type = status >= 400 && typeof body === "object" && body !== null && "type" in body ? "application/problem+json" : "application/json";
  return new Response(JSON.stringify(body), { status, headers: { "content-type": type, ...headers } });
}

/** A lock document as the service writes it. */
export function lockDoc(resource: string, owner: string, token: number, ttlSeconds = 30): Record<string, unknown> {
  const now = Date.now();
  return {
    resource,
    owner,
    fencing_token: token,
    acquired_at: new Date(now).toISOString(),
    expires_at: new Date(now + ttlSeconds * 1000).toISOString(),
  };
}

/** A problem document of the service. */
export function problem(status: number, slug: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Response {
  return json(status, { type: `https://ft288.dev/problems/${slug}`, title: slug, status, detail: `a ${slug} problem`, instance: "/locks/x", ...extra }, headers);
}

/** Resolves once cond() is true; rejects after ms. */
export async function until(cond: () => unknown, ms = 3000): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`condition not met within ${ms} ms`);
    await delay(10);
  }
}

export const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Resolves with the signal's reason when it aborts; rejects after ms. */
export function aborted(signal: AbortSignal, ms: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason);
    const t = setTimeout(() => reject(new Error(`signal did not abort within ${ms} ms`)), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(signal.reason);
    }, { once: true });
  });
}

/**
 * One call of DynamoDB's JSON API (`target`: "UpdateItem", "PutItem", ...)
 * on a local store, which takes any signature: resolves to the answer's
 * status and body (`__type` names the error of a failed call).
 */
export async function dynamoCall(endpoint: string, target: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(endpoint, {
    method: "POST",
    headers: {
      "content-type": "application/x-amz-json-1.0",
      "x-amz-target": `DynamoDB_20120810.${target}`,
      "x-amz-date": "20260101T000000Z",
      authorization: "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0",
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}
