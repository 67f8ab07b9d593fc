// Package rie holds the runtime-fidelity tests of the lock service: they
// build the real functions/<name> mains, run each one under the AWS Lambda
// Runtime Interface Emulator (the same Runtime API loop Lambda drives)
// against an in-memory dynalite, and send API Gateway HTTP API (payload 2.0)
// events for every route. The package has no code of its own.
package rie
