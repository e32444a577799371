package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
		asJSON                        bool
	)
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole stack on loopback: Gateway, key server, OpenID provider and the MCP server over HTTPS",
		Long: "dev runs a development CA, the reference Gateway and key server, a development OpenID provider with\n" +
			"five users (alice: every document, bob: some, carol: none; patient and doctor: the hand-off steps),\n" +
			"seeds synthetic documents, and serves the MCP server over Streamable HTTP on 127.0.0.1 with TLS. Its\n" +
			"state is kept in --state and reused. Ctrl-C revokes every session and stops everything. With\n" +
			"--provider keycloak the provider is a Keycloak that deploy/keycloak/test/keycloak.sh started with the\n" +
			"same --state and deploy/keycloak's realm: the users are made there and the Gateway is bound to it.\n\n" +
			"Once everything serves, dev prints how to reach it from Claude Code, Codex and curl; with --json it\n" +
			"prints one JSON object instead, and keeps running:\n" +
			`  {"mcpUrl","caFile","issuer","users":["alice",…],"state","infoFile","fileRoot","hostClientId",` + "\n" +
			`   "callbackPort","serverName"}` + "\n" +
			"(members are only ever added; the users' passwords are in infoFile, dev.json).",
		Example: "  pdmcp dev\n" +
			"  pdmcp dev --state /tmp/pdmcp-dev --json\n" +
			"  pdmcp dev --access-token-lifetime 2m\n" +
			"  pdmcp dev --provider keycloak --state .pdmcp-dev\n" +
			"  pdmcp dev token alice",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lifetime <= 0 {
				return usageError("pdmcp dev: --access-token-lifetime %s: a lifetime must be more than zero (e.g. 10m)", lifetime)
			}
			out := cmd.OutOrStdout()
			opts := devstack.Options{State: state, Version: versionString(), Logger: loggerFrom(cmd.Context()),
				AccessTokenLifetime: lifetime, Tracing: otelEnviron(os.Environ()),
				Ready: func(info *devstack.Info) {
					if asJSON {
						_ = writeJSON(out, devJSON(state, info))
						return
					}
					printDevInfo(out, devSelf(), state, info)
				}}
			switch provider {
			case "dev":
				if cmd.Flags().Changed("keycloak-info") {
					return usageError("pdmcp dev: --keycloak-info %s is for --provider keycloak (the provider is dev)", keycloakInfo)
				}
			case "keycloak":
				if cmd.Flags().Changed("access-token-lifetime") {
					return usageError("pdmcp dev: --access-token-lifetime %s is for --provider dev: Keycloak's realm sets its own", lifetime)
				}
				opts.Keycloak = keycloakInfo
				if opts.Keycloak == "" {
					opts.Keycloak = filepath.Join(state, "keycloak", "keycloak.json")
				}
			default:
				return usageError("pdmcp dev: --provider %q: use dev (the built-in development provider) or keycloak", provider)
			}
			return devstack.Run(cmd.Context(), opts)
		},
	}
	dev.Flags().BoolVar(&asJSON, "json", false, "once everything serves, print where it is as one JSON object (see above) instead of the instructions")
	dev.PersistentFlags().StringVar(&state, "state", ".pdmcp-dev", "the state folder (reused by a second run)")
	dev.Flags().StringVar(&provider, "provider", "dev", "the OpenID provider: dev (built in) or keycloak (started by deploy/keycloak/test/keycloak.sh)")
	dev.Flags().StringVar(&keycloakInfo, "keycloak-info", "", "with --provider keycloak: the keycloak.json keycloak.sh wrote (default <state>/keycloak/keycloak.json)")
	dev.Flags().DurationVar(&lifetime, "access-token-lifetime", devidp.DefaultAccessTokenLifetime,
		"with --provider dev: lifetime of users' access tokens (hosts refresh them with their refresh token; shorter values test that)")
	_ = dev.RegisterFlagCompletionFunc("provider", completeWords("dev", "keycloak"))
	_ = dev.MarkPersistentFlagDirname("state")
	completeFiles(dev, "json", "keycloak-info")
	dev.AddCommand(newDevGatewayCmd(&state), newDevTokenCmd(&state))
	return dev
}

