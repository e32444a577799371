package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Why 8: a piped stdio session. Every request read before the end of
// input is answered before the process exits: initialize, tools/list and a
// tool call that goes to the Gateway, sent all at once with stdin closed
// behind them.
func TestPipedStdioAnswersEveryRequestRead(t *testing.T) {
	s := newStack(t)
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"read_protected_document","arguments":{"documentId":"evaluation-criteria"}}}`,
	}, "\n") + "\n"
	for _, tc := range []struct {
		name, input string
	}{
		{"all lines", input},
		{"no notification, no last newline", strings.Replace(strings.TrimSuffix(input, "\n"),
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n", "", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := s.serveCmd(t)
			cmd.Stdin = strings.NewReader(tc.input)
			cmd.Stderr = &testLog{t: t}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("serve: %v\nstdout: %s", err, out)
			}
			answered := map[string]json.RawMessage{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<22)
			for sc.Scan() {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("stdout line is not JSON: %v: %q", err, sc.Text())
				}
				if m.Error != nil {
					t.Fatalf("request %s answered with an error: %s", m.ID, m.Error)
				}
				answered[string(m.ID)] = m.Result
			}
			for _, id := range []string{`1`, `2`, `"three"`} {
				if answered[id] == nil {
					t.Fatalf("request %s was not answered; stdout:\n%s", id, out)
				}
			}
			if !strings.Contains(string(answered[`2`]), "read_protected_document") {
				t.Fatalf("tools/list: %s", answered[`2`])
			}
			if strings.Contains(string(answered[`"three"`]), `"isError":true`) {
				t.Fatalf("the read failed: %s", answered[`"three"`])
			}
		})
	}
}
