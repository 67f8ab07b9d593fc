module github.com/ft288/locks/client

// The oldest Go release the client supports: its tests use testing/synctest
// (Go 1.25). A consumer's go line is never raised past it.
go 1.25

require github.com/aws/aws-sdk-go-v2 v1.48.0

require github.com/aws/smithy-go v1.28.9 // indirect
