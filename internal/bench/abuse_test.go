package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// suiteSizes are the abuse suite's sizes in TestAbuseSuite: each attack
// big enough to be one, small enough for seconds.
var suiteSizes = AbuseSizes{StalledAnon: 48, StalledHeader: 48, StalledAuthed: 24, Listen: 24, JunkRate: 50, RefusalConns: 2,
	RefusalRate: 200, OpenRate: 400}

// suiteChecks are what the server answers each attack in TestAbuseSuite,
// at suiteSizes and the server's default per-user limits.
var suiteChecks = map[Attack]func(*AttackStats) error{
	// 24 bodies held by one user, over the 16 requests in flight a user
	// may have: the rest are refused.
	AttackStalledAuthed: func(s *AttackStats) error {
		if s.Statuses[http.StatusTooManyRequests] == 0 {
			return errors.New("no stalled body was refused 429 past the per-user requests in flight")
		}
		return nil
	},
	// 24 listen streams from one user, over the 8 a user may hold.
	AttackListenFlood: func(s *AttackStats) error {
		if s.Statuses[http.StatusTooManyRequests] == 0 {
			return errors.New("no listen stream was refused 429 past the per-user streams")
		}
		return nil
	},
	// Junk is a clear error each time (or, while the same user's stalled
	// bodies fill their requests in flight, 429); a request without a
	// token, 401.
	AttackJunk:         answeredOnly(1, http.StatusBadRequest, http.StatusTooManyRequests),
	AttackRefusalFlood: answeredOnly(suiteSizes.RefusalConns, http.StatusUnauthorized),
}

// answeredOnly wants every request of a flood over conns connections
// answered one of codes, but those in flight as the stats are read.
func answeredOnly(conns int, codes ...int) func(*AttackStats) error {
	return func(s *AttackStats) error {
		var n int64
		for _, c := range codes {
			n += s.Statuses[c]
		}
		if n == 0 || n < s.Requests-int64(conns) {
			return fmt.Errorf("%d of %d requests answered %v", n, s.Requests, codes)
		}
		return nil
	}
}

// TestAbuseSuite is the abuse suite (issue 31, item 9): each attack, and
// then all of them at once, runs briefly against a stack whose Gateway
// session pool is full, while alice (a signed-in reader, user 0) reads.
// Every one of her reads must succeed, a user's new connection must get
// through, and no Gateway session may be minted or revoked while the
// attack runs:
// the pool's sessions, alice's among them, are kept, whatever carol (who
// may read nothing) sends. Run alone: .ci/suites abuse.
func TestAbuseSuite(t *testing.T) {
	const maxCallers, reads = 4, 8
	ctx := context.Background()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: maxCallers, MaxCallers: maxCallers})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	target, err := st.AbuseTarget(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pool is filled: alice and maxCallers-1 others read once.
	sessions := make([]*mcp.ClientSession, maxCallers)
	for i := range sessions {
		if sessions[i], err = st.ConnectUser(ctx, i, SessionProtocol); err != nil {
			t.Fatal(err)
		}
		defer sessions[i].Close()
		if err := callOK(ctx, sessions[i], "read_protected_document", readArgs()); err != nil {
			t.Fatal(err)
		}
	}
	alice := sessions[0]
	newcomer, err := st.Token(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var scenarios [][]Attack
	for _, a := range Attacks() {
		scenarios = append(scenarios, []Attack{a})
	}
	scenarios = append(scenarios, Attacks())
	for _, attacks := range scenarios {
		name := string(attacks[0])
		if len(attacks) > 1 {
			name = "all-at-once"
		}
		t.Run(name, func(t *testing.T) {
			before := st.GW.Gateway.Counts()
			var running []*RunningAttack
			defer func() {
				for _, a := range running {
					t.Log(a.Stop())
				}
			}()
			for _, k := range attacks {
				a, err := StartAttack(ctx, target, k, suiteSizes)
				if err != nil {
					t.Fatal(err)
				}
				running = append(running, a)
			}
			for _, a := range running {
				if !a.UnderWay(ctx, suiteSizes, 30*time.Second) {
					t.Fatalf("the attack never got under way: %v", a.Stats())
				}
			}
			for k := range reads {
				if err := callOK(ctx, alice, "read_protected_document", readArgs()); err != nil {
					t.Errorf("alice's read %d during the attack: %v", k+1, err)
				}
			}
			// A user's new connection gets through too.
			cs, err := st.Connect(ctx, st.MCPURL, newcomer, StatelessProtocol)
			if err != nil {
				t.Fatalf("a new connection during the attack: %v", err)
			}
			defer cs.Close()
			if err := callOK(ctx, cs, "read_protected_document", readArgs()); err != nil {
				t.Errorf("a read on a new connection during the attack: %v", err)
			}
			after := st.GW.Gateway.Counts()
			if m, r := after[api.RouteScoped]-before[api.RouteScoped], after[api.RouteRevoke]-before[api.RouteRevoke]; m != 0 || r != 0 {
				t.Errorf("%d Gateway sessions minted and %d revoked while the attack ran: the pool's sessions were not kept", m, r)
			}
			for _, a := range running {
				s := a.Stats()
				if s.Requests == 0 || s.Opened == 0 {
					t.Errorf("the attack did nothing: %v", s)
				}
				if check := suiteChecks[s.Attack]; check != nil {
					if err := check(s); err != nil {
						t.Errorf("%v: %v", s, err)
					}
				}
			}
		})
	}
	// And after every attack has stopped, the server still serves.
	if err := callOK(ctx, alice, "read_protected_document", readArgs()); err != nil {
		t.Errorf("alice's read after the suite: %v", err)
	}
}
