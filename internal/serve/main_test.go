package serve_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/abuse"
)

// attackerEnv, when set, makes the test binary a hostile local process
// instead of running tests (see runAttacker): "<url> <CA file>
// <kind>:<count> ...".
const attackerEnv = "PDMCP_SERVE_TEST_ATTACKER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(attackerEnv); spec != "" {
		os.Exit(runAttacker(spec))
	}
	os.Exit(m.Run())
}

// runAttacker is another process on the machine attacking the server: on
// "go" from its stdin it opens the connections of each kind:count and
// says "opened <n> failed <n>"; on "wait" it waits (bounded) until they
// have all ended and says "closed <n> of <n>": how many the server closed.
// It ends when its stdin does, closing whatever it still holds.
func runAttacker(spec string) int {
	f := strings.Fields(spec)
	if len(f) < 3 {
		fmt.Fprintln(os.Stderr, "attacker: want <url> <CA file> <kind>:<count>...")
		return 2
	}
	pem, err := os.ReadFile(f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		return 2
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	in := bufio.NewScanner(os.Stdin)
	var attacks []*abuse.Attack
	defer func() {
		for _, a := range attacks {
			a.Close()
		}
	}()
	for in.Scan() {
		switch in.Text() {
		case "go":
			opened, failed := 0, 0
			for _, kc := range f[2:] {
				name, n, _ := strings.Cut(kc, ":")
				kind, err := abuse.ParseKind(name)
				count, cerr := strconv.Atoi(n)
				if err != nil || cerr != nil {
					fmt.Fprintln(os.Stderr, "attacker: bad", kc)
					return 2
				}
				a, err := abuse.Start(context.Background(), abuse.Config{URL: f[0], RootCAs: roots, Kind: kind, Count: count})
				if err != nil {
					fmt.Fprintln(os.Stderr, "attacker:", err)
					return 1
				}
				attacks = append(attacks, a)
				opened, failed = opened+a.Opened(), failed+a.Failed()
			}
			fmt.Printf("opened %d failed %d\n", opened, failed)
		case "wait":
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			closed, opened := 0, 0
			for _, a := range attacks {
				a.Wait(ctx)
				closed, opened = closed+a.ServerClosed(), opened+a.Opened()
			}
			cancel()
			fmt.Printf("closed %d of %d\n", closed, opened)
		}
	}
	return 0
}
