// unwind_go - a Go workload: main.main -> main.run -> main.hashRounds ->
// main.hashBlock, on the main goroutine. usage: unwind_go SECONDS
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

//go:noinline
func hashBlock(b []byte, h uint64) uint64 {
	for i := 0; i < 40; i++ {
		for _, c := range b {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	return h
}

//go:noinline
func hashRounds(blocks [][]byte, h uint64) uint64 {
	for _, b := range blocks {
		h = hashBlock(b, h)
	}
	return h
}

//go:noinline
func run(seconds float64) uint64 {
	blocks := make([][]byte, 32)
	for i := range blocks {
		blocks[i] = make([]byte, 256)
		for j := range blocks[i] {
			blocks[i][j] = byte(i + j)
		}
	}
	start := time.Now()
	h := uint64(14695981039346656037)
	for time.Since(start).Seconds() < seconds {
		h = hashRounds(blocks, h)
	}
	return h
}

func main() {
	seconds := 10.0
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			seconds = v
		}
	}
	start := time.Now()
	h := run(seconds)
	fmt.Printf("{\"cpu_seconds\": %.3f, \"h\": %d}\n", time.Since(start).Seconds(), h%10)
}
