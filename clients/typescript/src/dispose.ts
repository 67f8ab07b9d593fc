// `await using lease = await client.acquire(...)` (TypeScript 5.2+) needs
// Symbol.asyncDispose at run time: TypeScript's downlevel emit looks it up
// when the declaration runs, and throws "Symbol.asyncDispose is not defined"
// without it. Node.js defines it from 20.4 (18.18); older runtimes do not.
// Importing this package defines it there, as TypeScript's documentation
// suggests, with Symbol.for so that every copy of a polyfill agrees.
const symbols = Symbol as unknown as { asyncDispose?: symbol };
symbols.asyncDispose ??= Symbol.for("Symbol.asyncDispose");

export {};
