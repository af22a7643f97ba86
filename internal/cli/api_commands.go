package cli

import "github.com/spf13/cobra"

// apiCommands are the nouns that call the API: each domain adds its own in
// its own file (login.go, sa.go, manifest.go, artifact.go).
func apiCommands() []*cobra.Command {
	var cmds []*cobra.Command
	for _, f := range commandFactories {
		cmds = append(cmds, f())
	}
	return cmds
}

// commandFactories is appended to by each domain file's init.
var commandFactories []func() *cobra.Command
