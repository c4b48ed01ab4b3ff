package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"rackd/api"
)

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// printJSON prints an API answer indented. raw is what the server sent, so
// that fields newer than this CLI are kept.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	// Trimmed: the server ends its body with a newline, which Indent keeps.
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("printing the answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// marshalJSON prints a value the CLI built itself (version, backup).
func marshalJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// cell makes a value safe for a table cell: empty becomes "-", and control
// characters (tabs would break the columns; escape sequences in a reason or
// tag could drive the terminal) become '?'.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

func cells(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return cell(strings.Join(ss, ","))
}

// mem prints a memory size in MiB compactly: 16384 → 16G, 1536 → 1536M.
func mem(mb int) string {
	switch {
	case mb <= 0:
		return "-"
	case mb%1024 == 0:
		return strconv.Itoa(mb/1024) + "G"
	default:
		return strconv.Itoa(mb) + "M"
	}
}

func count(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

const machineHeader = "ID\tHOSTNAME\tSTATE\tARCH\tCPU\tMEM\tOWNER\tAGENT\tTAGS"

func machineRow(m api.Machine) string {
	return strings.Join([]string{cell(m.ID), cell(m.Hostname), cell(m.State), cell(m.Arch),
		count(m.CPUCount), mem(m.MemoryMB), cell(m.Owner), cell(m.AgentName), cells(m.Tags)}, "\t")
}

func printMachines(w io.Writer, ms []api.Machine) error {
	tw := newTable(w)
	fmt.Fprintln(tw, machineHeader)
	for _, m := range ms {
		fmt.Fprintln(tw, machineRow(m))
	}
	return tw.Flush()
}

func printMachine(w io.Writer, m api.Machine) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", cell(m.ID))
	row("Hostname", cell(m.Hostname))
	state := cell(m.State)
	if !m.StateSince.IsZero() {
		state += " since " + when(m.StateSince)
	}
	row("State", state)
	row("Arch", cell(m.Arch))
	row("CPUs", count(m.CPUCount))
	row("Memory", mem(m.MemoryMB))
	row("MACs", cells(m.MACs))
	row("Owner", cell(m.Owner))
	row("Agent name", cell(m.AgentName))
	row("Tags", cells(m.Tags))
	row("Zone", cell(m.Zone))
	ips := make([]string, 0, len(m.IPs))
	for _, ip := range m.IPs {
		ips = append(ips, fmt.Sprintf("%s (%s on %s)", ip.IP, ip.Kind, ip.MAC))
	}
	row("IPs", cell(strings.Join(ips, ", ")))
	power := "-"
	if m.Power.Driver != "" {
		power = cell(m.Power.Driver)
		if m.Power.Address != "" {
			power += " at " + cell(m.Power.Address)
		}
		if m.Power.SetBy != "" {
			power += " (set by " + cell(m.Power.SetBy) + ")"
		}
		power += fmt.Sprintf(", desired %s, observed %s", cell(m.Power.Desired), cell(m.Power.Observed))
	}
	row("Power", power)
	switch {
	case m.Power.InsecureTLS:
		row("BMC TLS", "not checked (insecure TLS chosen for this machine)")
	case m.Power.TLSFingerprint != "":
		row("BMC TLS", "certificate pinned, sha256 "+cell(m.Power.TLSFingerprint))
	}
	if m.Power.BootMode != "" {
		row("Boot mode", cell(m.Power.BootMode))
	}
	if m.DeployImage != "" {
		row("Deploy image", cell(m.DeployImage))
	}
	if inv := m.Inventory; inv != nil {
		// What the machine reported at enlistment or commissioning.
		row("System", cell(strings.TrimSpace(inv.Vendor+" "+inv.Product)))
		row("Serial", cell(inv.Serial))
		row("System UUID", cell(inv.SystemUUID))
		disks := make([]string, 0, len(inv.Disks))
		for _, d := range inv.Disks {
			s := fmt.Sprintf("%s %.1f GiB", d.Name, float64(d.SizeBytes)/(1<<30))
			if d.Model != "" {
				s += " " + d.Model
			}
			disks = append(disks, s)
		}
		row("Disks", cell(strings.Join(disks, ", ")))
		if inv.BMCAddress != "" {
			row("BMC (in-band)", cell(inv.BMCAddress))
		}
	}
	if d := m.Deployment; d != nil {
		deploymentRows(row, *d)
	}
	row("Created", when(m.Created))
	return tw.Flush()
}

func printEvents(w io.Writer, evs []api.Event) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tFROM\tTO\tREASON")
	for _, ev := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", when(ev.Time), cell(ev.Actor), cell(ev.Action),
			cell(ev.From), cell(ev.To), cell(ev.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A failure's console tail, under the table: the machine's last words.
	for _, ev := range evs {
		if ev.Console == "" {
			continue
		}
		fmt.Fprintf(w, "\nConsole before %s at %s (rackd machines console-log for more):\n", ev.To, when(ev.Time))
		for _, line := range strings.Split(strings.TrimRight(strings.ReplaceAll(ev.Console, "\r", ""), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", strings.Map(printable, line))
		}
	}
	return nil
}

// printable keeps a console's text printable on the operator's terminal:
// control characters (escape sequences) become '?', tabs stay.
func printable(r rune) rune {
	if r == '\t' || (r >= ' ' && r != 0x7f && (r < 0x80 || r >= 0xa0)) {
		return r
	}
	return '?'
}

func printUsers(w io.Writer, us []api.User) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tADMIN\tCREATED")
	for _, u := range us {
		admin := "no"
		if u.Admin {
			admin = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(u.Name), admin, when(u.Created))
	}
	return tw.Flush()
}

// duration prints a number of seconds compactly: 3600 → 1h, 90 → 90s.
func duration(secs int) string {
	switch {
	case secs <= 0:
		return "-"
	case secs%3600 == 0:
		return strconv.Itoa(secs/3600) + "h"
	case secs%60 == 0:
		return strconv.Itoa(secs/60) + "m"
	default:
		return strconv.Itoa(secs) + "s"
	}
}

func ranges(rs []api.Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Start + "-" + r.End
	}
	return cells(parts)
}

// usedOfSize prints how much of a subnet's dynamic ranges is in use; "-" when
// the server did not say (no dynamic range).
func usedOfSize(sn api.Subnet) string {
	if sn.DynamicSize == 0 {
		return "-"
	}
	return strconv.FormatUint(sn.DynamicUsed, 10) + "/" + strconv.FormatUint(sn.DynamicSize, 10)
}

func printSubnets(w io.Writer, sns []api.Subnet) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "CIDR\tGATEWAY\tDOMAIN\tLEASE\tDYNAMIC\tUSED/SIZE")
	for _, sn := range sns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(sn.CIDR), cell(sn.Gateway), cell(sn.Domain),
			duration(sn.LeaseSeconds), ranges(sn.DynamicRanges), usedOfSize(sn))
	}
	return tw.Flush()
}

func printAddresses(w io.Writer, as []api.Address) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "IP\tKIND\tMAC\tMACHINE\tHOSTNAME\tOWNER\tEXPIRES\tPURPOSE")
	for _, a := range as {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(a.IP), cell(a.Kind), cell(a.MAC), cell(a.Machine),
			cell(a.Hostname), cell(a.Owner), when(a.Expires), cell(a.Purpose))
	}
	return tw.Flush()
}

func printLeases(w io.Writer, ls []api.Lease) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "IP\tMAC\tHOSTNAME\tEXPIRES\tSUBNET")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(l.IP), cell(l.MAC), cell(l.Hostname), when(l.Expires), cell(l.Subnet))
	}
	return tw.Flush()
}
