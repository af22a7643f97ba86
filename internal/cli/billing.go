package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuaas/gpuaas/client"
)

func init() {
	commandFactories = append(commandFactories, newUsageCmd, newBillingCmd)
}

// billingFlags are the filters every billing read takes.
type billingFlags struct {
	org, project, instance, source, unit, from, to, groupBy string
	limit                                                   int
	cursor                                                  string
	asJSON, asCSV                                           bool
}

func (f *billingFlags) add(cmd *cobra.Command, grouping bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.org, "org", "", "org id or slug: every project of the org you may read (env GPUAAS_ORG_ID)")
	fl.StringVar(&f.project, "project", "", "project id or slug (env GPUAAS_PROJECT_ID)")
	fl.StringVar(&f.instance, "instance", "", "app instance id")
	fl.StringVar(&f.source, "source", "", "usage source: allocation or app_runtime")
	fl.StringVar(&f.unit, "unit", "", "usage unit, e.g. gpu_seconds, session_seconds, tokens")
	fl.StringVar(&f.from, "from", "", "usage at or after this time (RFC 3339)")
	fl.StringVar(&f.to, "to", "", "usage before this time (RFC 3339)")
	if grouping {
		fl.StringVar(&f.groupBy, "group-by", "", "comma-separated columns to total by, e.g. usage_source,usage_unit")
	}
	fl.IntVar(&f.limit, "limit", 0, "page size (1-500)")
	fl.StringVar(&f.cursor, "cursor", "", "cursor from a previous page")
	addJSONAlias(cmd, &f.asJSON)
	fl.BoolVar(&f.asCSV, "csv", false, "export CSV (every matching row, not one page)")
}

func (f *billingFlags) query(cmd *cobra.Command, c *client.Client) (client.BillingQuery, error) {
	var err error
	if f.org, err = orgOf(cmd, c); err != nil {
		return client.BillingQuery{}, err
	}
	// --org alone asks for the whole org: GPUAAS_PROJECT_ID does not narrow it.
	projectRef := flagOrEnv(cmd, "project", "GPUAAS_PROJECT_ID")
	if cmd.Flags().Changed("org") && !cmd.Flags().Changed("project") {
		projectRef = ""
	}
	if f.project, err = resolveProject(cmd.Context(), c, projectRef); err != nil {
		return client.BillingQuery{}, err
	}
	q := client.BillingQuery{OrgID: f.org, ProjectID: f.project, AppInstanceID: f.instance, UsageSource: f.source,
		UsageUnit: f.unit, Limit: f.limit, Cursor: f.cursor}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"--from", f.from, &q.From}, {"--to", f.to, &q.To}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return q, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-11-01T00:00:00Z", t.name, t.v)
		}
		*t.dst = v
	}
	if f.groupBy != "" {
		q.GroupBy = strings.Split(f.groupBy, ",")
	}
	return q, nil
}

// billingRead is the body of a billing read: the shared filters resolved
// into q, and whether -o/--json asked for a document.
type billingRead func(cmd *cobra.Command, c *client.Client, q client.BillingQuery, asJSON bool) error

// newBillingReadCmd builds a billing read: the shared filters, --csv
// exporting every matching row of csvKind, else show printing one page.
func newBillingReadCmd(use, short, example, csvKind string, grouping bool, show billingRead) *cobra.Command {
	var f billingFlags
	cmd := &cobra.Command{
		Use: use, Short: short, Example: example, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			q, err := f.query(cmd, c)
			if err != nil {
				return err
			}
			if f.asCSV {
				return c.ExportCSV(cmd.Context(), csvKind, q, cmd.OutOrStdout())
			}
			return show(cmd, c, q, f.asJSON)
		},
	}
	f.add(cmd, grouping)
	return cmd
}

