/** Exponential backoff with full jitter. */
export class Backoff {
  constructor(
    readonly baseMs: number,
    readonly maxMs: number,
  ) {}

  /**
   * How long to wait before retry number `attempt` (0-based): a random time
   * in [0, min(max, base·2^attempt)], raised to `floorMs` when that is larger,
   * but never above max.
   */
  delay(attempt: number, floorMs = 0): number {
    let ceil = this.baseMs;
    for (let i = 0; i < attempt && ceil < this.maxMs; i++) ceil = Math.min(ceil * 2, this.maxMs);
    return Math.max(Math.random() * ceil, Math.min(floorMs, this.maxMs));
  }
}

/** Resolves true after ms, or false as soon as signal aborts. An unref'd timer does not keep the process alive. */
export function sleep(ms: number, signal?: AbortSignal, unref = false): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    if (unref) timer.unref();
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export type Settled<T> = { status: "ok"; value: T } | { status: "error"; error: unknown } | { status: "aborted" };

/** Waits for p or for signal to abort, whichever comes first, without cancelling p. */
export function settle<T>(p: Promise<T>, signal?: AbortSignal): Promise<Settled<T>> {
  return new Promise((resolve) => {
    const onAbort = () => resolve({ status: "aborted" });
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    p.then(
      (value) => {
        signal?.removeEventListener("abort", onAbort);
        resolve({ status: "ok", value });
      },
      (error: unknown) => {
        signal?.removeEventListener("abort", onAbort);
        resolve({ status: "error", error });
      },
    );
  });
}

/** A Retry-After header (delay-seconds or an HTTP-date) in milliseconds; undefined when absent, malformed or not in the future. */
export function parseRetryAfter(v: string | null): number | undefined {
  const s = v?.trim();
  if (!s) return undefined;
  if (/^\d+$/.test(s)) {
    const secs = Number(s);
    return secs > 0 ? Math.min(secs, 86_400) * 1000 : undefined;
  }
  if (/ GMT$/.test(s)) {
    const t = Date.parse(s);
    if (!Number.isNaN(t) && t > Date.now()) return t - Date.now();
  }
  return undefined;
}
