package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/internal/operator"
)

func newBootstrapCmd() *cobra.Command {
	var o operator.BootstrapOptions
	cmd := command("bootstrap", "Register this service at the Gateway (with scoped sessions) and write config.json", func(cmd *cobra.Command) error {
		sc, err := operator.Bootstrap(cmd.Context(), o)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "service %s registered; systemId %d; prefix %s\n", sc.ServiceID, sc.SystemID, sc.Prefix)
		fmt.Fprintf(out, "config written to %s\n", o.ConfigOut)
		fmt.Fprintln(out, "BOOTSTRAP: OK")
		return nil
	})
	f := cmd.Flags()
	f.StringVar(&o.GatewayURL, "endpoint", "", "the Gateway's URL (https://…)")
	f.StringVar(&o.TrustFile, "trust-file", "", "PEM CA file: the only CA trusted for the Gateway")
	f.BoolVar(&o.AllowHTTPLoopback, "allow-http-loopback", false, "allow plain http to a loopback Gateway")
	f.StringVar(&o.AdminUser, "admin-user", "", "the Gateway admin user")
	f.StringVar(&o.AdminPasswordFile, "admin-password-file", "", "file holding the admin password (mode 600)")
	f.StringVar(&o.ServiceName, "service-name", "pdmcp", "the service's name")
	f.StringVar(&o.ServiceCert, "service-cert", "", "the service's certificate (PEM); generated when omitted")
	f.StringVar(&o.ServiceLoginKey, "service-login-key", "", "the certificate's private key (PEM)")
	f.StringVar(&o.SenderKey, "sender-key", "", "the P-256 key the service's proofs are signed with (PEM)")
	f.StringVar(&o.DelegatorCert, "delegator-cert", "", "the delegator certificate (PEM), if your Gateway needs one")
	f.StringVar(&o.CredentialsDir, "credentials-dir", "", "where generated credentials go (default: beside the config)")
	f.StringVar(&o.Prefix, "prefix", "", "the service's principal prefix (default: the Gateway chooses)")
	f.BoolVar(&o.AllowScoped, "allow-scoped", false, "register with the scoped operation (required)")
	f.StringVar(&o.ConfigOut, "config-out", "", "where to write config.json")
	return cmd
}
