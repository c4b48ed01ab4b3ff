package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"rackd/api"
)

// progress draws an import's progress on stderr: a bar redrawn in place on
// a terminal, plain lines (at most one per plainEvery) otherwise, so that
// a log or a CI transcript stays readable.
type progress struct {
	w   io.Writer
	tty bool
	// first is when progress was first seen, for the mean rate; the
	// rate shown is over the last sample, smoothed.
	first       time.Time
	lastAt      time.Time
	lastBytes   int64
	rate        float64 // bytes per second, smoothed
	lastPrinted time.Time
	drawn       bool
	now         func() time.Time
}

// plainEvery is how often a plain progress line is printed.
const plainEvery = 2 * time.Second

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), now: time.Now}
}

// isTerminal reports whether w is a character device: a terminal, where
// the bar's carriage returns redraw the line. TERM=dumb opts out.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// update shows j, a running job.
func (p *progress) update(j api.ImportJob) {
	now := p.now()
	if p.first.IsZero() {
		p.first, p.lastAt, p.lastBytes = now, now, j.BytesDone
	} else if dt := now.Sub(p.lastAt).Seconds(); dt > 0.05 {
		r := float64(j.BytesDone-p.lastBytes) / dt
		if p.rate == 0 {
			p.rate = r
		} else {
			p.rate = 0.7*p.rate + 0.3*r
		}
		p.lastAt, p.lastBytes = now, j.BytesDone
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", barLine(j, p.rate, 30))
		p.drawn = true
		return
	}
	// Before the server has read the manifest there is nothing to say.
	if j.BytesTotal == 0 && j.Files == 0 {
		return
	}
	if p.lastPrinted.IsZero() || now.Sub(p.lastPrinted) >= plainEvery {
		fmt.Fprintln(p.w, plainLine(j, p.rate))
		p.lastPrinted = now
	}
}

// done ends the display with j's final state.
func (p *progress) done(j api.ImportJob) {
	if p.tty && p.drawn {
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", barLine(j, p.meanRate(j), 30))
		return
	}
	fmt.Fprintln(p.w, plainLine(j, p.meanRate(j)))
}

func (p *progress) meanRate(j api.ImportJob) float64 {
	if p.first.IsZero() {
		return 0
	}
	if d := p.now().Sub(p.first).Seconds(); d > 0 {
		return float64(j.BytesDone) / d
	}
	return 0
}

// barLine is the terminal line: "[=====>    ]  45%  120.0 MiB/266.7 MiB  12.3 MiB/s  initrd".
func barLine(j api.ImportJob, rate float64, width int) string {
	frac := fraction(j)
	full := int(frac * float64(width))
	bar := strings.Repeat("=", full)
	if full < width {
		bar += ">" + strings.Repeat(" ", width-full-1)
	}
	s := fmt.Sprintf("[%s] %3.0f%%  %s/%s  %s/s", bar, frac*100, bytesIEC(j.BytesDone), bytesIEC(j.BytesTotal), bytesIEC(int64(rate)))
	if j.State == api.ImportRunning && j.File != "" {
		s += "  " + j.File
		if j.Step != "" {
			s += ": " + j.Step
		}
	} else if j.State != api.ImportRunning {
		s += "  " + j.State
	}
	return s
}

// plainLine is a log line: "import i-3: 45% 120.0 MiB of 266.7 MiB, 12.3 MiB/s, file 2 of 3 (initrd)".
func plainLine(j api.ImportJob, rate float64) string {
	s := fmt.Sprintf("import %s: %s %.0f%% %s of %s, %s/s",
		j.ID, j.State, fraction(j)*100, bytesIEC(j.BytesDone), bytesIEC(j.BytesTotal), bytesIEC(int64(rate)))
	if j.Files > 0 {
		s += fmt.Sprintf(", file %d of %d", min(j.FilesDone+1, j.Files), j.Files)
	}
	if j.State == api.ImportRunning && j.File != "" {
		s += " (" + j.File + ")"
		if j.Step != "" {
			s += ": " + j.Step
		}
	}
	return s
}

func fraction(j api.ImportJob) float64 {
	if j.BytesTotal <= 0 {
		if j.State == api.ImportDone {
			return 1
		}
		return 0
	}
	return min(1, float64(j.BytesDone)/float64(j.BytesTotal))
}

// bytesIEC spells n in B, KiB, MiB, GiB or TiB with one decimal.
func bytesIEC(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}
