package gateway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// TestFinalMintRefusal: only the Gateway's refusals that asking again
// cannot change are final; a refused subject token (exchanged afresh on
// the next call), a provider outage, a busy pool or an unanswered request
// are not.
func TestFinalMintRefusal(t *testing.T) {
	for _, tc := range []struct {
		err   error
		final bool
	}{
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeIdentityNotMapped}, true},
		{fmt.Errorf("mint: %w", &api.Error{Layer: api.LayerGateway, Code: api.CodeIdentityNotMapped}), true},
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeActingAsRefused}, true},
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeScopedNotAllowed}, true},
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeSubjectRefused}, false},
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeIdPUnavailable}, false},
		{&api.Error{Layer: api.LayerGateway, Code: api.CodeInternal}, false},
		{&api.Error{Layer: api.LayerAdapter, Code: api.CodeSessionsBusy}, false},
		{&api.Error{Layer: api.LayerAdapter, Code: api.CodeIdentityNotMapped}, false},
		{&api.Error{Code: api.CodeUnreachable}, false},
		{errors.New("something else"), false},
	} {
		if _, final := finalMintRefusal(tc.err); final != tc.final {
			t.Errorf("finalMintRefusal(%v) = %v, want %v", tc.err, final, tc.final)
		}
	}
}
