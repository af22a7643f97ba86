// Package doctest runs the documentation as tests: the sh blocks of
// docs/quickstart.md and examples/quickstart/quickstart.sh, against a fresh
// `gpuaas dev` built from this tree, so the docs cannot drift from the product.
package doctest
