// Package chaos runs the lock service under injected store faults and
// checks the history the clients saw against the service's guarantees.
//
// Run starts a fault proxy (internal/verify/faultproxy) in front of a DynamoDB-
// compatible store, one or more service instances over it (the real
// handlers behind the local runner, each with its own clock offset, serving
// waiting acquires in arrival order as the service's own setups do:
// locklogic.Config.FairWaiting), and N concurrent clients that acquire,
// renew, release and read a few resources with short leases over HTTP,
// some of them waiting at the service for a held lock (Config.Waits) in
// rounds that send back their place in the queue (queue_ticket), and the
// same with the permits of a semaphore or two (Config.Semaphores), and
// read/write lock clients take readers' and writers' leases
// (Config.RWClients). Each
// client is sequential and has its own owner name, or
// (Config.SharedOwners) shares one with one other client, as two
// processes of one worker share a chosen owner: then one client's wait can
// be in flight while the other acquires, renews or releases the owner's
// lease. With Config.Election, candidates also campaign for a leadership
// lock of their own (waiting acquires, renewals with the lease's token,
// sometimes a resignation or a stall past the lease) while observers
// long-poll its watch route with the index of their last answer
// (election.go). Every request is recorded with its invoke and return times on
// the process's monotonic clock, what was sent and what came back, and the
// proxy records every store request with its fault and the store's real
// answer. After the fault phase the faults stop, every held-back write
// lands, the clients go on for a moment, and once every lease the store
// recorded has expired (and every waiter's place has lapsed) a fresh owner
// takes each resource and a permit of each semaphore.
//
// Check then enforces twenty rules, each reported with the excerpt of the
// history (client operations and store requests) that reproduces it (a
// semaphore's permits share the rules of leases where they apply: answers,
// no false grant, recovery, fencing across all its permits, linearizable
// against a model of one semaphore):
//
//   - mutual exclusion: no two owners' holds overlap, a hold being what a
//     client may rely on by the documented rules: from a grant's answer to
//     its own deadline, invoke time + ttl - margin on its own clock,
//     moved by renewals, ended by its release or re-acquire (see view),
//     and cut where another client of the same owner may have released,
//     replaced or shortened the owner's lease (see coOwnerCuts): a lease
//     belongs to its owner, not to a process;
//   - fencing: grant tokens are unique and grow in real-time order of the
//     grants, in the answers and in the writes the store committed;
//   - no false grant: every acquired:true, renew 200, release 204 and
//     status 200 matches a write (or, for status, a read) of the same
//     resource and owner that the store really made within the request's
//     window, showing exactly the answered lease;
//   - answers: only documented statuses and shapes, store trouble as 503
//     with Retry-After and a problem body, every answer within the store
//     budget plus a slack (a watch: its wait plus two budgets), never a
//     dropped connection; a watch's index, token, lease and changed flag
//     agree;
//   - recovery: after the faults stop every request succeeds, and every
//     lock is free once its leases expired;
//   - linearizable: porcupine finds the store's requests and the clients'
//     status answers linearizable against a sequential model of one lock
//     (model.go explains how time and expiry enter the model);
//   - late write: no grant replaced a live lease of its own owner granted
//     after the request arrived, however late in a wait its write came.
//     The model takes each request's issue time from the :iss the service
//     sent; this rule does not, it bounds the arrival by when the proxy
//     received the request's first store request, and compares it with the
//     replaced lease's acquired_at from the grant answer (latewrite.go);
//   - one holder: in the service's history — the leases the store
//     committed, from the proxy's records alone — no two leases of
//     different owners are live at once on the service's clock, whatever
//     the clients believed (leaders.go);
//   - watch order: every watcher sees the leases in the history's order:
//     each answer a state the store had at some moment of the call (a
//     committed lease with its owner and expiry, or its end), the index
//     never below the one asked with, and the leases a watcher reports
//     skipped (token difference − 1) exactly those the history has
//     between its two answers (leaders.go);
//   - fairness: in the store's history of each lock — the queue's joins,
//     keeps and prunes and the grants, from the proxy's records — no grant
//     passes a waiter's place that joined the queue before it and was
//     still queued and live: the head's grant goes to the earliest live
//     place, and a plain acquire takes a free lock only while no live
//     place is queued (its owner's re-acquire of its own live lease
//     aside) (fairness.go). The report counts, of the grants to waiting
//     acquires made while others waited, those that went to the longest
//     waiter;
//   - semaphore limit: the clients' holds of a semaphore's permits never
//     belong to more than N owners at once;
//   - semaphore holders: in the store's committed writes, no slot holds
//     two owners' live permits at once, and never more than N are live;
//   - semaphore slots: a grant's slot is the slot the store wrote its
//     token into, below N; a renewal answers its slot; every token is the
//     one counter's; no grant gives an owner a second live permit
//     (semcheck.go, semmodel.go);
//   - lock sets (Config.SetClients; setclient.go, setops.go, sets.go):
//     a set's names are judged as locks by the rules above (each set
//     call is recorded with one lock operation per name), and a set
//     answered granted held all its names from the answer on (set held),
//     a refused or failed one holds none but those it lists unreleased
//     (set rollback), and every set owner that keeps asking is granted
//     at least once every Options.SetGap (set progress);
//   - read/write locks (Config.RWClients; rwclient.go, rwstore.go,
//     rwcheck.go): the item's writer lease and each reader slot's decoded
//     as leases of the one lease step; no writer overlaps any other holder
//     (rw exclusive), at most R readers (rw readers), one counter's tokens
//     unique and growing across both modes (rw tokens), and no grant
//     passes a live queued writer (rw writer first), so a waiting writer
//     does not starve behind continuous readers (the report has the
//     longest wait of a waiting writer).
//
// A grant whose write landed after its caller was answered 503 (an
// "unheard grant") is not a violation: nobody relies on it, and it keeps
// the lock from others until its ttl, which the model accounts for since
// it is in the store's history. The report counts them, and, with shared
// owners, the grants of an owner during another of its clients' waits and
// the re-acquires that replaced a co-owner's live lease.
package chaos
