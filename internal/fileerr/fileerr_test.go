package fileerr

import (
	"errors"
	"testing"
)

func TestCheckEmpty(t *testing.T) {
	tests := []struct {
		name, data string
		want       string // "" when the data is not empty
	}{
		{"nothing", "", "/etc/pdmcp/config.json is empty: it should hold the service's settings"},
		{"white space", " \n\t\r\n", "/etc/pdmcp/config.json is empty: it should hold the service's settings"},
		{"one character", "{", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEmpty("/etc/pdmcp/config.json", []byte(tt.data), "the service's settings")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckEmpty = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrEmpty) {
				t.Fatalf("CheckEmpty = %v, want %q matching ErrEmpty", err, tt.want)
			}
		})
	}
}
