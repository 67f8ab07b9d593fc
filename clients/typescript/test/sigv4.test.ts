// SigV4: the headers the client sends are checked against an independent
// implementation of the spec (node:crypto HMACs, itself checked against AWS's
// published get-vanilla vector) and against the AWS signer's own output.
import { Hash } from "@smithy/hash-node";
import { SignatureV4 } from "@smithy/signature-v4";
import assert from "node:assert/strict";
import { createHash, createHmac } from "node:crypto";
import { mock, test } from "node:test";
import { CredentialsError, Client } from "../dist/esm/index.js";
import { json, lockDoc, stubFetch } from "./helpers.js";

const sha256hex = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");
const hmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data, "utf8").digest();

/** AWS's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ as %XX. */
function uriEncode(s: string): string {
  let out = "";
  for (const b of Buffer.from(s, "utf8")) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-_.~]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

interface Signable {
  method: string;
  path: string; // as sent (already percent-encoded): every service but S3 encodes it once more
  query?: URLSearchParams;
  headers: Record<string, string>; // lower-case names, the ones to sign
  payloadHash: string;
  accessKeyId: string;
  secretAccessKey: string;
  amzDate: string;
  region: string;
  service: string;
}

/** The Authorization header for r, following the SigV4 spec step by step. */
function referenceAuthorization(r: Signable): string {
  const canonicalUri = r.path.split("/").map(uriEncode).join("/");
  const names = Object.keys(r.headers).sort();
  const canonicalHeaders = names.map((n) => `${n}:${r.headers[n]!.trim().replace(/\s+/g, " ")}\n`).join("");
  const canonicalQuery = [...(r.query ?? [])]
    .map(([k, v]) => `${uriEncode(k)}=${uriEncode(v)}`)
    .sort()
    .join("&");
  const canonicalRequest = [r.method, canonicalUri, canonicalQuery, canonicalHeaders, names.join(";"), r.payloadHash].join("\n");
  const date = r.amzDate.slice(0, 8);
  const scope = `${date}/${r.region}/${r.service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", r.amzDate, scope, sha256hex(canonicalRequest)].join("\n");
  const key = hmac(hmac(hmac(hmac(`AWS4${r.secretAccessKey}`, date), r.region), r.service), "aws4_request");
  const signature = createHmac("sha256", key).update(stringToSign, "utf8").digest("hex");
  return `AWS4-HMAC-SHA256 Credential=${r.accessKeyId}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`;
}

const EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

test("the reference signer reproduces AWS's get-vanilla test vector", () => {
  assert.equal(
    referenceAuthorization({
      method: "GET",
      path: "/",
      headers: { host: "example.amazonaws.com", "x-amz-date": "20150830T123600Z" },
      payloadHash: sha256hex(""),
      accessKeyId: "AKIDEXAMPLE",
      secretAccessKey: EXAMPLE_SECRET,
      amzDate: "20150830T123600Z",
      region: "us-east-1",
      service: "service",
    }),
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
  );
});

test("requests are signed for execute-api as the spec and the AWS signer say", async () => {
  mock.timers.enable({ apis: ["Date"], now: Date.UTC(2026, 11, 2, 13, 14, 38, 318) });
  try {
    const stub = stubFetch((req) =>
      req.url.pathname.endsWith("/watch")
        ? json(200, { resource: "payment:42 ü", index: 14, changed: true, fencing_token: 7, lock: lockDoc("payment:42 ü", "w1", 7) })
        : req.url.pathname.startsWith("/prod/admin/")
          ? json(200, { locks: [] })
          : req.method === "GET"
            ? json(200, lockDoc("payment:42 ü", "w1", 7))
            : json(200, { acquired: true, lock: lockDoc("payment:42 ü", "w1", 7) }),
    );
    const credentials = { accessKeyId: "AKIDEXAMPLE", secretAccessKey: EXAMPLE_SECRET, sessionToken: "session/token+with=chars" };
    const c = new Client("https://abc123.execute-api.eu-west-1.amazonaws.com/prod", { fetch: stub.fetch, sigv4: { credentials } });
    await c.tryAcquire("payment:42 ü", { owner: "w1", ttlSeconds: 30, keepAlive: false });
    await c.status("payment:42 ü");
    await c.watch("payment:42 ü", { index: 12, waitSeconds: 0 });
    await c.list("payment:42 ü", { limit: 5 });

    const [post, get, watch, list] = stub.calls;
    assert.equal(watch!.url.search, "?index=12&wait_seconds=0");
    assert.equal(list!.url.search, "?prefix=payment%3A42%20%C3%BC&limit=5");
    assert.equal(post!.url.pathname, "/prod/locks/payment%3A42%20%C3%BC");
    assert.equal(post!.text, '{"owner":"w1","ttl_seconds":30}');
    assert.equal(post!.headers["x-amz-date"], "20261202T131438Z");
    assert.equal(post!.headers["x-amz-content-sha256"], sha256hex(post!.text));
    assert.equal(get!.headers["x-amz-content-sha256"], sha256hex(""));
    assert.equal(post!.headers["x-amz-security-token"], credentials.sessionToken);

    for (const [req, signed] of [
      [post!, ["accept", "content-type", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]],
      [get!, ["accept", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]],
      [watch!, ["accept", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]],
      [list!, ["accept", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]],
    ] as const) {
      const headers: Record<string, string> = {};
      for (const n of signed) headers[n] = n === "host" ? req.url.host : req.headers[n]!;
      const want = referenceAuthorization({
        method: req.method,
        path: req.url.pathname,
        query: req.url.searchParams,
        headers,
        payloadHash: sha256hex(req.text),
        accessKeyId: credentials.accessKeyId,
        secretAccessKey: credentials.secretAccessKey,
        amzDate: "20261202T131438Z",
        region: "eu-west-1", // from the endpoint's host name
        service: "execute-api",
      });
      assert.equal(req.headers.authorization, want, `${req.method} ${req.url.pathname}: spec`);

      // The AWS signer, given the same request (without the headers it adds itself).
      const aws = await new SignatureV4({ service: "execute-api", region: "eu-west-1", credentials, sha256: Hash.bind(null, "sha256") }).sign(
        {
          method: req.method,
          protocol: "https:",
          hostname: req.url.hostname,
          path: req.url.pathname,
          query: Object.fromEntries(req.url.searchParams),
          headers: Object.fromEntries(signed.filter((n) => !n.startsWith("x-amz-")).map((n) => [n, headers[n]!])),
          body: req.text || undefined,
        },
        { signingDate: new Date() },
      );
      assert.equal(req.headers.authorization, aws.headers.authorization, `${req.method} ${req.url.pathname}: AWS signer`);
    }
  } finally {
    mock.timers.reset();
  }
});

test("sigv4: true takes credentials from the default chain and the region from the environment", async () => {
  const saved = { ...process.env };
  Object.assign(process.env, { AWS_ACCESS_KEY_ID: "AKIDFROMENV", AWS_SECRET_ACCESS_KEY: "secret-from-env", AWS_REGION: "ap-south-2" });
  delete process.env.AWS_SESSION_TOKEN;
  delete process.env.AWS_PROFILE;
  try {
    const stub = stubFetch(() => json(200, lockDoc("r", "w", 1)));
    await new Client("https://locks.example.com", { fetch: stub.fetch, sigv4: true }).status("r");
    assert.match(stub.calls[0]!.headers.authorization!, /^AWS4-HMAC-SHA256 Credential=AKIDFROMENV\/\d{8}\/ap-south-2\/execute-api\/aws4_request, /);
    assert.equal(stub.calls[0]!.headers["x-amz-security-token"], undefined);
  } finally {
    process.env = saved;
  }
});

test("an unsigned client sends no AWS headers; missing credentials fail before sending", async () => {
  const stub = stubFetch(() => json(200, lockDoc("r", "w", 1)));
  await new Client("http://127.0.0.1:1", { fetch: stub.fetch }).status("r");
  assert.deepEqual(Object.keys(stub.calls[0]!.headers).filter((h) => h === "authorization" || h.startsWith("x-amz-")), []);

  let calls = 0;
  const failing = async () => {
    calls++;
    throw new Error("no credentials here");
  };
  const c = new Client("https://locks.example.com", { fetch: stub.fetch, sigv4: { region: "eu-west-1", credentials: failing } });
  const err = await c.acquire("r", { ttlSeconds: 5, waitMs: 5000 }).catch((e: unknown) => e);
  assert.ok(err instanceof CredentialsError, String(err));
  assert.equal(err.temporary, false, "never had credentials: not worth retrying");
  assert.equal(calls, 1);
  assert.equal(stub.calls.length, 1, "nothing more was sent");
  const { AWS_REGION, AWS_DEFAULT_REGION } = process.env;
  delete process.env.AWS_REGION;
  delete process.env.AWS_DEFAULT_REGION;
  try {
    assert.throws(() => new Client("https://locks.example.com", { sigv4: { credentials: failing } }), /no region/, "needs a region");
  } finally {
    if (AWS_REGION !== undefined) process.env.AWS_REGION = AWS_REGION;
    if (AWS_DEFAULT_REGION !== undefined) process.env.AWS_DEFAULT_REGION = AWS_DEFAULT_REGION;
  }
});
