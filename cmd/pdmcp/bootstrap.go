package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/internal/operator"
)

// bootstrapJSON is `pdmcp bootstrap --json`: stable, members only ever
// added.
type bootstrapJSON struct {
	ServiceID string `json:"serviceId"`
	SystemID  int64  `json:"systemId"`
	Prefix    string `json:"prefix"`
	// Out is the config.json written.
	Out string `json:"out"`
}

const bootstrapLong = `bootstrap registers this service at the Gateway as the Gateway's admin (--admin-user, the password in
--admin-password-file, mode 600), with scoped sessions, which every session pdmcp uses is; proves the
registration by signing in as the service; and writes config.json (--out; - prints it to standard output,
its paths absolute). The service's certificate and keys are generated beside it (in service/, or
--credentials-dir; with --out -, service/ in the current folder) unless given. Every input is checked, and the
Gateway reached with the admin's credentials, before anything is generated or written; config.json and
credentials already there are never overwritten.

--json prints one object (members are only ever added):
  {"serviceId", "systemId": N, "prefix", "out"}`

func newBootstrapCmd() *cobra.Command {
	var o operator.BootstrapOptions
	var asJSON, allowScoped bool
	cmd := command("bootstrap", "Register this service at the Gateway (with scoped sessions) and write config.json", func(cmd *cobra.Command) error {
		if cmd.Flags().Changed("allow-scoped") {
			fmt.Fprintln(cmd.ErrOrStderr(), "Flag --allow-scoped has been deprecated: the service is always registered with scoped sessions; leave it out")
		}
		o.Logger = loggerFrom(cmd.Context())
		if isStdout(o.ConfigOut) {
			if asJSON {
				return usageError("--json and --out - both write to standard output: give --out a file, or leave out --json")
			}
			o.Write = func(sc *gateway.ServiceConfig) error {
				b, err := json.MarshalIndent(sc, "", "  ")
				if err != nil {
					return err
				}
				return writeOutput(cmd, o.ConfigOut, append(b, '\n'), 0o600)
			}
		}
		sc, err := operator.Bootstrap(cmd.Context(), o)
		if err != nil {
			var ae *operator.AdminRefusedError
			var ie *operator.InputError
			switch {
			case errors.As(err, &ae):
				return refusedError(err)
			case errors.As(err, &ie) && (ie.FileRefused() || refusedFile(err)):
				// A file that is there and was read, and holds the
				// wrong thing or has the wrong mode: refused, as every
				// command refuses an operator's file.
				return refusedError(err)
			case errors.As(err, &ie):
				return &exitError{code: exitUsage, err: err}
			}
			return operator.GatewayWords(o.GatewayURL, err, "")
		}
		out := cmd.OutOrStdout()
		if isStdout(o.ConfigOut) {
			// Standard output holds config.json; the report goes to
			// standard error.
			out = cmd.ErrOrStderr()
		}
		if asJSON {
			return writeJSON(out, bootstrapJSON{ServiceID: sc.ServiceID, SystemID: sc.SystemID, Prefix: sc.Prefix, Out: o.ConfigOut})
		}
		fmt.Fprintf(out, "service %s registered; systemId %d; prefix %s\n", sc.ServiceID, sc.SystemID, sc.Prefix)
		fmt.Fprintf(out, "config written to %s\n", o.ConfigOut)
		fmt.Fprintln(out, "BOOTSTRAP: OK")
		return nil
	})
	cmd.Long = bootstrapLong
	cmd.Example = "  pdmcp bootstrap --endpoint https://gateway.example:8443 --trust-file gateway-ca.pem \\\n" +
		"      --admin-user admin --admin-password-file admin-pw --out config.json\n" +
		"  pdmcp bootstrap --endpoint https://gateway.example:8443 --trust-file gateway-ca.pem \\\n" +
		"      --admin-user admin --admin-password-file admin-pw --service-name pdmcp-ward --out ward/config.json --json"
	f := cmd.Flags()
	f.StringVar(&o.GatewayURL, "endpoint", "", "the Gateway's URL (https://…)")
	f.StringVar(&o.TrustFile, "trust-file", "", "PEM CA file: the only CA trusted for the Gateway")
	f.BoolVar(&o.AllowHTTPLoopback, "allow-http-loopback", false, "allow plain http to a loopback Gateway")
	f.StringVar(&o.AdminUser, "admin-user", "", "the Gateway admin user")
	f.StringVar(&o.AdminPasswordFile, "admin-password-file", "", "file holding the admin password, mode 600")
	f.StringVar(&o.ServiceName, "service-name", "pdmcp", "the service's name")
	f.StringVar(&o.ServiceCert, "service-cert", "", "the service's certificate (PEM); generated when omitted")
	f.StringVar(&o.ServiceLoginKey, "service-login-key", "", "the certificate's private key (PEM)")
	f.StringVar(&o.SenderKey, "sender-key", "", "the P-256 key the service's proofs are signed with (PEM)")
	f.StringVar(&o.DelegatorCert, "delegator-cert", "", "the delegator certificate (PEM), if your Gateway needs one")
	f.StringVar(&o.CredentialsDir, "credentials-dir", "", "where generated credentials go (default: service/ beside --out)")
	f.StringVar(&o.Prefix, "prefix", "", "the service's principal prefix (default: the Gateway chooses)")
	f.StringVar(&o.ConfigOut, "out", "", "where to write config.json (never overwritten), or - for standard output")
	aliasFlag(f, "config-out", "out", nil, "")
	// Always on: kept so old command lines run; says so when given.
	f.BoolVar(&allowScoped, "allow-scoped", true, "always on: the service is registered with scoped sessions")
	_ = f.MarkHidden("allow-scoped")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (shape in --help) instead of prose")
	return requireFlags(cmd, "endpoint", "admin-user", "admin-password-file", "out")
}
