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
	RefusalRate: 200, OpenRate: 100}

// suiteConnections is TestAbuseSuite's connection cap: it leaves 16 for
// connections not (yet) signed in, so (a) and (a') go past it.
const suiteConnections = 32

// suiteChecks are what the server does with each attack in
// TestAbuseSuite, at suiteSizes, suiteConnections and the server's
// default per-user limits. When all run at once the cap closes many
// connections before their answer, so a close is as good as a refusal.
var suiteChecks = map[Attack]func(*AttackStats) error{
	// A stalled body without a token is not held: refused at once (401,
	// the body not waited for) or, past the cap, closed.
	AttackStalledAnon: closedOr("stalled bodies without a token were all held"),
	// Connections whose headers never end, past the cap: the server closes
	// the oldest.
	AttackStalledHeaders: closedOr("no connection past the cap was closed by the server"),
	// 24 bodies held by one user, over the 16 requests in flight a user
	// may have: refused 429 (or cut off, or closed past the cap).
	AttackStalledAuthed: closedOr("one user's stalled bodies were all held", http.StatusTooManyRequests, http.StatusRequestTimeout),
	// 24 listen streams from one user, over the 8 a user may hold.
	AttackListenFlood: closedOr("one user's listen streams were all held", http.StatusTooManyRequests),
	// Junk is a clear error each time (or, while the same user's stalled
	// bodies fill their requests in flight, 429); a request without a
	// token, 401. None is answered anything else.
	AttackJunk:         answeredOnly(http.StatusBadRequest, http.StatusTooManyRequests),
	AttackRefusalFlood: answeredOnly(http.StatusUnauthorized),
}

// closedOr wants some of an attack's connections closed by the server or
// answered one of codes.
func closedOr(complaint string, codes ...int) func(*AttackStats) error {
	return func(s *AttackStats) error {
		n := s.ServerClosed
		for _, c := range codes {
			n += s.Statuses[c]
		}
		if n == 0 {
			return errors.New(complaint)
		}
		return nil
	}
}

// answeredOnly wants a flood's requests answered one of codes, at least
// one of them, and none anything else (0: the connection was closed
// before an answer, past the cap).
func answeredOnly(codes ...int) func(*AttackStats) error {
	return func(s *AttackStats) error {
		var n int64
		for _, c := range codes {
			n += s.Statuses[c]
		}
		if n == 0 || n+s.Statuses[0] != sumStatuses(s) {
			return fmt.Errorf("answered %v, want only %v", s.Statuses, codes)
		}
		return nil
	}
}

func sumStatuses(s *AttackStats) int64 {
	var n int64
	for _, v := range s.Statuses {
		n += v
	}
	return n
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
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Users: maxCallers, MaxCallers: maxCallers,
		Connections: suiteConnections})
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
