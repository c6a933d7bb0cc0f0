// Command receiver answers every POST with 204 and counts them; GET /stats gives
// {"count": N, "first_ns": T1, "last_ns": TN} (Unix nanoseconds of the first and the
// latest POST answered), so a bench times a sender at the receiving end, first
// request to last, start-up left out. Keep-alive, the standard library's server.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "HOST:PORT")
	flag.Parse()
	var mu sync.Mutex
	var count, first, last int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/stats" {
			mu.Lock()
			out, _ := json.Marshal(map[string]int64{"count": count, "first_ns": first, "last_ns": last})
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		now := time.Now().UnixNano()
		mu.Lock()
		if count == 0 {
			first = now
		}
		count++
		last = now
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
	server := &http.Server{Addr: *listen, Handler: http.HandlerFunc(handler)}
	if err := server.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
}
