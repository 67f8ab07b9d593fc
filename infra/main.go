// Command infra is the AWS CDK app of the lock service. `cdk synth` (see
// cdk.json at the repository root) runs it from the repository root; it
// expects `make build` to have left build/lambda/<name>/bootstrap for every
// function (distinct api.Routes Name) it deploys. Context flags: auth=none,
// admins (the administrators' ARNs; none: no admin API), reserve=true (with
// reserveAcquire, reserveWait, reserveWatch, reserveRenew, reserveRelease),
// throttle=OP=RATE:BURST,… and accountThrottle=RATE:BURST, destroy=true,
// throttleRate, throttleBurst, assetDir, stackName, and regions (with
// witness) for a multi-Region deployment (see app.go).
package main

import (
	"fmt"
	"os"

	"github.com/aws/jsii-runtime-go"
)

func main() {
	defer jsii.Close()
	app, _, err := NewApp(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		jsii.Close()
		os.Exit(1)
	}
	app.Synth(nil)
}
