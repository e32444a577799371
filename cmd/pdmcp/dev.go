package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway/reference"
)

func newDevCmd() *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Development stack on loopback",
	}
	dev.AddCommand(newDevGatewayCmd())
	return dev
}

// newDevGatewayCmd runs the reference Gateway and key server on its own,
// with its state (SQLite, CA, certificate, admin password) in a folder that
// a second run reuses.
func newDevGatewayCmd() *cobra.Command {
	var state, listen string
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the reference Gateway and key server over TLS on 127.0.0.1",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := filepath.Join(state, "gateway")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			ca, err := devpki.LoadOrCreateCA(filepath.Join(state, "ca"), "pdmcp")
			if err != nil {
				return err
			}
			cert, key, err := ca.Issue(dir, "gateway-tls")
			if err != nil {
				return err
			}
			pwFile := filepath.Join(dir, "admin-password")
			pw, err := adminPassword(pwFile)
			if err != nil {
				return err
			}
			srv, err := reference.Serve(cmd.Context(), reference.ServeConfig{
				Config:   reference.Config{DBPath: filepath.Join(dir, "gateway.sqlite"), AdminUser: "admin", AdminPassword: pw, Logger: newLogger()},
				Addr:     listen,
				CertFile: cert, KeyFile: key,
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "gateway: %s\nca: %s\nadmin user: admin\nadmin password file: %s\n", srv.URL, ca.CertPEM, pwFile)
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	cmd.Flags().StringVar(&state, "state", ".pdmcp-dev", "the state folder (reused by a second run)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "the loopback address to serve on")
	return cmd
}

// adminPassword reads the dev admin password, or creates one (mode 600).
func adminPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	r := make([]byte, 18)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(r)
	return pw, os.WriteFile(path, []byte(pw+"\n"), 0o600)
}
