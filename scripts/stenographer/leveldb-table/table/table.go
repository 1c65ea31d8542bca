// Package table stands in for github.com/golang/leveldb/table, which the Go
// module proxy here does not serve, so that Stenographer's index reader
// (indexfile) builds unchanged. It offers the few calls indexfile makes
// (NewReader, Get, Find, Close) on top of goleveldb's sstable reader, which
// reads the same on-disk table format that stenotype writes with C++ leveldb.
package table

import (
	"errors"
	"io"
	"os"

	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/storage"
	gtable "github.com/syndtr/goleveldb/leveldb/table"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// File is what the reader needs of an index file: random reads and its size.
type File interface {
	io.ReaderAt
	io.Closer
	Stat() (os.FileInfo, error)
}

// Reader reads one sstable. A table that fails to open keeps its error and
// returns it from every call, as golang/leveldb's reader did.
type Reader struct {
	file File
	r    *gtable.Reader
	err  error
}

// NewReader opens the table in f; options are not used.
func NewReader(f File, _ interface{}) *Reader {
	st, err := f.Stat()
	if err != nil {
		return &Reader{file: f, err: err}
	}
	r, err := gtable.NewReader(f, st.Size(), storage.FileDesc{}, nil, nil, &opt.Options{})
	return &Reader{file: f, r: r, err: err}
}

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("leveldb/table: not found")

// Get returns the value stored under exactly key.
func (t *Reader) Get(key []byte, _ interface{}) ([]byte, error) {
	if t.err != nil {
		return nil, t.err
	}
	rkey, value, err := t.r.Find(key, false, nil)
	if err != nil {
		return nil, err
	}
	if string(rkey) != string(key) {
		return nil, ErrNotFound
	}
	return value, nil
}

// Iter walks keys in order from the key given to Find.
type Iter struct {
	it  iterator.Iterator
	err error
}

// Find returns an iterator positioned before the first key >= key.
func (t *Reader) Find(key []byte, _ interface{}) *Iter {
	if t.err != nil {
		return &Iter{err: t.err}
	}
	return &Iter{it: t.r.NewIterator(&util.Range{Start: key}, nil)}
}

// Next advances the iterator; false at the end or on an error.
func (i *Iter) Next() bool { return i.it != nil && i.it.Next() }

// Key is the current key.
func (i *Iter) Key() []byte { return i.it.Key() }

// Value is the current value.
func (i *Iter) Value() []byte { return i.it.Value() }

// Close releases the iterator and returns its error, if any.
func (i *Iter) Close() error {
	if i.it == nil {
		return i.err
	}
	err := i.it.Error()
	i.it.Release()
	return err
}

// Close closes the table and its file.
func (t *Reader) Close() error {
	if t.r != nil {
		t.r.Release()
	}
	return t.file.Close()
}
