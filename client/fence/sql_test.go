package fence_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/ft288/locks/client/fence"
)

func TestRows(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    int64
		want error
	}{
		{"OneRow", 1, nil},
		{"SeveralRows", 3, nil},
		{"ErrFenced", 0, fence.ErrFenced},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fence.Rows(tt.n); !errors.Is(got, tt.want) || (tt.want == nil) != (got == nil) {
				t.Errorf("Rows(%d): got %v, want %v", tt.n, got, tt.want)
			}
		})
	}
	t.Run("ErrUncounted", func(t *testing.T) {
		if err := fence.Rows(-1); err == nil || errors.Is(err, fence.ErrFenced) {
			t.Errorf("Rows(-1): got %v, want an error other than ErrFenced", err)
		}
	})
}

// result is a statement's result as database/sql returns it.
type result struct {
	n   int64
	err error
}

func (r result) LastInsertId() (int64, error) { return 0, errors.New("unsupported") }
func (r result) RowsAffected() (int64, error) { return r.n, r.err }

var _ sql.Result = result{}

func TestCheck(t *testing.T) {
	errExec := errors.New("connection reset")
	errCount := errors.New("no count")
	for _, tt := range []struct {
		name string
		r    sql.Result
		err  error
		want error
	}{
		{"OneRow", result{n: 1}, nil, nil},
		{"ErrFenced", result{n: 0}, nil, fence.ErrFenced},
		{"ErrExec", nil, errExec, errExec},
		{"ErrRowsAffected", result{err: errCount}, nil, errCount},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := fence.Check(tt.r, tt.err)
			if !errors.Is(got, tt.want) || (tt.want == nil) != (got == nil) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if tt.want != fence.ErrFenced && errors.Is(got, fence.ErrFenced) {
				t.Errorf("got %v, which matches ErrFenced; want it not to", got)
			}
		})
	}
}
