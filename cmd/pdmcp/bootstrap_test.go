package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/gateway/reference"
	"github.com/pdmcp/pdmcp/gateway/reference/reftest"
)

// bootstrapArgs are a correct bootstrap against env into dir.
type bootstrapArgs struct {
	endpoint, trust, passwordFile, name, prefix string
}

func (a bootstrapArgs) args(dir string) []string {
	out := []string{"bootstrap", "--endpoint", a.endpoint, "--trust-file", a.trust, "--admin-user", reftest.AdminUser,
		"--admin-password-file", a.passwordFile, "--out", filepath.Join(dir, "config.json"),
		"--service-name", a.name}
	if a.prefix != "" {
		out = append(out, "--prefix", a.prefix)
	}
	return out
}

// leftBehind lists what a failed bootstrap left in dir: anything but the
// (empty) credentials folder.
func leftBehind(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || (d.IsDir() && rel == "service") || strings.HasPrefix(rel, "fixture") {
			return nil
		}
		left = append(left, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestBootstrapFailuresCanBeRetried is scenario 3 of issue 33: a bootstrap
// with a bad input, refused admin credentials, or a registration the
// Gateway refuses fails with a message naming the cause and leaves nothing
// behind (no service/pdmcp-*.pem, no config.json), so the corrected run
// in the same folder succeeds. Input mistakes reach no registration.
func TestBootstrapFailuresCanBeRetried(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	for i, c := range []struct {
		name     string
		break_   func(a *bootstrapArgs, dir string)
		code     int
		want     string
		register bool // the failure comes from the registration itself
	}{
		{"missing trust file", func(a *bootstrapArgs, dir string) { a.trust = filepath.Join(dir, "fixture-missing.pem") },
			exitUsage, "bootstrap: --trust-file: ", false},
		{"trust file not a CA", func(a *bootstrapArgs, dir string) { a.trust = issuedLeaf(t, dir) }, exitRefused, "holds no CA certificate", false},
		{"trust file not PEM", func(a *bootstrapArgs, dir string) {
			a.trust = writeFixture(t, dir, "fixture-trust.pem", "not a certificate\n", 0o600)
		}, exitRefused, "holds no PEM certificate", false},
		{"wrong admin password", func(a *bootstrapArgs, dir string) {
			a.passwordFile = writeFixture(t, dir, "fixture-pw", "wrong-password\n", 0o600)
		}, exitRefused, "did not accept --admin-user " + reftest.AdminUser + " with the password in ", false},
		{"admin password file readable by others", func(a *bootstrapArgs, dir string) {
			a.passwordFile = writeFixture(t, dir, "fixture-pw", reftest.AdminPassword+"\n", 0o644)
		}, exitRefused, "fixture-pw has mode 0644: group and others must have no access (chmod 600)", false},
		{"missing admin password file", func(a *bootstrapArgs, dir string) { a.passwordFile = filepath.Join(dir, "fixture-nope") },
			exitUsage, "--admin-password-file", false},
		{"empty admin password file", func(a *bootstrapArgs, dir string) { a.passwordFile = writeFixture(t, dir, "fixture-pw", "\n", 0o600) },
			exitRefused, "fixture-pw is empty: it should hold the secret on its first line", false},
		{"URL without a host", func(a *bootstrapArgs, _ string) { a.endpoint = "https:///" }, exitUsage, "not an absolute URL with a host", false},
		{"URL with no server", func(a *bootstrapArgs, _ string) { a.endpoint = "https://127.0.0.1:1" }, exitUnreachable,
			"bootstrap: the Gateway at https://127.0.0.1:1 did not answer: ", false},
		{"bad service name", func(a *bootstrapArgs, _ string) { a.name = "bad name" }, exitUsage, "--service-name", false},
		{"registration refused", func(a *bootstrapArgs, _ string) { a.prefix = "bad prefix" }, exitFailure, "were removed", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			good := bootstrapArgs{endpoint: env.URL, trust: env.CAFile, passwordFile: env.AdminPasswordFile,
				name: "retry" + string(rune('a'+i))}
			bad := good
			c.break_(&bad, dir)
			registrations := env.Gateway.Count(api.RouteAdminRegisterService)
			code, out, stderr := runCLI(t, bad.args(dir)...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Fatalf("want exit %d saying %q; exit %d\nstdout %s\nstderr %s", c.code, c.want, code, out, stderr)
			}
			if c.code == exitUnreachable && strings.Contains(stderr, "refused "+api.CodeUnreachable) {
				t.Errorf("a Gateway that did not answer is called a refusal: %s", stderr)
			}
			// Running bootstrap, it is not told to run bootstrap.
			if strings.Contains(stderr, "operator's bootstrap") {
				t.Errorf("the refusal sends the operator to bootstrap: %s", stderr)
			}
			if left := leftBehind(t, dir); len(left) > 0 {
				t.Fatalf("the failed bootstrap left %v", left)
			}
			if n := env.Gateway.Count(api.RouteAdminRegisterService) - registrations; c.register != (n == 1) || n > 1 {
				t.Errorf("%d registrations sent", n)
			}
			code, out, stderr = runCLI(t, good.args(dir)...)
			if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "BOOTSTRAP: OK") {
				t.Fatalf("the corrected retry: exit %d: %s%s", code, out, stderr)
			}
		})
	}
}

