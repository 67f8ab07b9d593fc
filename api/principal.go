package api

import (
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// principal returns the IAM principal that signed req, or "" when API
// Gateway passed no IAM identity (auth=none, or the local runner).
//
// An assumed-role ARN names the role and the session
// (arn:aws:sts::123456789012:assumed-role/worker/i-0abc); the session part
// changes with every credential refresh and host, so the lock is bound to the
// role: arn:aws:sts::123456789012:assumed-role/worker.
func principal(req events.APIGatewayV2HTTPRequest) string {
	auth := req.RequestContext.Authorizer
	if auth == nil || auth.IAM == nil {
		return ""
	}
	iam := auth.IAM
	if arn := iam.UserARN; arn != "" {
		if i := strings.Index(arn, ":assumed-role/"); i >= 0 {
			rest := arn[i+len(":assumed-role/"):]
			if j := strings.Index(rest, "/"); j >= 0 {
				return arn[:i+len(":assumed-role/")+j]
			}
		}
		return arn
	}
	// No ARN: fall back to the unique id, without the session suffix of an
	// assumed role ("AROA…:session").
	id, _, _ := strings.Cut(iam.UserID, ":")
	if id == "" {
		id, _, _ = strings.Cut(iam.CallerID, ":")
	}
	if id == "" {
		return ""
	}
	return "account:" + iam.AccountID + ":id:" + id
}

// caller names who made req for an audit log: the full IAM ARN, session
// included (which host or person behind a role acted matters there), the
// unique id when API Gateway passed no ARN, or "anonymous" without an IAM
// identity (auth=none, the local runner).
func caller(req events.APIGatewayV2HTTPRequest) string {
	auth := req.RequestContext.Authorizer
	if auth == nil || auth.IAM == nil {
		return "anonymous"
	}
	if arn := auth.IAM.UserARN; arn != "" {
		return arn
	}
	if p := principal(req); p != "" {
		return p
	}
	return "anonymous"
}
