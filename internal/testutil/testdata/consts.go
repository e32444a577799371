package c

type Code string

const (
	A    Code = "a"
	B, C Code = "b", "c"
	D         = "untyped"
)

const E Code = `e`