// TestBootstrapNeverRemovesAnEarlierRunsFiles: credentials an earlier run
// left are refused before anything is sent, named, and left as they were.
func TestBootstrapNeverRemovesAnEarlierRunsFiles(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "service"), 0o700); err != nil {
		t.Fatal(err)
	}
	earlier := writeFixture(t, filepath.Join(dir, "service"), "pdmcp-cert.pem", "an earlier run's\n", 0o600)
	a := bootstrapArgs{endpoint: env.URL, trust: env.CAFile, passwordFile: env.AdminPasswordFile, name: "pdmcp"}
	before := env.Gateway.Counts()
	cmd := pdmcpCmd(t, a.args(dir)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), earlier+" exists") {
		t.Fatalf("err %v, stderr %s", err, stderr.String())
	}
	if b, _ := os.ReadFile(earlier); string(b) != "an earlier run's\n" {
		t.Fatalf("the earlier file now holds %q", b)
	}
	if after := env.Gateway.Counts(); after[api.RouteAdminRegisterService] != before[api.RouteAdminRegisterService] {
		t.Error("a registration was sent")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "service"))
	if len(entries) != 1 {
		t.Fatalf("the credentials folder holds %d entries, want the earlier file only", len(entries))
	}
	a.name = "pdmcp-second"
	if out := run(t, a.args(dir)...); !strings.Contains(out, "BOOTSTRAP: OK") {
		t.Fatal(out)
	}
}

func writeFixture(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// issuedLeaf is a server certificate a development CA issued: the usual
// wrong trust file.
func issuedLeaf(t *testing.T, dir string) string {
	t.Helper()
	ca, err := devpki.LoadOrCreateCA(filepath.Join(dir, "fixture-ca"), "test")
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ca.Issue(filepath.Join(dir, "fixture-ca"), "leaf")
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestBootstrapJSONAndOldSpellings: --json prints the documented object
// (decoded strictly); the old spellings --config-out (for the required
// --out) and --allow-scoped (always on) still work and warn on stderr;
// -v --log-level debug logs bootstrap's Gateway requests.
func TestBootstrapJSONAndOldSpellings(t *testing.T) {
	env := reftest.Start(t, reference.Config{})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	code, stdout, stderr := runCLI(t, "bootstrap", "--endpoint", env.URL, "--trust-file", env.CAFile, "--admin-user", reftest.AdminUser,
		"--admin-password-file", env.AdminPasswordFile, "--service-name", "jsonsvc", "--out", cfg, "--json", "--log-level", "debug")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got bootstrapJSON
	opsDecode(t, stdout, &got)
	sc, err := gateway.LoadServiceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.ServiceID != sc.ServiceID || got.SystemID != sc.SystemID || got.Prefix != sc.Prefix || got.Out != cfg || got.ServiceID == "" {
		t.Fatalf("--json %+v, config.json %+v", got, sc)
	}
	if !strings.Contains(stderr, `msg="gateway request"`) || !strings.Contains(stderr, "gateway service signed in") {
		t.Fatalf("--log-level debug shows no Gateway request of bootstrap:\n%s", stderr)
	}

	dir2 := filepath.Join(dir, "old")
	if err := os.Mkdir(dir2, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg2 := filepath.Join(dir2, "config.json")
	code, stdout, stderr = runCLI(t, "bootstrap", "--endpoint", env.URL, "--trust-file", env.CAFile, "--admin-user", reftest.AdminUser,
		"--admin-password-file", env.AdminPasswordFile, "--service-name", "oldsvc", "--allow-scoped", "--config-out", cfg2)
	if code != 0 || !strings.HasSuffix(stdout, "BOOTSTRAP: OK\n") {
		t.Fatalf("old spellings: exit %d: %s%s", code, stdout, stderr)
	}
	for _, want := range []string{"Flag --config-out has been deprecated, use --out instead",
		"Flag --allow-scoped has been deprecated: the service is always registered with scoped sessions"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("no warning %q on stderr: %s", want, stderr)
		}
	}
	if _, err := os.Stat(cfg2); err != nil {
		t.Fatalf("--config-out did not set --out: %v", err)
	}
	if strings.Contains(stdout, "deprecated") {
		t.Fatalf("a warning on stdout: %s", stdout)
	}

	// --out -: config.json on standard output (its paths absolute, the
	// credentials in service/ of the current folder), the report on
	// standard error, no file named -.
	dir3 := filepath.Join(dir, "stdout")
	if err := os.Mkdir(dir3, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir3)
	code, stdout, stderr = runCLI(t, "bootstrap", "--endpoint", env.URL, "--trust-file", env.CAFile, "--admin-user", reftest.AdminUser,
		"--admin-password-file", env.AdminPasswordFile, "--service-name", "stdoutsvc", "--out", "-")
	if code != 0 || !strings.HasSuffix(stderr, "BOOTSTRAP: OK\n") {
		t.Fatalf("--out -: exit %d: %s%s", code, stdout, stderr)
	}
	var printed gateway.ServiceConfig
	opsDecode(t, stdout, &printed)
	if printed.ServiceID == "" || !filepath.IsAbs(printed.ServiceCert) || filepath.Dir(printed.ServiceCert) != filepath.Join(mustAbs(t, "."), "service") {
		t.Fatalf("--out - printed %+v", printed)
	}
	if got := dirNames(t, dir3); !slices.Equal(got, []string{"service"}) {
		t.Fatalf("--out - left %v in the folder, want service/ only", got)
	}
	saved := writeFixture(t, dir3, "config.json", stdout, 0o600)
	if _, err := gateway.LoadServiceConfig(saved); err != nil {
		t.Fatalf("what --out - printed is not a config.json: %v", err)
	}
	if code, _, stderr = runCLI(t, "bootstrap", "--endpoint", env.URL, "--admin-user", reftest.AdminUser,
		"--admin-password-file", env.AdminPasswordFile, "--out", "-", "--json"); code != exitUsage || !strings.Contains(stderr, "--json and --out - both write to standard output") {
		t.Fatalf("--out - --json: exit %d: %s", code, stderr)
	}
}