func newUsageCmd() *cobra.Command {
	cmd := newBillingReadCmd("usage", "Usage records: allocation GPU-seconds and app runtime units (billing.usage.read)",
		`  gpuaas usage --instance "$INSTANCE_ID" --source app_runtime
  gpuaas usage --group-by usage_source,usage_unit
  gpuaas usage --from 2026-11-01T00:00:00Z --csv > usage.csv`, "usage", true,
		func(cmd *cobra.Command, c *client.Client, q client.BillingQuery, asJSON bool) error {
			ctx := cmd.Context()
			if len(q.GroupBy) > 0 {
				g, err := c.GroupUsage(ctx, q)
				if err != nil {
					return err
				}
				return printOr(cmd, asJSON, g, func(w io.Writer) error {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					// Quantities add up only within a unit: every group has one,
					// shown once whether or not --group-by named it.
					keys := append([]string(nil), q.GroupBy...)
					if !slices.Contains(keys, "usage_unit") {
						keys = append(keys, "usage_unit")
					}
					fmt.Fprintln(tw, strings.ToUpper(strings.Join(append(keys, "quantity", "records"), "\t")))
					for _, gr := range g.Groups {
						var row []string
						for _, k := range keys {
							row = append(row, gr.Keys[k])
						}
						fmt.Fprintf(tw, "%s\t%d\t%d\n", strings.Join(row, "\t"), gr.Quantity, gr.Records)
					}
					return tw.Flush()
				})
			}
			page, err := c.ListUsage(ctx, q)
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, page, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "START\tEND\tSOURCE\tUNIT\tQUANTITY\tSKU/METER\tINSTANCE\tALLOCATION")
				for _, u := range page.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", u.StartTime, u.EndTime, u.UsageSource, u.UsageUnit, u.Quantity,
						u.SKU+u.Meter, u.AppInstanceID, u.AllocationID)
				}
				return flushWithCursor(tw, page.NextCursor)
			})
		})
	addClientFlags(cmd)
	return cmd
}

func newBillingCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "billing",
		Short: "The ledger, costs, budgets, prices and corrections",
	}
	cmd.AddCommand(newBillingLedgerCmd(), newBillingCostsCmd(), newBillingBudgetCmd(), newBillingPriceCmd(), newBillingCorrectCmd())
	addClientFlags(cmd)
	return cmd
}

func newBillingLedgerCmd() *cobra.Command {
	return newBillingReadCmd("ledger", "Ledger entries (charges and corrections) and their balance", "", "ledger", false,
		func(cmd *cobra.Command, c *client.Client, q client.BillingQuery, asJSON bool) error {
			page, err := c.ListLedger(cmd.Context(), q)
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, page, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTYPE\tUSAGE TIME\tSOURCE\tUNIT\tQUANTITY\tAMOUNT\tCORRECTS")
				for _, e := range page.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.EntryType, e.UsageTime, e.UsageSource, e.UsageUnit,
						e.Quantity, money64(e.AmountMicros, e.Currency), e.CorrectsEntryID)
				}
				for _, b := range page.Balance {
					fmt.Fprintf(tw, "BALANCE\t\t\t\t\t\t%s\t(%d entries)\n", money(b.AmountMicros, b.Currency), b.Entries)
				}
				return flushWithCursor(tw, page.NextCursor)
			})
		})
}

func newBillingCostsCmd() *cobra.Command {
	return newBillingReadCmd("costs", "Combined cost; --group-by usage_source,meter… is the operators' breakdown (billing.breakdown.read)", "", "costs", true,
		func(cmd *cobra.Command, c *client.Client, q client.BillingQuery, asJSON bool) error {
			out, err := c.Costs(cmd.Context(), q)
			if err != nil {
				return err
			}
			return printOr(cmd, asJSON, out, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, g := range out.Groups {
					var keys []string
					for _, k := range q.GroupBy {
						keys = append(keys, k+"="+g.Keys[k])
					}
					fmt.Fprintf(tw, "%s\t%s\n", strings.Join(keys, " "), money(g.AmountMicros, g.Currency))
				}
				for _, t := range out.Totals {
					fmt.Fprintf(tw, "TOTAL\t%s\t(%d entries)\n", money(t.AmountMicros, t.Currency), t.Entries)
				}
				return tw.Flush()
			})
		})
}

func newBillingBudgetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "budget", Short: "A project's GPU quota and spend budget"}
	get := &cobra.Command{
		Use:   "get",
		Short: "Show the budget and its current use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			b, err := c.GetBudget(cmd.Context(), project)
			if err != nil {
				return err
			}
			return printJSON(cmd, b)
		},
	}
	var (
		quota, limit int64
		period       string
		soft         int
	)
	set := &cobra.Command{
		Use:   "set",
		Short: "Set the GPU quota and spend budget (billing.budget.write; -1 means no limit)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			project, c, err := projectClient(cmd)
			if err != nil {
				return err
			}
			in := client.BudgetInput{Period: period, SoftThresholdPercent: &soft}
			if quota >= 0 {
				in.GPUQuota = &quota
			}
			if limit >= 0 {
				in.SpendLimitMicros = &limit
			}
			b, err := c.PutBudget(cmd.Context(), project, in)
			if err != nil {
				return err
			}
			return printJSON(cmd, b)
		},
	}
	set.Flags().Int64Var(&quota, "gpu-quota", -1, "most GPUs the project's allocations may hold at once")
	set.Flags().Int64Var(&limit, "spend-limit-micros", -1, "spend budget per period, in micro-units of the currency")
	set.Flags().StringVar(&period, "period", "month", "budget period: day or month (UTC)")
	set.Flags().IntVar(&soft, "soft-threshold-percent", 80, "emit billing.budget.threshold_crossed at this share of the budget")
	cmd.AddCommand(get, set)
	projectFlag(cmd, true)
	return cmd
}

func newBillingPriceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "price", Short: "Versioned, effective-dated prices (platform admins)"}
	var in client.PriceInput
	add := &cobra.Command{
		Use:   "add",
		Short: "Add a price version for a SKU (--sku) or a meter (--meter app/unit, or */unit)",
		Example: `  gpuaas billing price add --sku h100-80gb.1x --price-micros 2500000          # 2.50 per GPU-hour
  gpuaas billing price add --meter vllm/tokens --price-micros 20 --per 1000     # 0.00002 per 1000 tokens`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			in.UsageSource = "allocation"
			if in.Meter != "" {
				in.UsageSource = "app_runtime"
			}
			p, err := c.CreatePrice(cmd.Context(), in)
			if err != nil {
				return err
			}
			return printJSON(cmd, p)
		},
	}
	add.Flags().StringVar(&in.SKU, "sku", "", "allocation SKU, priced per GPU-hour by default")
	add.Flags().StringVar(&in.Meter, "meter", "", "app meter: <app_slug>/<unit> or */<unit>")
	add.Flags().Int64Var(&in.UnitPriceMicros, "price-micros", 0, "price in micro-units of the currency")
	add.Flags().Int64Var(&in.PerQuantity, "per", 0, "units the price is for (default 3600 gpu_seconds for a SKU, 1 for a meter)")
	add.Flags().StringVar(&in.EffectiveFrom, "effective-from", "", "RFC 3339 time the price applies from (default now)")
	add.Flags().StringVar(&in.Note, "note", "", "why the price changed")
	var f pageFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List every price version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			page, err := c.ListPrices(cmd.Context(), f.limit, f.cursor)
			if err != nil {
				return err
			}
			return printPage(cmd, &f, client.CatalogPage[client.Price](page), "SKU/METER\tVERSION\tPRICE\tPER\tEFFECTIVE FROM", func(p client.Price) string {
				return fmt.Sprintf("%s\t%d\t%s\t%d %s\t%s", p.SKU+p.Meter, p.Version, money64(p.UnitPriceMicros, p.Currency), p.PerQuantity, p.UsageUnit, p.EffectiveFrom)
			})
		},
	}
	f.add(list)
	cmd.AddCommand(add, list)
	return cmd
}

func newBillingCorrectCmd() *cobra.Command {
	var (
		amount int64
		reason string
	)
	cmd := &cobra.Command{
		Use:   "correct ENTRY_ID",
		Short: "Post a compensating ledger entry linked to ENTRY_ID (platform admins; the original is never changed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd)
			if err != nil {
				return err
			}
			e, err := c.CorrectLedgerEntry(cmd.Context(), args[0], amount, reason)
			if err != nil {
				return err
			}
			return printJSON(cmd, e)
		},
	}
	cmd.Flags().Int64Var(&amount, "amount-micros", 0, "signed amount to add (negative refunds)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the entry and the audit log)")
	return cmd
}
