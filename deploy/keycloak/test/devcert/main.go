// Command devcert issues the TLS certificate a test Keycloak serves, from
// the development CA in a folder (made there when missing), and can name
// free loopback ports. It is a helper of keycloak.sh, not a tool for
// operators: a real provider brings its own PKI.
//
//	go run ./deploy/keycloak/test/devcert -ca DIR -out DIR -name keycloak-tls
//	go run ./deploy/keycloak/test/devcert -ports 2
package main

import (
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/pdmcp/pdmcp/auth/devpki"
)

func main() {
	caDir := flag.String("ca", "", "the CA folder (ca.pem, ca-key.pem; made when missing)")
	out := flag.String("out", "", "where to write <name>.pem and <name>-key.pem")
	name := flag.String("name", "keycloak-tls", "the certificate's file name and common name")
	ports := flag.Int("ports", 0, "print this many free loopback TCP ports, one a line, and exit")
	flag.Parse()
	if err := run(*caDir, *out, *name, *ports); err != nil {
		fmt.Fprintln(os.Stderr, "devcert:", err)
		os.Exit(1)
	}
}

func run(caDir, out, name string, ports int) error {
	if ports > 0 {
		// All listeners stay open until every port is chosen, so the ports
		// differ; they may be taken by someone else before they are used.
		var lns []net.Listener
		defer func() {
			for _, ln := range lns {
				ln.Close()
			}
		}()
		for range ports {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			lns = append(lns, ln)
			fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		}
		return nil
	}
	if caDir == "" || out == "" {
		return fmt.Errorf("-ca and -out are required")
	}
	ca, err := devpki.LoadOrCreateCA(caDir, "pdmcp dev")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	cert, key, err := ca.Issue(out, name)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n%s\n%s\n", ca.CertPEM, cert, key)
	return nil
}
