package serve

import (
	"fmt"
	"sort"
	"strings"
)

// modelCredentialNames and modelCredentialPrefixes name the environment
// variables through which a model host's own credential could reach this
// process. A host hands a stdio server its whole environment, so the server
// refuses to start with any of them rather than hold a key it never needs.
var (
	modelCredentialNames = []string{
		"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_API_KEY",
		"OPENAI_API_KEY", "OPENAI_IDENTITY_TOKEN_FILE", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "CODEX_HOME",
	}
	modelCredentialPrefixes = []string{"ANTHROPIC_", "CLAUDE_CODE_", "OPENAI_", "CODEX_"}
)

// CheckEnvironment refuses an environment that carries a model host's
// credential. The error names the variables, never their values.
func CheckEnvironment(environ []string) error {
	var found []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if isModelCredential(name) {
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return nil
	}
	sort.Strings(found)
	return fmt.Errorf("refusing to start: the environment holds a model host's credential variable (%s); "+
		"start the server through `pdmcp clean-env` so it gets only what it needs", strings.Join(found, ", "))
}

func isModelCredential(name string) bool {
	upper := strings.ToUpper(name)
	for _, n := range modelCredentialNames {
		if upper == n {
			return true
		}
	}
	for _, p := range modelCredentialPrefixes {
		if strings.HasPrefix(upper, p) {
			return true
		}
	}
	return false
}
