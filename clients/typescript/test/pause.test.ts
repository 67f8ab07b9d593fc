// A paused holder runs no step after it resumes (issue 22), against the local
// runner: a holder process (test/pause-holder.ts) with a 1 s lease runs work
// steps, each after the documented check; the test stops it with SIGSTOP,
// another owner takes the lock once the lease has run out at the service, and
// the test resumes the holder. Its first check after the resume must refuse
// (for an election: its first "do I lead?" must say no), so no step runs after
// the resume. 20 rounds for a lock (half with `lease.check()` under `await
// using`, half with `signal.throwIfAborted()` under withLock) and 20 for an
// election, ten holders at a time on different locks, each stopped after its
// first, second or third step. A holder that loses its lease before the stop
// (a machine too loaded to renew a 1 s lease in time) checked correctly but
// was not paused: its round starts again on a new lock, at most twice.
import assert from "node:assert/strict";
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { after, before, describe, test, type TestContext } from "node:test";
import { Client } from "../dist/esm/index.js";
import { delay, startRunner, uniqueName, type Runner } from "./helpers.js";

const HOLDER = fileURLToPath(new URL("./pause-holder.js", import.meta.url));
const ROUNDS = 20;
const BATCH = 10;
const ATTEMPTS = 3;

type Mode = "check" | "signal" | "election";
type Line = { at: string; work?: string; lost?: string; leader?: boolean };

interface Round {
  round: number;
  mode: Mode;
  steps: number;
  stepsAfterResume: number;
  lostAfterResumeMs: number;
  firstLeaderSampleAfterResume: boolean | undefined;
  restarts: number;
}

class LostBeforePause extends Error {}

let runner: Runner;
let locks: Client;

before(async () => {
  runner = await startRunner();
  locks = new Client(runner.url, { backoff: { baseMs: 20, maxMs: 200 } });
});

after(async () => {
  await runner?.stop();
});

/** The state letter of /proc/<pid>/stat ('T': stopped). */
function procState(pid: number): string {
  return readFileSync(`/proc/${pid}/stat`, "utf8").split(")").at(-1)!.trim().split(" ")[0]!;
}

/** A holder process and its stdout, one parsed line at a time (undefined at the end). */
class Holder {
  readonly proc: ChildProcessByStdio<null, Readable, Readable>;
  readonly exited: Promise<number | null>;
  stderr = "";
  readonly #lines: Line[] = [];
  #ended = false;
  #wake: (() => void) | undefined;

  constructor(mode: Mode, resource: string) {
    this.proc = spawn(process.execPath, [HOLDER, runner.url, resource, mode], { stdio: ["ignore", "pipe", "pipe"] });
    this.proc.stderr.on("data", (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => this.proc.once("exit", (code) => resolve(code)));
    const rl = createInterface({ input: this.proc.stdout });
    rl.on("line", (l) => {
      this.#lines.push(JSON.parse(l) as Line);
      this.#wake?.();
    });
    rl.on("close", () => {
      this.#ended = true;
      this.#wake?.();
    });
  }

  /** The next line, waited for; undefined once stdout has ended. */
  async next(): Promise<Line | undefined> {
    const timeout = performance.now() + 30_000;
    while (this.#lines.length === 0 && !this.#ended) {
      if (performance.now() > timeout) throw new Error(`the holder said nothing for 30 s: ${this.stderr}`);
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        setTimeout(resolve, 1000).unref();
      });
    }
    return this.#lines.shift();
  }

  async end(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGCONT");
      this.proc.kill("SIGKILL");
    }
    await this.exited;
  }
}

