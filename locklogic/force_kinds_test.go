package locklogic

import (
	"errors"
	"testing"
)

// TestLeaseChangedText: the three kinds' changed-lease errors, one generic
// type since issue 23, keep the words each had as its own type, and each
// is an ErrStaleToken that another kind's type does not match.
func TestLeaseChangedText(t *testing.T) {
	lock := Lock{Resource: "r", Owner: "o", FencingToken: 7}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&LeaseChangedError{Current: lock}, `the lease on "r" is now fencing token 7 of "o"`},
		{&RWLeaseChangedError{Current: RWLease{Lock: lock, Mode: Read, Slot: 3}}, `the read lease of "r" is now fencing token 7 of "o"`},
		{&RWLeaseChangedError{Current: RWLease{Lock: lock, Mode: Write}}, `the write lease of "r" is now fencing token 7 of "o"`},
		{&PermitChangedError{Current: Permit{Lock: lock, Slot: 2}}, `the permit in slot 2 of "r" is now fencing token 7 of "o"`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, ErrStaleToken) {
			t.Errorf("%v is not an ErrStaleToken", tc.err)
		}
	}
	var p *PermitChangedError
	if errors.As(error(&LeaseChangedError{Current: lock}), &p) {
		t.Error("a lock's changed lease matched a permit's")
	}
}
