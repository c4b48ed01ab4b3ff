package perfdhcp

import (
	"math"
	"testing"
)

// Output of perfdhcp (Kea 2.2) against a server that answered everything,
// and against none.
const (
	answered = `Running: perfdhcp -4 -l 10.77.0.2 -r 2000 -R 60000 -p 5 -W 1000000 10.77.0.1
Scenario: basic.
Multi-thread mode enabled.
***Rate statistics***
Rate: 1666.21 4-way exchanges/second, expected rate: 2000

***Malformed Packets***
Malformed packets: 0
***Statistics for: DISCOVER-OFFER***
sent packets: 9999
received packets: 9999
drops: 0
drops ratio: 0 %
orphans: 0
rejected leases: 0
non unique addresses: 0

min delay: 0.049 ms
avg delay: 0.153 ms
max delay: 4.452 ms
std deviation: 0.154 ms
collected packets: 0

***Statistics for: REQUEST-ACK***
sent packets: 9999
received packets: 9990
drops: 9
drops ratio: 0.090 %
orphans: 0
rejected leases: 0
non unique addresses: 0

min delay: 0.078 ms
avg delay: 0.195 ms
max delay: 4.466 ms
std deviation: 0.150 ms
collected packets: 0
`
	silent = `***Rate statistics***
Rate: 0 4-way exchanges/second, expected rate: 100

***Statistics for: DISCOVER-OFFER***
sent packets: 199
received packets: 0
drops: 199
drops ratio: 100 %

min delay: inf ms
avg delay: min delay: n/a
avg delay: n/a
max delay: n/a
std deviation: n/a
collected packets: 0

***Statistics for: REQUEST-ACK***
sent packets: 0
received packets: 0
drops: 0
drops ratio: -nan %

min delay: inf ms
avg delay: min delay: n/a
avg delay: n/a
max delay: n/a
std deviation: n/a
`
)

func TestParsePerfdhcp(t *testing.T) {
	r, err := Parse(answered)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate != 1666.21 || r.DO.Sent != 9999 || r.DO.Received != 9999 || r.RA.Received != 9990 || r.RA.Drops != 9 {
		t.Errorf("counts: %+v", r)
	}
	if r.DO.Min != 0.049 || r.DO.Avg != 0.153 || r.DO.Max != 4.452 || r.DO.Std != 0.154 ||
		r.RA.Min != 0.078 || r.RA.Avg != 0.195 || r.RA.Max != 4.466 || r.RA.Std != 0.150 {
		t.Errorf("delays: %+v", r)
	}
	if r.Acks() != 9990 || math.Abs(r.LossPct()-0.09) > 0.001 {
		t.Errorf("acks %d, loss %.4f%%", r.Acks(), r.LossPct())
	}

	r, err = Parse(silent)
	if err != nil {
		t.Fatal(err)
	}
	if r.DO.Sent != 199 || r.DO.Received != 0 || r.Acks() != 0 || r.LossPct() != 100 {
		t.Errorf("counts: %+v", r)
	}
	if !math.IsNaN(r.DO.Min) || !math.IsNaN(r.DO.Avg) || !math.IsNaN(r.RA.Std) {
		t.Errorf("delays should be NaN: %+v", r)
	}

	if _, err := Parse("perfdhcp: bad option\n"); err == nil {
		t.Error("no statistics: want an error")
	}
}