async function attempt(mode: Mode, i: number): Promise<Omit<Round, "restarts">> {
  const resource = uniqueName(`pause-${mode}`);
  const holder = new Holder(mode, resource);
  const lines: Line[] = [];
  let steps = 0;
  let resumed: bigint;
  let token: number;
  try {
    // Stop it after its first, second or third step: the tick's phase varies.
    while (steps < 1 + (i % 3)) {
      const line = await holder.next();
      if (line?.lost) throw new LostBeforePause(`round ${i}: the holder lost its lease before the pause: ${line.lost}`);
      if (!line) throw new Error(`round ${i}: the holder ended before the pause: ${holder.stderr}`);
      if (line.work) steps++;
    }
    const end = performance.now() + 5000;
    for (let stopped = false; ; await delay(2)) {
      // Node reaps an exited child at once: a holder gone before the
      // stop (its next check found the lease lost, on a loaded machine)
      // has no /proc entry, or is a zombie for a moment.
      let state: string | undefined;
      try {
        if (!stopped) process.kill(holder.proc.pid!, "SIGSTOP");
        stopped = true;
        state = procState(holder.proc.pid!);
      } catch {
        state = undefined;
      }
      if (state === "T") break;
      if (state === undefined || state === "Z" || state === "X") {
        const rest: Line[] = [];
        for (let l = await holder.next(); l; l = await holder.next()) rest.push(l);
        if (rest.some((l) => l.lost)) throw new LostBeforePause(`round ${i}: the holder lost its lease before the pause: ${JSON.stringify(rest)}`);
        throw new Error(`round ${i}: the holder exited before the pause: ${JSON.stringify(rest)} ${holder.stderr}`);
      }
      if (performance.now() > end) throw new Error(`round ${i}: the holder did not stop`);
    }

    // Another owner: granted once the stopped holder's lease ran out at the service.
    const election = locks.election(resource);
    const other = mode === "election"
      ? await election.campaign({ owner: "taker", ttlSeconds: 5, waitMs: 15_000 })
      : await locks.acquire(resource, { owner: "taker", ttlSeconds: 5, waitMs: 15_000 });
    token = other.fencingToken;
    try {
      resumed = process.hrtime.bigint();
      process.kill(holder.proc.pid!, "SIGCONT");
      for (let line = await holder.next(); line; line = await holder.next()) lines.push(line);
      assert.equal(await holder.exited, 0, `round ${i}: ${holder.stderr}`);
    } finally {
      await (mode === "election" ? election.resign() : other.release());
    }
  } finally {
    await holder.end();
  }

  const afterResume = lines.filter((l) => BigInt(l.at) > resumed);
  const lost = lines.filter((l) => l.lost);
  assert.equal(lost.length, 1, `round ${i}: no loss reported: ${JSON.stringify(lines)} ${holder.stderr}`);
  assert.ok(token > 0);
  return {
    round: i,
    mode,
    steps: steps + lines.filter((l) => l.work).length,
    stepsAfterResume: afterResume.filter((l) => l.work).length,
    lostAfterResumeMs: Number(BigInt(lost[0]!.at) - resumed) / 1e6,
    firstLeaderSampleAfterResume: afterResume.find((l) => l.leader !== undefined)?.leader,
  };
}

async function round(mode: Mode, i: number): Promise<Round> {
  for (let n = 0; ; n++) {
    try {
      return { ...(await attempt(mode, i)), restarts: n };
    } catch (err) {
      if (!(err instanceof LostBeforePause) || n === ATTEMPTS - 1) throw err;
    }
  }
}

async function rounds(t: TestContext, modes: (i: number) => Mode): Promise<Round[]> {
  const results: Round[] = [];
  for (let start = 0; start < ROUNDS; start += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, ROUNDS - start) }, (_, k) => start + k);
    results.push(...(await Promise.all(batch.map((i) => round(modes(i), i)))));
  }
  const ms = results.map((r) => r.lostAfterResumeMs).sort((a, b) => a - b);
  t.diagnostic(
    `${ROUNDS} rounds (${[...new Set(results.map((r) => r.mode))].join(", ")}): ${results.filter((r) => r.stepsAfterResume > 0).length} ` +
      `with a step after resume (${results.reduce((n, r) => n + r.stepsAfterResume, 0)} of ${results.reduce((n, r) => n + r.steps, 0)} steps); ` +
      `loss signalled ${ms[0]!.toFixed(2)} / ${ms[Math.floor(ms.length / 2)]!.toFixed(2)} / ${ms.at(-1)!.toFixed(2)} ms ` +
      `(min / median / max) after the resume; ${results.reduce((n, r) => n + r.restarts, 0)} rounds restarted (lost before the pause)`,
  );
  for (const r of results) {
    assert.equal(r.stepsAfterResume, 0, `a step ran after the resume: ${JSON.stringify(r)}`);
    assert.ok(r.lostAfterResumeMs >= 0, JSON.stringify(r));
  }
  return results;
}

describe("a holder stopped past its lease", { concurrency: false, skip: process.platform !== "linux" && "needs SIGSTOP and /proc" }, () => {
  test("a lock holder runs no step after it resumes: lease.check(), signal.throwIfAborted()", async (t) => {
    await rounds(t, (i) => (i % 2 === 0 ? "check" : "signal"));
  });

  test("an old leader's first \"do I lead?\" after it resumes says no", async (t) => {
    for (const r of await rounds(t, () => "election")) {
      assert.equal(r.firstLeaderSampleAfterResume, false, JSON.stringify(r));
    }
  });
});
