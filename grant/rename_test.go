package grant

import (
	"errors"
	"testing"
	"time"
)

func TestRetryRename(t *testing.T) {
	inUse := errors.New("in use")
	other := errors.New("no such folder")
	for _, tc := range []struct {
		name      string
		failures  []error // what the tries before the last return, in order
		last      error   // what every later try returns
		wantErr   error
		wantTries int
		wantSlept time.Duration
	}{
		{"first try", nil, nil, nil, 1, 0},
		{"in use, then free", []error{inUse, inUse, inUse}, nil, nil, 4, (5 + 10 + 20) * time.Millisecond},
		{"another failure at once", []error{other}, nil, other, 1, 0},
		{"in use, then another failure", []error{inUse, other}, nil, other, 2, 5 * time.Millisecond},
		// 5+10+...+160 = 315 ms over 6 waits, then 200 ms a wait: past
		// 2 s after 15 waits (2,115 ms), so the 16th try is the last.
		{"in use for good", nil, inUse, inUse, 16, 2115 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			var slept time.Duration
			err := retryRename(func() error {
				tries++
				if tries <= len(tc.failures) {
					return tc.failures[tries-1]
				}
				return tc.last
			}, func(err error) bool { return errors.Is(err, inUse) }, func(d time.Duration) { slept += d })
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
			if tries != tc.wantTries || slept != tc.wantSlept {
				t.Errorf("%d tries, slept %v; want %d, %v", tries, slept, tc.wantTries, tc.wantSlept)
			}
			if slept > renameRetryFor+200*time.Millisecond {
				t.Errorf("slept %v, past the bound %v", slept, renameRetryFor)
			}
		})
	}
}
