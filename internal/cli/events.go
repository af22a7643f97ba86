package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func init() { commandFactories = append(commandFactories, newEventsCmd) }

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Platform events: list a project's (or org's, or the platform's) events, or watch them live",
		Long: `Events are CloudEvents 1.0 envelopes (types and payloads: /api/asyncapi.yaml).
The scope is --project (default, GPUAAS_PROJECT_ID), --org, or --platform (platform admins).`,
	}
	addClientFlags(cmd)
	projectFlag(cmd, true)
	orgFlag(cmd, true, "every project of the org (needs events.read on the org)")
	cmd.PersistentFlags().Bool("platform", false, "every event of the platform (platform admins)")
	cmd.PersistentFlags().String("type", "", "only this type or type prefix, e.g. apps.artifact.")
	cmd.PersistentFlags().String("subject", "", "only events about this resource, e.g. app-artifacts/<id>")
	cmd.AddCommand(newEventsListCmd(), newEventsWatchCmd(), newEventsRepublishCmd())
	return cmd
}

// eventsScope returns the API client and the events path of the scope flags.
func eventsScope(cmd *cobra.Command) (*client.Client, string, client.EventFilter, error) {
	f := client.EventFilter{}
	f.Type, _ = cmd.Flags().GetString("type")
	f.Subject, _ = cmd.Flags().GetString("subject")
	c, err := apiClient(cmd)
	if err != nil {
		return nil, "", f, err
	}
	if all, _ := cmd.Flags().GetBool("platform"); all {
		return c, client.PlatformEventsPath, f, nil
	}
	if cmd.Flags().Changed("org") {
		org, err := orgOf(cmd, c)
		if err != nil {
			return nil, "", f, err
		}
		return c, client.OrgEventsPath(org), f, nil
	}
	project, err := projectOf(cmd)
	if err != nil {
		return nil, "", f, fmt.Errorf("%w (or --org / --platform)", err)
	}
	if project, err = resolveProject(cmd.Context(), c, project); err != nil {
		return nil, "", f, err
	}
	return c, client.ProjectEventsPath(project), f, nil
}

func newEventsListCmd() *cobra.Command {
	var (
		limit        int
		cursor       string
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List retained events, oldest first (one page; follow next_cursor for more)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, path, f, err := eventsScope(cmd)
			if err != nil {
				return err
			}
			f.Limit, f.Cursor = limit, cursor
			for _, t := range []struct {
				flag string
				v    string
				dst  *time.Time
			}{{"since", since, &f.Since}, {"until", until, &f.Until}} {
				if t.v == "" {
					continue
				}
				if *t.dst, err = time.Parse(time.RFC3339, t.v); err != nil {
					return fmt.Errorf("--%s: want an RFC 3339 time such as 2026-01-02T15:04:05Z", t.flag)
				}
			}
			l, err := c.ListEvents(cmd.Context(), path, f)
			if err != nil {
				return err
			}
			return printJSON(cmd, l)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "page size (1-500)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "next_cursor of the previous page")
	cmd.Flags().StringVar(&since, "since", "", "only events at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&until, "until", "", "only events before this time (RFC 3339)")
	return cmd
}

func newEventsWatchCmd() *cobra.Command {
	var (
		after   string
		fromNow bool
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print live events until interrupted (reconnects and resumes by itself)",
		Long: `Prints each event as it happens: one line per event (time, sequence, type,
subject, actor) on a terminal or with -o table; one CloudEvents envelope per
line with -o json (the default in a pipe); a YAML document per event with -o yaml.
--after resumes after an event (its sequence or id): every later event is
printed exactly once, in order. --from-now skips the retained events and
starts after the newest one. Without either the stream starts at the oldest
retained event.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromNow {
				if after != "" {
					return usageError{"--after and --from-now exclude each other: pick where the stream starts"}
				}
				after = client.ResumeNow
			}
			format, err := outputFormat(cmd)
			if err != nil {
				return err
			}
			c, path, f, err := eventsScope(cmd)
			if err != nil {
				return err
			}
			print := eventPrinter(cmd.OutOrStdout(), format)
			return c.FollowEvents(cmd.Context(), path, f, after, print)
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "resume after this event (sequence or event id)")
	cmd.Flags().BoolVar(&fromNow, "from-now", false, "only events newer than the newest retained one (skip the history)")
	return cmd
}

// eventPrinter prints one event at a time as it arrives, in format: a
// table row (the header before the first), a JSON line, or a YAML document.
func eventPrinter(w io.Writer, format string) func(client.Event) error {
	switch format {
	case outputJSON:
		enc := json.NewEncoder(w)
		return func(e client.Event) error { return enc.Encode(e) }
	case outputYAML:
		return func(e client.Event) error {
			g, err := generic(e)
			if err != nil {
				return err
			}
			b, err := yaml.Marshal(g)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "---\n%s", b)
			return err
		}
	}
	const row = "%-24s  %-8s  %-36s  %-40s  %s\n"
	header := false
	return func(e client.Event) error {
		if !header {
			header = true
			fmt.Fprintf(w, row, "TIME", "SEQUENCE", "TYPE", "SUBJECT", "ACTOR")
		}
		_, err := fmt.Fprintf(w, row, e.Time.UTC().Format(time.RFC3339Nano), strconv.FormatInt(e.Sequence, 10), e.Type, cell(e.Subject), cell(e.Actor))
		return err
	}
}

func newEventsRepublishCmd() *cobra.Command {
	var since, reason string
	cmd := &cobra.Command{
		Use:   "republish --since SEQUENCE|EVENT_ID|TIME --reason TEXT",
		Short: "Publish retained events to NATS JetStream again (platform admins; after the bus lost messages)",
		Long: `Marks the retained outbox events from --since (a sequence, an event id or an
RFC 3339 time; inclusive) unpublished, so the relay sends them to JetStream
again in order with Nats-Msg-Id = event id. JetStream drops those it still
remembers inside its duplicate window; beyond it consumers deduplicate by id.
Audited as events.republish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			res, err := c.RepublishEvents(cmd.Context(), since, reason)
			if err != nil {
				return err
			}
			return printResult(cmd, res, "from_sequence", "events")
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "first event to republish: a sequence, an event id or an RFC 3339 time")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit log)")
	_ = cmd.MarkFlagRequired("since")
	return cmd
}
