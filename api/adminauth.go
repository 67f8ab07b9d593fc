package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// Administrators: who may call the admin routes.
//
// API Gateway's IAM authorizer proves who signed a request, and the identity
// policy of the caller decides which routes it may invoke; but an identity
// policy that allows execute-api:Invoke on "*" reaches /admin too. So the
// admin function also checks the caller against its own allowlist,
// ADMIN_PRINCIPALS (comma-separated ARNs, from the CDK app's -c admins=…),
// and answers everyone else 403 not-an-administrator. The IAM authorizer
// passes the caller's ARN (requestContext.authorizer.iam.userArn), not its
// tags, so the list holds ARNs only. An entry matches:
//
//   - the same ARN, exactly (an IAM user, the account root, one role
//     session, a federated user);
//   - for an IAM role, arn:aws:iam::ACCOUNT:role/NAME (with or without a
//     path, role/PATH/NAME): every session of that role, which the
//     authorizer reports as arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION
//     (an assumed-role ARN has no path).
//
// A Handler that was never given a list (SetAdmins) serves the admin routes
// to anyone: the local runner, which has no IAM identity to check. In
// Lambda, NewFromEnv always sets one, so an empty or missing ADMIN_PRINCIPALS
// refuses every admin call.

// AdminPrincipalsEnv is the environment variable that lists the
// administrators' ARNs, comma-separated.
const AdminPrincipalsEnv = "ADMIN_PRINCIPALS"

// errNotAdministrator refuses an admin route to a caller outside the
// allowlist (problem not-an-administrator).
var errNotAdministrator = errors.New("caller is not an administrator")

// adminARN is an ARN that may stand in ADMIN_PRINCIPALS: an IAM user, role
// or the account root, or an STS role session or federated user, in any
// partition. Names use IAM's characters except the comma, which separates
// the entries; no wildcards (the match is exact).
var adminARN = regexp.MustCompile(`^arn:aws(-[a-z]+)*:(` +
	`iam::[0-9]{12}:(root|(user|role)/([A-Za-z0-9+=.@_-]+/)*[A-Za-z0-9+=.@_-]+)|` +
	`sts::[0-9]{12}:(assumed-role/[A-Za-z0-9+=.@_-]+/[A-Za-z0-9+=.@_-]+|federated-user/[A-Za-z0-9+=.@_-]+))$`)

// ParseAdminPrincipals splits a comma-separated list of administrator ARNs
// (ADMIN_PRINCIPALS, the CDK app's admins flag), trimming spaces, and
// reports every entry that is not an IAM or STS principal ARN. A blank list
// is nil: no administrators.
func ParseAdminPrincipals(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var (
		arns []string
		errs []error
	)
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			errs = append(errs, errors.New("an empty entry (two commas in a row, or one at an end)"))
		case strings.Contains(a, ":assumed-role/") && strings.Count(a, "/") == 1:
			errs = append(errs, fmt.Errorf("%q names a role without a session: list the role, arn:PARTITION:iam::ACCOUNT:role/NAME, "+
				"to admit all its sessions", a))
		case !adminARN.MatchString(a):
			errs = append(errs, fmt.Errorf("%q is not an IAM or STS principal ARN (arn:aws:iam::ACCOUNT:role/NAME, …:user/NAME, "+
				"…:root, arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION, …:federated-user/NAME)", a))
		default:
			arns = append(arns, a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return arns, nil
}

// adminSet is a parsed allowlist.
type adminSet struct {
	exact map[string]bool // ARNs that match themselves
	// sessions holds, for each role entry, the prefix of its sessions'
	// ARNs: "arn:aws:sts::ACCOUNT:assumed-role/NAME/".
	sessions map[string]bool
}

func newAdminSet(arns []string) *adminSet {
	s := &adminSet{exact: map[string]bool{}, sessions: map[string]bool{}}
	for _, a := range arns {
		s.exact[a] = true
		// arn:PARTITION:iam::ACCOUNT:role/[PATH/]NAME
		parts := strings.SplitN(a, ":", 6)
		if len(parts) == 6 && parts[2] == "iam" && strings.HasPrefix(parts[5], "role/") {
			name := parts[5][strings.LastIndexByte(parts[5], '/')+1:]
			s.sessions["arn:"+parts[1]+":sts::"+parts[4]+":assumed-role/"+name+"/"] = true
		}
	}
	return s
}

// allows reports whether arn, a caller's ARN as the IAM authorizer passes
// it, is an administrator's.
func (s *adminSet) allows(arn string) bool {
	if arn == "" {
		return false
	}
	if s.exact[arn] {
		return true
	}
	i := strings.LastIndexByte(arn, '/')
	return i >= 0 && i < len(arn)-1 && strings.Contains(arn, ":assumed-role/") && s.sessions[arn[:i+1]]
}

// SetAdmins limits the admin routes to the principals arns lists (see
// ParseAdminPrincipals; how they match is in this file's comment). An empty
// list refuses every admin call. Without a call the admin routes are open,
// as the local runner needs. Call it before the handler serves.
func (h *Handler) SetAdmins(arns []string) { h.admins = newAdminSet(arns) }

// admit checks the caller of an admin route against the allowlist: nil when
// the route is not an admin route, the list was never set, or the caller is
// on it; errNotAdministrator otherwise, with an audit line naming the
// caller.
func (h *Handler) admit(ctx context.Context, req *events.APIGatewayV2HTTPRequest, route int) error {
	if !rows[route].Admin || h.admins == nil {
		return nil
	}
	var arn string
	if auth := req.RequestContext.Authorizer; auth != nil && auth.IAM != nil {
		arn = auth.IAM.UserARN
	}
	if h.admins.allows(arn) {
		return nil
	}
	h.log.LogAttrs(ctx, slog.LevelWarn, "audit",
		slog.String("action", "admin-refused"),
		slog.String("request_id", req.RequestContext.RequestID),
		slog.String("route", req.RouteKey),
		slog.String("principal", caller(*req)),
	)
	return errNotAdministrator
}
