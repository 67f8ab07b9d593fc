// Package fence makes the system a lock protects refuse a writer whose lease
// has ended.
//
// A lease cannot stop a paused holder: a process that stops (a GC pause, a
// suspended VM, a slow network) past its lease's end resumes believing it
// still holds the lock, while another holder has taken over. Every grant
// carries a fencing token larger than all before it (Lease.FencingToken), so
// the protected system can refuse the late writer if it stores, with the
// data, the largest token that wrote it and accepts a write only with a
// token at least as large. The check must happen in the store, in the same
// atomic write as the data: a read-then-write in the client has the same gap
// the pause falls into.
//
// This package adds that check to your own writes. It imports nothing but
// the standard library, so it returns plain strings to merge into your
// requests and never wraps an SDK or a driver. docs/fencing.md in the
// repository tells the story: Kleppmann's argument, complete DynamoDB
// programs, the SQL pattern, what S3's conditional writes can and cannot
// do, and the end-to-end tests that pause a holder past its lease.
//
// # DynamoDB
//
// NewDynamoDB(token) is the condition `attribute_not_exists(#fence) OR
// #fence <= :fence` and the update `SET #fence = :fence`, with their names
// and the token as a number. Merge adds them to the expressions of an
// UpdateItem, a PutItem or a transaction's item, AND-ing the condition with
// yours and renaming placeholders that collide; a refused write fails with
// *types.ConditionalCheckFailedException (in a transaction,
// *types.TransactionCanceledException with the reason
// "ConditionalCheckFailed"). The AWS SDK's expression builder (module
// github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression) builds the same
// fence from Attribute and Token, to combine with your own builders:
//
//	name, token := expression.Name(f.Attribute()), expression.Value(f.Token())
//	cond := name.AttributeNotExists().Or(name.LessThanEqual(token))
//	update := expression.Set(name, token)
//
// Never delete a fenced item: the fence goes with it, and a late writer's
// attribute_not_exists passes. Mark it deleted with a fenced update.
//
// # SQL
//
// Your own statement checks the token in its WHERE clause and stores it
// (see Rows); Rows, or Check around the call, turns "no row changed" into
// ErrFenced.
//
// # One fence per lock
//
// The token is stored in an attribute (or column) named "fence"
// (DefaultAttribute) unless DynamoDB.WithAttribute names another (in SQL,
// your statement names the column): one per independently fenced lock. A
// semaphore's permits need one per slot (fence_0, fence_1, …: use
// WithAttribute(fmt.Sprintf("fence_%d", permit.Slot()))): every grant's
// token is larger than all of the semaphore's before it, so one fence for
// all slots would refuse the live permits with older tokens. Merging
// several fences into one write keeps their placeholders apart.
//
// # Read/write locks
//
// Every grant of a read/write lock, read or write, gets a token above all
// before it, so readers' tokens grow too. The writer fences its writes as
// a lock's holder does (one fence per lock): its token is above every
// earlier reader's and writer's, so the fence refuses any writer granted
// before the last write. A reader never writes that fence; it compares
// the fence it reads with the data against its own token: the data is
// what its lease protects only while fence < token (a writer granted after
// the reader has a larger token; tokens are never equal). A larger fence
// means a writer wrote after the reader's lease ended: drop what was read.
// A reader that writes output of its own fences it per reader slot, as a
// semaphore's permits (docs/fencing.md, Rules).
package fence

import "errors"

// DefaultAttribute is the DynamoDB attribute, or SQL column, that holds the
// largest fencing token that has written an item or row.
const DefaultAttribute = "fence"

// ErrFenced means the store refused a write because a write with a larger
// fencing token came first: the lease of the token the write carried has
// ended and another holder has taken over. Retrying with the same token is
// refused again.
var ErrFenced = errors.New("fenced off: a newer lock holder has written")
