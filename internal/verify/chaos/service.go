package chaos

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/ft288/locks/api"
	"github.com/ft288/locks/local"
	"github.com/ft288/locks/locklogic"
)

// Instance configures one service instance: the real handlers behind the
// local runner, as testenv.Start builds them, over a store endpoint.
type Instance struct {
	// Offset is added to the real time to make the instance's clock (its
	// skew; zero for an exact clock).
	Offset time.Duration
	// WrapDB, when set, wraps the DynamoDB client the service uses. Tests
	// revert a guarantee on purpose with it (a rewritten condition, an
	// answer made up) to show the checker finds the breach.
	WrapDB func(locklogic.DynamoDBAPI) locklogic.DynamoDBAPI
	// WrapHTTP, when set, wraps the runner (a test's broken front end).
	WrapHTTP func(http.Handler) http.Handler
}

// server is a running Instance.
type server struct {
	url string
	srv *http.Server
}

// startServer serves the lock API for one Instance on a free loopback port,
// over the store at endpoint, table table, with the store budget budget
// (api.StoreBudget when zero); fair serves waiting acquires in arrival
// order (locklogic.Config.FairWaiting), as the service's own setups do;
// oldItem says the store returns the old item with a refused write
// (locklogic.Config.OldItemOnFailure).
func startServer(endpoint, table string, budget time.Duration, fair, oldItem bool, in Instance) (*server, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	db, err := api.NewDynamoDB(context.Background(), endpoint, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: tr, Timeout: 10 * time.Second}
		// The SDK warns about every reply the proxy cuts off; those are
		// the point here.
		o.Logger = logging.Nop{}
	})
	if err != nil {
		return nil, err
	}
	var store locklogic.DynamoDBAPI = db
	if in.WrapDB != nil {
		store = in.WrapDB(store)
	}
	now := time.Now
	if in.Offset != 0 {
		off := in.Offset
		now = func() time.Time { return time.Now().Add(off) }
	}
	// dynalite does not return the old item with a failed condition, so
	// unless the proxy adds it (oldItem) the service explains failed
	// renewals and releases with a read, as locald does when its probe
	// says so.
	svc := locklogic.New(store, locklogic.Config{Table: table, Now: now, FairWaiting: fair, OldItemOnFailure: oldItem})
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	h := api.NewHandler(svc, log, now)
	if budget > 0 {
		h.SetStoreBudget(budget)
	}
	var handler http.Handler = local.NewRunner(h, log)
	if in.WrapHTTP != nil {
		handler = in.WrapHTTP(handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *server) close() { s.srv.Close() }
