package crashpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"testing"
)

// TestAllListsEveryConstant parses this package's source: every Point
// constant is in All once, and has the "<operation>:<step>" form, so a
// point added here cannot escape the crash suite, which iterates All.
func TestAllListsEveryConstant(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "crashpoint.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	form := regexp.MustCompile(`^[a-z_]+:[a-z-]+$`)
	var declared []Point
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for _, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok {
					t.Fatalf("constant %s is not a string literal", v.Names[0])
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if !form.MatchString(s) {
					t.Errorf("%s = %q: want <operation>:<step>", v.Names[0], s)
				}
				declared = append(declared, Point(s))
			}
		}
	}
	all := All()
	if len(declared) < 16 || len(all) != len(declared) {
		t.Fatalf("%d constants declared, All has %d", len(declared), len(all))
	}
	for _, p := range declared {
		if n := count(all, p); n != 1 {
			t.Errorf("%q is in All %d times", p, n)
		}
	}
}

func count(all []Point, p Point) int {
	n := 0
	for i := range all {
		if all[i] == p {
			n++
		}
	}
	return n
}
