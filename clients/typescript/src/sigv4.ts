import { createHash, createHmac, type Hash, type Hmac } from "node:crypto";
import { CredentialsError, LocksError } from "./errors.js";

/** AWS credentials, as every AWS SDK v3 credential provider returns them. */
export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  /** When they stop working; undefined for long-term keys. */
  expiration?: Date;
}

/** A source of credentials, e.g. `fromNodeProviderChain()` of `@aws-sdk/credential-providers` or `fromTemporaryCredentials(...)`. */
export type CredentialsProvider = () => Promise<Credentials>;

/** How to sign requests with AWS Signature Version 4 for API Gateway's IAM authorizer. */
export interface SigV4Options {
  /**
   * The API's region. Default: taken from an `*.execute-api.REGION.amazonaws.com`
   * endpoint, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
   */
  region?: string;
  /**
   * Fixed credentials or a provider. Default: the AWS SDK's default chain
   * (environment, shared config and credentials files, SSO, web identity,
   * container and instance roles), loaded on first use from
   * `@aws-sdk/credential-provider-node` (see {@link SIGV4_INSTALL}).
   */
  credentials?: Credentials | CredentialsProvider;
}

/** The service requests are signed for. */
export const SIGV4_SERVICE = "execute-api";

/**
 * The one command that adds signing: the package's optional peer
 * dependencies, AWS's signer and its default credential chain. Without
 * them, a client that signs fails its first request with a
 * {@link SigningUnavailableError} that names this command.
 */
export const SIGV4_INSTALL = "npm install @smithy/signature-v4 @aws-sdk/credential-provider-node";

/**
 * Signing was asked for (`sigv4`, `LOCKS_SIGV4`) but the optional packages it
 * needs are not installed; the message names {@link SIGV4_INSTALL}. Nothing
 * was sent.
 */
export class SigningUnavailableError extends LocksError {}

/** Credentials are fetched again this long before they expire. */
const REFRESH_WINDOW_MS = 5 * 60_000;

interface SignerLike {
  sign(request: unknown): Promise<{ headers: Record<string, string> }>;
}

/** Resolves the signing region, or throws a TypeError when there is none. */
export function resolveRegion(explicit: string | undefined, endpoint: URL, env: Record<string, string | undefined> = process.env): string {
  if (explicit) return explicit;
  const m = /\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/.exec(endpoint.hostname);
  const region = m?.[1] || env.AWS_REGION || env.AWS_DEFAULT_REGION;
  if (!region) {
    throw new TypeError("sigv4: no region: pass sigv4.region, or set AWS_REGION");
  }
  return region;
}

/**
 * Signs requests. The signer and the credential chain, optional peer
 * dependencies, are imported on first use, so a client that does not sign
 * needs neither installed.
 */
export class RequestSigner {
  readonly region: string;
  readonly #source: Credentials | CredentialsProvider | undefined;
  #provider: CredentialsProvider | undefined;
  #signer: Promise<SignerLike> | undefined;
  #cached: Credentials | undefined;
  #inflight: Promise<Credentials> | undefined;
  #everRetrieved = false;

  constructor(region: string, credentials: Credentials | CredentialsProvider | undefined) {
    this.region = region;
    this.#source = credentials;
  }

  /**
   * Returns the headers to send: `headers` plus `x-amz-date`,
   * `x-amz-content-sha256`, `x-amz-security-token` (temporary credentials)
   * and `authorization`. `host` is signed but not returned: fetch sends it
   * from the URL.
   */
  async sign(method: string, url: URL, headers: Record<string, string>, body: string | undefined): Promise<Record<string, string>> {
    const signer = await this.#loadSigner();
    const signed = await signer.sign({
      method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port ? Number(url.port) : undefined,
      path: url.pathname,
      query: queryOf(url),
      headers: { ...headers, host: url.host },
      body,
    });
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(signed.headers)) {
      if (k.toLowerCase() !== "host") out[k] = v;
    }
    return out;
  }

  #loadSigner(): Promise<SignerLike> {
    this.#signer ??= (async () => {
      const { SignatureV4 } = await optional(() => import("@smithy/signature-v4"), "@smithy/signature-v4", "the SigV4 signer");
      return new SignatureV4({
        service: SIGV4_SERVICE,
        region: this.region,
        credentials: () => this.#credentials(),
        sha256: Sha256,
        applyChecksum: true,
        uriEscapePath: true,
      }) as SignerLike;
    })();
    this.#signer.catch(() => {
      this.#signer = undefined; // let a later request try again (after an install, say)
    });
    return this.#signer;
  }

  /** Cached credentials, fetched again shortly before they expire. */
  async #credentials(): Promise<Credentials> {
    const c = this.#cached;
    if (c && (!c.expiration || c.expiration.getTime() - Date.now() > REFRESH_WINDOW_MS)) return c;
    this.#inflight ??= this.#retrieve().finally(() => {
      this.#inflight = undefined;
    });
    return this.#inflight;
  }

  async #retrieve(): Promise<Credentials> {
    try {
      if (this.#source !== undefined && typeof this.#source !== "function") {
        this.#cached = this.#source;
      } else {
        this.#provider ??= this.#source ?? (await defaultChain());
        const c = await this.#provider();
        if (!c?.accessKeyId || !c.secretAccessKey) throw new Error("the provider returned no access key");
        this.#cached = c;
      }
      this.#everRetrieved = true;
      return this.#cached;
    } catch (err) {
      if (err instanceof SigningUnavailableError) throw err;
      const msg = err instanceof Error ? err.message : String(err);
      throw new CredentialsError(`sigv4: retrieve credentials: ${msg}`, this.#everRetrieved, { cause: err });
    }
  }
}

async function defaultChain(): Promise<CredentialsProvider> {
  const mod: { defaultProvider: () => CredentialsProvider } = await optional(
    () => import("@aws-sdk/credential-provider-node"),
    "@aws-sdk/credential-provider-node",
    "the default credential chain",
  );
  return mod.defaultProvider();
}

/** Imports an optional peer dependency; when it is not installed, a {@link SigningUnavailableError} naming {@link SIGV4_INSTALL}. */
async function optional<T>(load: () => Promise<T>, name: string, what: string): Promise<T> {
  try {
    return await load();
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") {
      throw new SigningUnavailableError(
        `sigv4: ${what} (${name}) is not installed: signing needs the optional packages; install them with \`${SIGV4_INSTALL}\``,
        { cause: err },
      );
    }
    throw err;
  }
}

/** SHA-256 and HMAC-SHA256 from node:crypto, in the shape SignatureV4 takes (what @smithy/hash-node does). */
class Sha256 {
  readonly #h: Hash | Hmac;
  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#h = secret === undefined ? createHash("sha256") : createHmac("sha256", bytes(secret));
  }
  update(data: string | ArrayBuffer | ArrayBufferView, encoding?: "utf8" | "ascii" | "latin1"): void {
    this.#h.update(bytes(data, encoding));
  }
  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.#h.digest()));
  }
}

function bytes(data: string | ArrayBuffer | ArrayBufferView, encoding: BufferEncoding = "utf8"): Buffer {
  if (typeof data === "string") return Buffer.from(data, encoding);
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.from(data);
}

/** The query of url as the signer takes it: each name with its value, or its values when repeated. */
function queryOf(url: URL): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = {};
  for (const [k, v] of url.searchParams) {
    const prev = query[k];
    query[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return query;
}
