// The wire: argument checks before sending, paths, and decoding answers.
import { UnexpectedAnswerError } from "./errors.js";
import { decodeLock, type LockInfo } from "./types.js";

export function checkResource(op: string, resource: unknown): void {
  if (typeof resource !== "string" || resource === "") throw new TypeError(`${op}: resource must be a non-empty string`);
  // The service refuses "/" too, but a gateway may route an encoded slash
  // elsewhere first; "." and ".." would be resolved away by URL parsing.
  if (resource.includes("/")) throw new TypeError(`${op}: resource must not contain "/"`);
  if (resource === "." || resource === "..") throw new TypeError(`${op}: resource must not be "." or ".."`);
}

export function checkOwner(op: string, owner: unknown): void {
  if (typeof owner !== "string" || owner.trim() === "") throw new TypeError(`${op}: owner must be a non-empty string`);
}

export function checkTtl(op: string, ttl: unknown): void {
  if (typeof ttl !== "number" || !Number.isSafeInteger(ttl) || ttl < 1) {
    throw new RangeError(`${op}: ttlSeconds ${String(ttl)}: must be a whole number of seconds, at least 1`);
  }
}

export function checkLockDelay(op: string, secs: unknown): void {
  if (secs !== undefined && (typeof secs !== "number" || !Number.isSafeInteger(secs) || secs < 0)) {
    throw new RangeError(`${op}: lockDelaySeconds ${String(secs)}: must be a whole number of seconds, 0 or more`);
  }
}

export function checkToken(op: string, token: unknown): void {
  if (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1)) {
    throw new RangeError(`${op}: fencingToken ${String(token)}: must be a positive integer`);
  }
}

/** Options are an object: a plain-JS `tryAcquire("r", 30)` is refused rather than read as no options. */
export function checkOptions(op: string, options: unknown): void {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`${op}: options must be an object, e.g. { ttlSeconds: 30 }, not ${JSON.stringify(options) ?? String(options)}`);
  }
}

/** Percent-encodes every character but the unreserved ones, so URL parsing and SigV4 see the same bytes. */
export function encode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The path of a lock. */
export function lockPath(resource: string): string {
  return `/locks/${encode(resource)}`;
}

/** The path of a read/write lock. */
export function rwPath(name: string): string {
  return `/rwlocks/${encode(name)}`;
}

/** The path of a semaphore. */
export function semaphorePath(name: string): string {
  return `/semaphores/${encode(name)}`;
}

export function parseJSON(op: string, text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new UnexpectedAnswerError(`${op}: malformed answer: not JSON`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new UnexpectedAnswerError(`${op}: malformed answer: not a JSON object`);
  return v as Record<string, unknown>;
}

export function parseLock(op: string, v: unknown): LockInfo {
  const lock = decodeLock(v);
  if (!lock) throw new UnexpectedAnswerError(`${op}: malformed lock in answer`);
  return lock;
}

export async function readLimited(res: Response, limit: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      break;
    }
  }
  return new TextDecoder().decode(Buffer.concat(chunks).subarray(0, limit));
}

export function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return err.message + cause;
}
