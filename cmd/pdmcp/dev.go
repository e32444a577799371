package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/auth/devidp"
	"github.com/pdmcp/pdmcp/internal/devstack"
)

func newDevCmd() *cobra.Command {
	var (
		state, provider, keycloakInfo string
		lifetime                      time.Duration
	)
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole stack on loopback: Gateway, key server, OpenID provider and the MCP server over HTTPS",
		Long: "dev runs a development CA, the reference Gateway and key server, a development OpenID provider with " +
			"three users (alice: every document, bob: some, carol: none), seeds synthetic documents, and serves the " +
			"MCP server over Streamable HTTP on 127.0.0.1 with TLS. Its state is kept in --state and reused. " +
			"Ctrl-C revokes every session and stops everything. With --provider keycloak the provider is a Keycloak " +
			"that deploy/keycloak/test/keycloak.sh started with the same --state and deploy/keycloak's realm: the " +
			"users are made there and the Gateway is bound to it.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lifetime <= 0 {
				return fmt.Errorf("--access-token-lifetime %s: it must be positive", lifetime)
			}
			opts := devstack.Options{State: state, Version: versionString(), Logger: loggerFrom(cmd.Context()),
				AccessTokenLifetime: lifetime, Tracing: otelEnviron(os.Environ()),
				Ready: func(info *devstack.Info) { printDevInfo(cmd.OutOrStdout(), state, info) }}
			switch provider {
			case "dev":
				if cmd.Flags().Changed("keycloak-info") {
					return fmt.Errorf("--keycloak-info needs --provider keycloak")
				}
			case "keycloak":
				if cmd.Flags().Changed("access-token-lifetime") {
					return fmt.Errorf("--access-token-lifetime needs --provider dev: Keycloak's realm sets its own")
				}
				opts.Keycloak = keycloakInfo
				if opts.Keycloak == "" {
					opts.Keycloak = filepath.Join(state, "keycloak", "keycloak.json")
				}
			default:
				return fmt.Errorf("--provider is %q: it is dev (the built-in development provider) or keycloak", provider)
			}
			return devstack.Run(cmd.Context(), opts)
		},
	}
	dev.PersistentFlags().StringVar(&state, "state", ".pdmcp-dev", "the state folder (reused by a second run)")
	dev.Flags().StringVar(&provider, "provider", "dev", "the OpenID provider: dev (built in) or keycloak (started by deploy/keycloak/test/keycloak.sh)")
	dev.Flags().StringVar(&keycloakInfo, "keycloak-info", "", "with --provider keycloak: the keycloak.json keycloak.sh wrote (default <state>/keycloak/keycloak.json)")
	dev.Flags().DurationVar(&lifetime, "access-token-lifetime", devidp.DefaultAccessTokenLifetime,
		"with --provider dev: lifetime of users' access tokens (hosts refresh them with their refresh token; shorter values test that)")
	_ = dev.RegisterFlagCompletionFunc("provider", completeWords("dev", "keycloak"))
	dev.AddCommand(newDevGatewayCmd(&state), newDevTokenCmd(&state))
	return dev
}

func newDevTokenCmd(state *string) *cobra.Command {
	return &cobra.Command{
		Use:   "token USER",
		Short: "Print an access token for a development user (authorization code + PKCE, as a host does)",
		Args: func(c *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return usageError("dev token: name the user: %s", orList(devstack.UserNames()))
			case 1:
				return nil
			}
			return usageError("dev token: name one user, not %d (%s)", len(args), strings.Join(args, " "))
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return devstack.UserNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := devstack.Token(cmd.Context(), *state, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
}

// printDevInfo tells a person how to reach the stack from each host.
func printDevInfo(w io.Writer, state string, i *devstack.Info) {
	self := "go run ./cmd/pdmcp"
	if exe, err := os.Executable(); err == nil && !strings.Contains(exe, "go-build") {
		self = exe
	}
	fmt.Fprintf(w, `
pdmcp dev is running.

  MCP URL:        %[1]s
  CA to trust:    %[2]s
  OpenID issuer:  %[3]s
  users:          alice (every document), bob (some), carol (none), patient and doctor (hand-off steps); passwords in %[4]s
  state:          %[9]s
  file tools:     encrypt_file and decrypt_file work in %[10]s (try %[11]s)

Claude Code:
  # every claude process needs the CA: run these, then claude, in one shell
  export NODE_EXTRA_CA_CERTS=%[2]s
  claude mcp add --transport http --client-id %[5]s --callback-port %[6]d %[7]s %[1]s

Codex (~/.codex/config.toml; start codex with SSL_CERT_FILE=%[2]s):
  [mcp_servers.%[7]s]
  url = "%[1]s"
  scopes = ["openid"]
  [mcp_servers.%[7]s.oauth]
  client_id = "%[5]s"
  callback_port = %[6]d

curl (a token for alice; initialize; then tools/list on the session):
  TOKEN=$(%[8]s dev token alice --state %[9]s)
  H=(--cacert %[2]s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
  SID=$(curl -s -o /dev/null -D - "${H[@]}" -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}' %[1]s | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
  H+=(-H "Mcp-Session-Id: $SID" -H 'Mcp-Protocol-Version: 2025-11-25')
  curl -s "${H[@]}" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' %[1]s
  curl -s "${H[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' %[1]s

Ctrl-C stops everything and revokes every session.
`, i.MCPURL, i.CAFile, i.Issuer, devstack.InfoPath(state), i.HostClientID, i.CallbackPort, i.ServerName, self, state,
		i.FileRoot, devstack.SampleFile)
}

// newDevGatewayCmd runs the reference Gateway and key server on its own,
// with its state (SQLite, CA, certificate, admin password, port) in a folder
// that a second run reuses.
func newDevGatewayCmd(state *string) *cobra.Command {
	var port int
	cmd := command("gateway", "Run the reference Gateway and key server over TLS on 127.0.0.1", func(cmd *cobra.Command) error {
		if port < 0 || port > 65535 {
			return fmt.Errorf("--port %d: a port is 1 to 65535 (0: the last run's)", port)
		}
		return devstack.RunGateway(cmd.Context(), *state, port, loggerFrom(cmd.Context()), func(g devstack.GatewayInfo) {
			fmt.Fprintf(cmd.OutOrStdout(), "gateway: %s\nca: %s\nadmin user: admin\nadmin password file: %s\n", g.URL, g.CAFile, g.PasswordFile)
		})
	})
	cmd.Flags().IntVar(&port, "port", 0, "the loopback port to serve on, failing when it is taken (0: the last run's, any free one the first time)")
	return cmd
}

// otelEnviron is the OTEL_* entries of environ: tracing's configuration,
// the only part of the environment dev hands its server.
func otelEnviron(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}
