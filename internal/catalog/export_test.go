package catalog

// ExampleVersion reads the version of an example manifest (tests only).
var ExampleVersion = exampleVersion
