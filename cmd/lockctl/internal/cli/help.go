package cli

import (
	"flag"
	"fmt"
	"strings"
)

// overview is `lockctl help`.
func overview() string {
	var b strings.Builder
	b.WriteString("Usage: lockctl COMMAND RESOURCE [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n        %s\n", c.usageLine(), c.summary)
	}
	b.WriteString(`
Flags of every command:
  --endpoint URL   the lock service (env LOCKS_ENDPOINT, default ` + DefaultEndpoint + `)
  --sigv4          sign requests with AWS SigV4 (IAM auth), credentials from
                   the AWS default chain (env, profile, SSO, role); also
                   with env LOCKS_SIGV4=1
  --region R       the API's AWS region for --sigv4 (default: env AWS_REGION
                   or the profile's region)

--owner defaults to HOST:PID:RANDOM, unique per process. --ttl, --wait,
--grace and --lock-delay take seconds (90) or a duration (90s, 1m30s); --ttl
and --lock-delay are whole seconds. --wait 0 tries once; a longer --wait
waits at the service (one request per round of up to 20 s, and at most two
thirds of the lease's local validity, so a grant at the end of a round
leaves room for the first renewal) and gets the lock right after its
release, or polls a service that does not wait (and when a round would be
under a second). 'lockctl COMMAND --help' tells more about a command.

Semaphores: -n N makes RESOURCE a semaphore of N permits for acquire and
run (at most N holders at once, each in a slot of its own; run gives the
command LOCK_SLOT); --slot K names a permit for renew, release and
force-release; -s shows a semaphore for status, and ls -s lists permits.

Read/write locks: --read or --write makes RESOURCE a read/write lock for
acquire and run (a reader's lease, beside other readers, or the writer's);
--read --slot K or --write names a lease for renew, release and
force-release; --rw shows one for status and watch, and ls --rw lists them.

Exit codes:
  0   success (run, elect: the command's own status; watch: stopped by
      Ctrl-C or SIGTERM)
  1   error: service unreachable, unexpected answer, command not started
  2   usage error
  3   no live lease (status, renew, release, force-release)
  4   the lease belongs to another owner or to a newer lease (renew, release;
      force-release --token); the semaphore has another number of permits
      (acquire -n, run -n)
  75  the lock is held by another owner, or the semaphore is full, and --wait
      ran out (acquire, run; --held-exit changes it)
  76  run, elect --once: the lease was lost while the command ran; the
      command was stopped
  126, 127  run, elect: the command could not be executed or was not found
  128+n     run, elect: signal n stopped lockctl before the command ran
`)
	return b.String()
}

// help is `lockctl NAME --help`.
func (fs *flagSet) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: lockctl %s\n\n%s\n", fs.cmd.usageLine(), fs.cmd.help)
	alias := map[string]bool{}
	for _, s := range fs.short {
		alias[s] = true
	}
	own, every := &strings.Builder{}, &strings.Builder{}
	fs.VisitAll(func(f *flag.Flag) {
		if alias[f.Name] {
			return
		}
		w := own
		if commonFlags[f.Name] {
			w = every
		}
		kind, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if s := fs.short[f.Name]; s != "" {
			name = "-" + s + ", " + name
		}
		if kind == "value" {
			kind = "SECONDS"
		}
		if kind != "" {
			name += " " + strings.ToUpper(kind)
		}
		fmt.Fprintf(w, "  %s\n        %s", name, usage)
		if d, ok := fs.shownDefault[f.Name]; ok {
			fmt.Fprintf(w, " (default %s)", d)
		} else if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" && f.DefValue != "-1" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		w.WriteString("\n")
	})
	if own.Len() > 0 {
		b.WriteString("\nFlags:\n" + own.String())
	}
	if every.Len() > 0 {
		b.WriteString("\nFlags of every command:\n" + every.String())
	}
	return b.String()
}

// helpCmd is `lockctl help [COMMAND]`: the overview on stdout, or the
// command's --help.
func helpCmd(args []string, env Env) int {
	if len(args) > 0 {
		c := lookup(args[0])
		if c == nil {
			fmt.Fprintf(env.Stderr, "lockctl: unknown command %q\nRun 'lockctl help' for usage.\n", args[0])
			return ExitUsage
		}
		return c.run([]string{"--help"}, env)
	}
	fmt.Fprint(env.Stdout, overview())
	return ExitOK
}
