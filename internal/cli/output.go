package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"gopkg.in/yaml.v3"
)

// Every verb of every noun prints its result through printResult, so one
// flag, -o table|json|yaml, shapes all output the same way. Without -o a
// terminal gets a table and a pipe gets JSON, the same for every noun, so
// `… | jq -r .id` works without remembering a flag.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// addOutputFlag gives cmd and everything under it -o/--output.
func addOutputFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().StringP("output", "o", "", "output format: table, json or yaml (default: table on a terminal, json otherwise)")
	// A bad -o is refused before the verb acts, not after a write succeeded.
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		_, err := outputFormat(cmd)
		return err
	}
}

// outputFormat is the format the command prints in.
func outputFormat(cmd *cobra.Command) (string, error) {
	f := ""
	if fl := cmd.Flag("output"); fl != nil {
		f = strings.ToLower(fl.Value.String())
	}
	switch f {
	case outputTable, outputJSON, outputYAML:
		return f, nil
	case "":
		if isTerminal(cmd.OutOrStdout()) {
			return outputTable, nil
		}
		return outputJSON, nil
	}
	return "", fmt.Errorf("unknown output format %q: use -o table, -o json or -o yaml", f)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printResult prints v, an API response, in the command's output format.
// For the table format, columns names the JSON fields to show, in order:
// the columns of a list ({"items": […]} or a bare array, one row per item)
// or the rows of a single object (FIELD VALUE; all its fields when none are
// named; nested fields as dotted rows, see objectRows). Nested values in a
// list's cells print as compact JSON.
func printResult(cmd *cobra.Command, v any, columns ...string) error {
	format, err := outputFormat(cmd)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch format {
	case outputJSON:
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outputYAML:
		g, err := generic(v)
		if err != nil {
			return err
		}
		enc := yaml.NewEncoder(out)
		enc.SetIndent(2)
		if err := enc.Encode(g); err != nil {
			return err
		}
		return enc.Close()
	}
	g, err := generic(v)
	if err != nil {
		return err
	}
	return writeTable(out, g, columns)
}

// addJSONAlias keeps --json working as a hidden alias of -o json.
func addJSONAlias(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, "same as -o json")
	_ = cmd.Flags().MarkHidden("json")
}

// tableFormat reports whether the command prints a table (not -o json|yaml or --json).
func tableFormat(cmd *cobra.Command, asJSON bool) (bool, error) {
	if asJSON {
		return false, cmd.Flag("output").Value.Set(outputJSON)
	}
	f, err := outputFormat(cmd)
	return f == outputTable, err
}

// printOr prints v as printResult does, except in the table format, where
// table writes the verb's own human layout instead.
func printOr(cmd *cobra.Command, asJSON bool, v any, table func(w io.Writer) error) error {
	isTable, err := tableFormat(cmd, asJSON)
	if err != nil {
		return err
	}
	if !isTable {
		return printResult(cmd, v)
	}
	return table(cmd.OutOrStdout())
}

// printOutcome is for verbs that act on this machine (login, logout, auth
// use, sa token): they tell a person what happened in one line on stderr,
// and print the result itself for -o, or for a pipe, as every verb does.
// A table of the same facts on a terminal would only repeat the line.
func printOutcome(cmd *cobra.Command, line string, v any, columns ...string) error {
	fmt.Fprintln(cmd.ErrOrStderr(), line)
	if fl := cmd.Flag("output"); (fl == nil || !fl.Changed) && isTerminal(cmd.OutOrStdout()) {
		return nil
	}
	return printResult(cmd, v, columns...)
}

// flushWithCursor ends a table with the cursor of the next page, if any.
func flushWithCursor(tw *tabwriter.Writer, next string) error {
	if next != "" {
		fmt.Fprintf(tw, "(more: --cursor %s)\n", next)
	}
	return tw.Flush()
}

// printJSON is printResult with no preferred columns (kept for verbs
// written before -o existed).
func printJSON(cmd *cobra.Command, v any) error { return printResult(cmd, v) }

// generic turns v into the maps, slices and scalars its JSON encodes to.
func generic(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var g any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return g, d.Decode(&g)
}

func writeTable(out io.Writer, g any, columns []string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	var items []any
	isList := false
	cursor := ""
	switch x := g.(type) {
	case []any:
		items, isList = x, true
	case map[string]any:
		if it, ok := x["items"].([]any); ok {
			items, isList = it, true
			cursor, _ = x["next_cursor"].(string)
		}
	}
	if !isList {
		obj, ok := g.(map[string]any)
		if !ok {
			fmt.Fprintln(tw, cell(g))
			return tw.Flush()
		}
		keys := columns
		if len(keys) == 0 {
			keys = sortedKeys(obj)
		}
		for _, k := range keys {
			objectRows(tw, k, obj[k])
		}
		return tw.Flush()
	}
	if len(columns) == 0 && len(items) > 0 {
		if first, ok := items[0].(map[string]any); ok {
			for _, k := range sortedKeys(first) {
				switch first[k].(type) {
				case map[string]any, []any: // nested: -o json shows them
				default:
					columns = append(columns, k)
				}
			}
		}
	}
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = strings.ToUpper(c)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, it := range items {
		obj, _ := it.(map[string]any)
		row := make([]string, len(columns))
		for i, c := range columns {
			row[i] = cell(obj[c])
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if cursor != "" {
		fmt.Fprintf(tw, "(more: --cursor %s)\n", cursor)
	}
	return tw.Flush()
}

// objectRows writes the FIELD: VALUE rows of one field of a single object:
// a nested object as one row per dotted field (effective_values.port), a
// list of scalars comma-separated, a list of objects as field[i].sub rows,
// and a multi-line string (a PEM key) one line per row, never as escaped
// JSON.
func objectRows(w io.Writer, key string, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			break
		}
		for _, k := range sortedKeys(x) {
			objectRows(w, key+"."+k, x[k])
		}
		return
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			switch e.(type) {
			case map[string]any, []any:
				for i, e := range x {
					objectRows(w, fmt.Sprintf("%s[%d]", key, i), e)
				}
				return
			}
			parts = append(parts, cell(e))
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "%s:\t%s\n", key, strings.Join(parts, ", "))
			return
		}
	case string:
		if lines := strings.Split(strings.TrimRight(x, "\n"), "\n"); len(lines) > 1 {
			fmt.Fprintf(w, "%s:\t%s\n", key, lines[0])
			for _, l := range lines[1:] {
				fmt.Fprintf(w, "\t%s\n", l)
			}
			return
		}
	}
	fmt.Fprintf(w, "%s:\t%s\n", key, cell(v))
}

// sortedKeys puts id, slug and name first (what people look for), then the rest.
func sortedKeys(m map[string]any) []string {
	rank := map[string]int{"id": 1, "slug": 2, "name": 3}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := rank[keys[i]], rank[keys[j]]
		if ri == 0 {
			ri = 99
		}
		if rj == 0 {
			rj = 99
		}
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	return keys
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