func newDevTokenCmd(state *string) *cobra.Command {
	return &cobra.Command{
		Use:   "token USER",
		Short: "Print an access token for a development user (authorization code + PKCE, as a host does)",
		Long: "token signs USER in at the running stack's OpenID provider, as a host does (authorization code\n" +
			"with PKCE), and prints the access token alone, for curl's Authorization header. The stack must be\n" +
			"running with the same --state.",
		Example: "  pdmcp dev token alice\n" +
			"  TOKEN=$(pdmcp dev token bob --state /tmp/pdmcp-dev)",
		Args: func(c *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return usageError("pdmcp dev token: name the user: %s", orList(devstack.UserNames()))
			case 1:
				return nil
			}
			return usageError("pdmcp dev token: name one user, not %d (%s)", len(args), strings.Join(args, " "))
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return devstack.UserNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(devstack.UserNames(), args[0]) {
				return usageError("pdmcp dev token: %q is not a development user: use %s", args[0], orList(devstack.UserNames()))
			}
			info, err := devstack.LoadInfo(*state)
			if err != nil {
				return err
			}
			tok, err := devstack.Token(cmd.Context(), *state, args[0])
			if unreachable(err) {
				return &exitError{code: exitUnreachable, err: fmt.Errorf("pdmcp dev token: the OpenID provider at %s did not answer: %s (is `pdmcp dev --state %s` running?)",
					info.Issuer, dialReason(err), shellQuote(*state))}
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
}

// devInfoJSON is what dev --json prints once the stack serves. Its shape is
// stable: members are only ever added.
type devInfoJSON struct {
	MCPURL       string   `json:"mcpUrl"`
	CAFile       string   `json:"caFile"`
	Issuer       string   `json:"issuer"`
	Users        []string `json:"users"`
	State        string   `json:"state"`
	InfoFile     string   `json:"infoFile"`
	FileRoot     string   `json:"fileRoot"`
	HostClientID string   `json:"hostClientId"`
	CallbackPort int      `json:"callbackPort"`
	ServerName   string   `json:"serverName"`
}

// devJSON is i as dev --json prints it: the users by name only (their
// passwords stay in dev.json).
func devJSON(state string, i *devstack.Info) devInfoJSON {
	users := make([]string, 0, len(i.Users))
	for _, u := range i.Users {
		users = append(users, u.Name)
	}
	return devInfoJSON{MCPURL: i.MCPURL, CAFile: i.CAFile, Issuer: i.Issuer, Users: users, State: state,
		InfoFile: devstack.InfoPath(state), FileRoot: i.FileRoot, HostClientID: i.HostClientID,
		CallbackPort: i.CallbackPort, ServerName: i.ServerName}
}

// devSelf is how the printed lines run pdmcp again: this executable
// (shell-quoted), or `go run ./cmd/pdmcp` for one go run built.
func devSelf() string {
	if exe, err := os.Executable(); err == nil && !strings.Contains(exe, "go-build") {
		return shellQuote(exe)
	}
	return "go run ./cmd/pdmcp"
}

// printDevInfo tells a person how to reach the stack from each host. self
// runs pdmcp in a shell (devSelf); every path and URL in a shell line is
// quoted, so a state folder with a space or a quote pastes as it is.
func printDevInfo(w io.Writer, self, state string, i *devstack.Info) {
	q := shellQuote
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
  export NODE_EXTRA_CA_CERTS=%[12]s
  claude mcp add --transport http --client-id %[13]s --callback-port %[6]d %[14]s %[15]s

Codex (~/.codex/config.toml; start codex with SSL_CERT_FILE=%[12]s):
  [mcp_servers.%[7]s]
  url = "%[1]s"
  scopes = ["openid"]
  [mcp_servers.%[7]s.oauth]
  client_id = "%[5]s"
  callback_port = %[6]d

curl (a token for alice; initialize; then tools/list on the session):
  TOKEN=$(%[8]s dev token alice --state %[16]s)
  H=(--cacert %[12]s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
  SID=$(curl -s -o /dev/null -D - "${H[@]}" -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}' %[15]s | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
  H+=(-H "Mcp-Session-Id: $SID" -H 'Mcp-Protocol-Version: 2025-11-25')
  curl -s "${H[@]}" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' %[15]s
  curl -s "${H[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' %[15]s

Ctrl-C stops everything and revokes every session.
`, i.MCPURL, i.CAFile, i.Issuer, devstack.InfoPath(state), i.HostClientID, i.CallbackPort, i.ServerName, self, state,
		i.FileRoot, devstack.SampleFile, q(i.CAFile), q(i.HostClientID), q(i.ServerName), q(i.MCPURL), q(state))
}

// newDevGatewayCmd runs the reference Gateway and key server on its own,
// with its state (SQLite, CA, certificate, admin password, port) in a folder
// that a second run reuses.
func newDevGatewayCmd(state *string) *cobra.Command {
	var port int
	var asJSON bool
	cmd := command("gateway", "Run the reference Gateway and key server over TLS on 127.0.0.1", func(cmd *cobra.Command) error {
		if port < 0 || port > 65535 {
			return usageError("pdmcp dev gateway: --port %d: a port is 1 to 65535 (0: the last run's)", port)
		}
		return devstack.RunGateway(cmd.Context(), *state, port, loggerFrom(cmd.Context()), func(g devstack.GatewayInfo) {
			printGatewayInfo(cmd.OutOrStdout(), g, asJSON)
		})
	})
	cmd.Long = "gateway runs the reference Gateway and key server alone, over TLS on 127.0.0.1, with its state\n" +
		"(SQLite, CA, certificate, admin password, port) in --state, reused by a second run; pdmcp bootstrap\n" +
		"takes it from there. Once it serves it prints its URL, CA file, admin user and the admin password's\n" +
		"file; with --json one JSON object {\"gatewayUrl\",\"caFile\",\"adminUser\",\"adminPasswordFile\"}\n" +
		"(members are only ever added). It runs until Ctrl-C."
	cmd.Example = "  pdmcp dev gateway --state /tmp/gw\n" +
		"  pdmcp dev gateway --state /tmp/gw --port 8443 --json"
	cmd.Flags().IntVar(&port, "port", 0, "the loopback port to serve on, failing when it is taken (0: the last run's, any free one the first time)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print where it serves as one JSON object (see above)")
	return cmd
}

// gatewayInfoJSON is what dev gateway --json prints; members are only ever
// added.
type gatewayInfoJSON struct {
	GatewayURL        string `json:"gatewayUrl"`
	CAFile            string `json:"caFile"`
	AdminUser         string `json:"adminUser"`
	AdminPasswordFile string `json:"adminPasswordFile"`
}

// printGatewayInfo says where a development Gateway serves.
func printGatewayInfo(w io.Writer, g devstack.GatewayInfo, asJSON bool) {
	if asJSON {
		_ = writeJSON(w, gatewayInfoJSON{GatewayURL: g.URL, CAFile: g.CAFile, AdminUser: "admin", AdminPasswordFile: g.PasswordFile})
		return
	}
	fmt.Fprintf(w, "gateway: %s\nca: %s\nadmin user: admin\nadmin password file: %s\n", g.URL, g.CAFile, g.PasswordFile)
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
