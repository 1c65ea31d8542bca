// Command stenoquery answers a Stenographer query over the files stenotype
// wrote, without the stenographer server: the server's per-thread file
// tracking (package thread) is missing from the fetched source, and its
// HTTPS front end adds nothing to the cost of a lookup. It does what the
// server's lookup does: per stenotype thread, look the query up in each
// blockfile's index in file order and read the matching packets; merge the
// threads by time; write one pcap stream to stdout.
//
// Usage: stenoquery DIR QUERY   (DIR holds stenotype's PKTn/ and IDXn/)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/stenographer/base"
	"github.com/google/stenographer/blockfile"
	"github.com/google/stenographer/filecache"
	"github.com/google/stenographer/query"
	"golang.org/x/net/context"
)

func main() {
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: stenoquery DIR QUERY")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "stenoquery:", err)
		os.Exit(1)
	}
}

func run(dir, queryText string) error {
	q, err := query.NewQuery(queryText)
	if err != nil {
		return fmt.Errorf("query %q: %v", queryText, err)
	}
	indexDirs, err := filepath.Glob(filepath.Join(dir, "IDX*"))
	if err != nil || len(indexDirs) == 0 {
		return fmt.Errorf("%s holds no stenotype IDXn directory", dir)
	}
	sort.Strings(indexDirs)
	fc := filecache.NewCache(1000)
	ctx := context.Background()
	var threads []*base.PacketChan
	for _, indexDir := range indexDirs {
		packetDir := filepath.Join(dir, "PKT"+strings.TrimPrefix(filepath.Base(indexDir), "IDX"))
		files, err := threadFiles(indexDir, packetDir, fc)
		if err != nil {
			return err
		}
		threads = append(threads, lookupThread(ctx, files, q))
	}
	return base.PacketsToFile(base.MergePacketChans(ctx, threads), os.Stdout, base.Limit{})
}

// threadFiles opens, in name (so time) order, the blockfiles of one thread
// that have a finished index; stenotype writes an index after its blockfile.
func threadFiles(indexDir, packetDir string, fc *filecache.Cache) ([]*blockfile.BlockFile, error) {
	entries, err := os.ReadDir(indexDir)
	if err != nil {
		return nil, err
	}
	var files []*blockfile.BlockFile
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		bf, err := blockfile.NewBlockFile(filepath.Join(packetDir, e.Name()), fc)
		if err != nil {
			return nil, err
		}
		files = append(files, bf)
	}
	return files, nil
}

func lookupThread(ctx context.Context, files []*blockfile.BlockFile, q query.Query) *base.PacketChan {
	inputs := make(chan *base.PacketChan, len(files))
	for _, f := range files {
		packets := base.NewPacketChan(100)
		inputs <- packets
		go f.Lookup(ctx, q, packets)
	}
	close(inputs)
	return base.ConcatPacketChans(ctx, inputs)
}
