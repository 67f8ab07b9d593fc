// A holder that the pause test (test/pause.test.ts) stops with SIGSTOP past
// its lease, a process of its own:
//
//   node dist-test/pause-holder.js ENDPOINT RESOURCE check|signal|election
//
// It takes the lock with a 1 s lease and runs work steps as the
// documentation says: the work's own timer ticks (50 ms), then the
// documented check, then a step that writes "working with token N".
//   check:    `await using lease = await client.acquire(...)`, `lease.check()`
//   signal:   `client.withLock(..., (signal, token) => ...)` with a signal of
//             its own (so the work gets the combined signal),
//             `signal.throwIfAborted()`
//   election: `election.campaign(...)`, then "do I lead?" (`election.lease`)
// Each line on stdout is JSON with `at`, process.hrtime.bigint()
// (CLOCK_MONOTONIC, which the test reads too) taken just before the check:
// a step whose `at` is after the test resumed the process passed its check
// after the pause. When the check refuses, it prints `lost` with the time it
// did and exits 0.
import { setTimeout as tick } from "node:timers/promises";
import { Client, LeaseLostError } from "../dist/esm/index.js";

const TICK_MS = 50;
const [endpoint, resource, mode] = process.argv.slice(2) as [string, string, string];
const client = new Client(endpoint, { backoff: { baseMs: 20, maxMs: 200 } });

const now = () => process.hrtime.bigint().toString();
const emit = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

/** One work step: the check, then the write; a refusal is reported when it happens, and rethrown. */
function step(at: string, check: () => void, token: number): void {
  try {
    check();
  } catch (err) {
    emit({ at: now(), lost: String(err) });
    throw err;
  }
  emit({ at, work: `working with token ${token}` });
}

async function withCheck(): Promise<void> {
  await using lease = await client.acquire(resource, { ttlSeconds: 1, waitMs: 10_000 });
  for (;;) {
    await tick(TICK_MS);
    step(now(), () => lease.check(), lease.fencingToken);
  }
}

async function withSignal(): Promise<void> {
  const shutdown = new AbortController();
  process.once("SIGTERM", () => shutdown.abort());
  await client.withLock(resource, async (signal, fencingToken) => {
    for (;;) {
      await tick(TICK_MS);
      step(now(), () => signal.throwIfAborted(), fencingToken);
    }
  }, { ttlSeconds: 1, waitMs: 10_000, signal: shutdown.signal });
}

async function asLeader(): Promise<void> {
  const election = client.election(resource);
  const lease = await election.campaign({ ttlSeconds: 1, waitMs: 10_000 });
  try {
    for (;;) {
      await tick(TICK_MS);
      const at = now();
      const leading = election.lease !== undefined; // "do I lead?"
      emit({ at, leader: leading });
      if (!leading) {
        emit({ at: now(), lost: String(lease.signal.reason) });
        return;
      }
      emit({ at, work: `working with token ${lease.fencingToken}` });
    }
  } finally {
    await election.resign().catch(() => {});
  }
}

const run = { check: withCheck, signal: withSignal, election: asLeader }[mode];
if (!run) throw new Error(`unknown mode ${mode}`);
try {
  await run();
} catch (err) {
  // The loss was reported when the check refused; the end of the block reports it
  // again, with the release's own error when that failed too (a SuppressedError).
  const { error, suppressed } = err as { error?: unknown; suppressed?: unknown };
  if (![err, error, suppressed].some((e) => e instanceof LeaseLostError)) throw err;
}
