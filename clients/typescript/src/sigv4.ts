import { CredentialsError } from "./errors.js";

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
   * `@aws-sdk/credential-provider-node`.
   */
  credentials?: Credentials | CredentialsProvider;
}

/** The service requests are signed for. */
export const SIGV4_SERVICE = "execute-api";

/** Credentials are fetched again this long before they expire. */
const REFRESH_WINDOW_MS = 5 * 60_000;

interface SignerLike {
  sign(request: unknown): Promise<{ headers: Record<string, string> }>;
}

/** Resolves the signing region, or throws a TypeError when there is none. */
export function resolveRegion(explicit: string | undefined, endpoint: URL): string {
  if (explicit) return explicit;
  const m = /\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/.exec(endpoint.hostname);
  const region = m?.[1] ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  if (!region) {
    throw new TypeError("sigv4: no region: pass sigv4.region, or set AWS_REGION");
  }
  return region;
}

/**
 * Signs requests. The signer and the credential chain are imported on first
 * use, so a client that does not sign loads neither.
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
      query: {},
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
      const [{ SignatureV4 }, { Hash }] = await Promise.all([import("@smithy/signature-v4"), import("@smithy/hash-node")]);
      return new SignatureV4({
        service: SIGV4_SERVICE,
        region: this.region,
        credentials: () => this.#credentials(),
        sha256: Hash.bind(null, "sha256"),
        applyChecksum: true,
        uriEscapePath: true,
      }) as SignerLike;
    })();
    this.#signer.catch(() => {
      this.#signer = undefined; // let a later request try again
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
      const msg = err instanceof Error ? err.message : String(err);
      throw new CredentialsError(`sigv4: retrieve credentials: ${msg}`, this.#everRetrieved, { cause: err });
    }
  }
}

async function defaultChain(): Promise<CredentialsProvider> {
  let mod: { defaultProvider: () => CredentialsProvider };
  try {
    mod = await import("@aws-sdk/credential-provider-node");
  } catch (err) {
    throw new Error("cannot load @aws-sdk/credential-provider-node for the default credential chain: install it, or pass sigv4.credentials", { cause: err });
  }
  return mod.defaultProvider();
}
