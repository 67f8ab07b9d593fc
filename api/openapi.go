package api

import _ "embed"

// OpenAPI is the service's contract, api/openapi.yaml (OpenAPI 3.1): the
// routes of Routes, their request bodies with every validation rule, every
// answer per status code (the service's and API Gateway's own), the problem
// types and the IAM (SigV4) security scheme. It ships with the code so tools
// and tests read the very document the handlers are checked against
// (internal/verify/contract).
//
//go:embed openapi.yaml
var OpenAPI []byte
