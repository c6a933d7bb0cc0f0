// Command loadgen posts COUNT bodies of SIZE bytes to URL from SENDERS keep-alive
// connections in a closed loop (each sender posts its next body once the answer to
// the last one is read), and prints one JSON line: how many got a 2xx, how many did
// not, the seconds from the first post to the last answer, the rate, and the
// latency percentiles of the posts.
//
// It is written in Go so that its own cost does not cap the faster tool on a small
// machine (bench/speed/benthos.py drives bridges and Benthos with it).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	OK      int64   `json:"ok"`
	Failed  int64   `json:"failed"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Maxms   float64 `json:"max_ms"`
	Status  []int   `json:"statuses,omitempty"`
}

func main() {
	url := flag.String("url", "", "where to POST")
	count := flag.Int("count", 20000, "posts in all")
	senders := flag.Int("senders", 16, "concurrent keep-alive senders")
	size := flag.Int("size", 100, "body size, bytes")
	flag.Parse()
	if *url == "" || *count < 1 || *senders < 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -url, -count >= 1 and -senders >= 1 are required")
		os.Exit(2)
	}
	transport := &http.Transport{
		MaxIdleConns:        *senders,
		MaxIdleConnsPerHost: *senders,
		MaxConnsPerHost:     *senders,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: transport, Timeout: 60 * time.Second}
	if *size < 8 {
		fmt.Fprintln(os.Stderr, "loadgen: -size is at least 8 (a JSON object)")
		os.Exit(2)
	}
	// {"p":"xxx...x"}: one JSON line of exactly SIZE bytes.
	body := append(append([]byte(`{"p":"`), bytes.Repeat([]byte("x"), *size-8)...), `"}`...)

	var next, ok, failed, errors int64
	latencies := make([][]time.Duration, *senders)
	statuses := sync.Map{}
	var wg sync.WaitGroup
	started := time.Now()
	for s := 0; s < *senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			mine := make([]time.Duration, 0, *count / *senders + 1)
			for atomic.AddInt64(&next, 1) <= int64(*count) {
				t := time.Now()
				response, err := client.Post(*url, "application/json", bytes.NewReader(body))
				if err != nil {
					atomic.AddInt64(&errors, 1)
					continue
				}
				_, _ = io.Copy(io.Discard, response.Body)
				response.Body.Close()
				mine = append(mine, time.Since(t))
				if response.StatusCode/100 == 2 {
					atomic.AddInt64(&ok, 1)
				} else {
					atomic.AddInt64(&failed, 1)
					statuses.Store(response.StatusCode, true)
				}
			}
			latencies[s] = mine
		}(s)
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	var all []time.Duration
	for _, mine := range latencies {
		all = append(all, mine...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	at := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(q * float64(len(all)-1))
		return float64(all[i].Microseconds()) / 1000
	}
	r := result{OK: ok, Failed: failed, Errors: errors, Seconds: elapsed,
		Rate: float64(ok) / elapsed, P50ms: at(0.50), P99ms: at(0.99), Maxms: at(1)}
	statuses.Range(func(key, _ any) bool { r.Status = append(r.Status, key.(int)); return true })
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}
