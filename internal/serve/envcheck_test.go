package serve

import (
	"strings"
	"testing"
)

func TestCheckEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		refused []string
	}{
		{"clean", []string{"PATH=/bin", "HOME=/h"}, nil},
		{"anthropic", []string{"ANTHROPIC_API_KEY=sk-ant-SECRET"}, []string{"ANTHROPIC_API_KEY"}},
		{"claude oauth", []string{"CLAUDE_CODE_OAUTH_TOKEN=tok-SECRET"}, []string{"CLAUDE_CODE_OAUTH_TOKEN"}},
		{"openai prefix", []string{"OPENAI_ORG=x-SECRET", "PATH=/bin"}, []string{"OPENAI_ORG"}},
		{"codex home", []string{"CODEX_HOME=/c-SECRET"}, []string{"CODEX_HOME"}},
		{"several", []string{"CODEX_API_KEY=a-SECRET", "ANTHROPIC_AUTH_TOKEN=b-SECRET"},
			[]string{"ANTHROPIC_AUTH_TOKEN", "CODEX_API_KEY"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEnvironment(tc.env)
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("refused a clean environment: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted an environment with a model credential")
			}
			for _, name := range tc.refused {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error does not name %s: %v", name, err)
				}
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error leaks a value: %v", err)
			}
		})
	}
}
