package fence

import "fmt"

// Rows returns ErrFenced when n, the rows a fenced statement changed, is 0,
// and nil when it is 1 or more. The statement is your own, in this pattern
// (placeholders in your driver's style; the token is the same value twice):
//
//	UPDATE payments SET payee = :payee, amount = :amount, fence = :token
//	 WHERE id = :id AND (fence IS NULL OR fence <= :token)
//
// 0 rows also means no row matched the rest of the WHERE clause (no such
// id): insert the row first, or upsert with the same check in the conflict
// clause (INSERT … ON CONFLICT (id) DO UPDATE SET … WHERE payments.fence IS
// NULL OR payments.fence <= excluded.fence). MySQL counts the rows it
// changed, not those it matched, unless the connection asks for found rows
// (go-sql-driver/mysql: clientFoundRows=true); without that, rewriting a
// row with the values it holds counts 0.
func Rows(n int64) error {
	switch {
	case n > 0:
		return nil
	case n == 0:
		return ErrFenced
	default:
		return fmt.Errorf("fence: %d rows changed: the driver cannot count them", n)
	}
}

// Result is what a statement's result must offer for Check:
// database/sql.Result has it.
type Result interface {
	RowsAffected() (int64, error)
}

// Check returns err when the statement failed, and otherwise Rows of the
// rows it changed, so that it can wrap a call:
//
//	err := fence.Check(db.ExecContext(ctx, query, args...))
//	if errors.Is(err, fence.ErrFenced) { … a newer holder has written … }
func Check(r Result, err error) error {
	if err != nil {
		return err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: rows changed: %w", err)
	}
	return Rows(n)
}
