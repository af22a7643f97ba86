// Package manifest parses and validates app manifest packages: the document
// an app team writes to describe an app and its versions (compatibility,
// runtime profile, launch-parameter, placement and config schemas, artifacts).
//
// Validation has two layers. The JSON Schema files in api/schemas are the
// published contract, so every structural rule lives there and external tools
// can apply it too. Rules that a schema cannot express well (bounds that must
// not be reversed, cross references between fields, duplicate names, embedded
// schemas that must compile) are checked in Go afterwards. Both layers report
// [Problem] values that carry a JSON pointer and the source line, because an
// app team fixes a manifest in an editor, not in a parsed tree.
//
// Both the nested package form ({app, version} or {app, versions}) and the
// flat single-version form of the SDK sample are accepted and normalised into
// one representation, [Package].
package manifest
