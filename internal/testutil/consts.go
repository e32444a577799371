package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// StringConsts parses the Go file at path and returns the values of its
// constants declared with the named type, in source order, for tests that
// check a list (the crash points, the refusal codes) names every constant.
// A constant of that type whose value is not a string literal fails t.
func StringConsts(t testing.TB, path, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for i, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("constant %s is not a string literal", v.Names[i])
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				vals = append(vals, s)
			}
		}
	}
	return vals
}
