module github.com/golang/leveldb

go 1.22

require github.com/syndtr/goleveldb v1.0.0
