#!/usr/bin/env bash
# Builds Google Stenographer's packet writer (stenotype) and a query command over its files
# (stenoquery) from a Stenographer source tree, for `poolcap bench store`'s Stenographer
# peer. The bench finds both on PATH and skips the peer with one line when they are absent.
#
#   scripts/stenotype.sh SRC [OUT]     (as root: it installs Debian packages)
#
# SRC is Stenographer's source (the repository's top directory); OUT, where the two
# programs go, defaults to /usr/local/bin. Nothing in SRC is changed: both are built in a
# temporary copy.
#
# stenotype: Debian's libleveldb-dev, libsnappy-dev, libaio-dev and libseccomp-dev, then
# `make` in stenotype/, with one fix: at exit its Output::Flush marks the open file for
# closing but closes it only when a write completes afterwards, so when every write had
# completed already it waits forever (the file stays hidden, the process never exits, and
# its watchdog aborts it two minutes later). The fix closes that file at once, as Rotate
# already does; nothing on the capture path changes.
#
# stenoquery (scripts/stenographer/stenoquery): Stenographer's own lookup packages
# (query, blockfile, indexfile, base) driven without its server. The server does not build
# here: the Go module proxy refuses github.com/golang/leveldb (its index reader), and the
# fetched source lacks the server's `thread` package. The index reader is swapped through a
# go.mod `replace` for a small stand-in over goleveldb's sstable reader
# (scripts/stenographer/leveldb-table), which reads the same table format. Needs `go`;
# without it only stenotype is built.
set -euo pipefail
SRC=${1:?usage: scripts/stenotype.sh SRC [OUT]}
OUT=${2:-/usr/local/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -f "$SRC/stenotype/stenotype.cc" ] || { echo "stenotype.sh: $SRC is not a Stenographer source tree" >&2; exit 1; }
SRC=$(cd "$SRC" && pwd)
BUILD=$(mktemp -d /var/tmp/stenotype-build.XXXXXX)
trap 'rm -rf "$BUILD"' EXIT
mkdir -p "$OUT"

export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq g++ make libleveldb-dev libsnappy-dev libaio-dev libseccomp-dev >/dev/null

cp -a "$SRC/." "$BUILD/src"
fix='    current_->RequestClose();\n    RETURN_IF_ERROR(MaybeCloseFile(current_), "flush close");\n    current_ = NULL;\n  }\n  while (files_.size()) {'
python3 - "$BUILD/src/stenotype/aio.cc" "$fix" <<'EOF'
import sys
path, fix = sys.argv[1], sys.argv[2].replace("\\n", "\n")
text = open(path).read()
old = "    current_->RequestClose();\n    current_ = NULL;\n  }\n  while (files_.size()) {"
if text.count(old) != 1:
    sys.exit("stenotype.sh: aio.cc's Output::Flush is not the one this fix expects")
open(path, "w").write(text.replace(old, fix))
EOF
make -C "$BUILD/src/stenotype" -s clean stenotype
install -m 0755 "$BUILD/src/stenotype/stenotype" "$OUT/stenotype"
echo "stenotype.sh: built $OUT/stenotype"

if ! command -v go >/dev/null; then
  echo "stenotype.sh: no go: stenoquery not built"
  exit 0
fi
cp -a "$HERE/stenographer/leveldb-table" "$BUILD/leveldb-table"
cp -a "$HERE/stenographer/stenoquery" "$BUILD/src/stenoquery"
cat >"$BUILD/src/go.mod" <<'EOF'
module github.com/google/stenographer

go 1.22

require (
	github.com/golang/leveldb v0.0.0-00010101000000-000000000000
	github.com/google/gopacket v1.1.19
	golang.org/x/net v0.62.0
)

replace github.com/golang/leveldb => ../leveldb-table
EOF
(cd "$BUILD/src" && GOFLAGS=-mod=mod go build -o "$OUT/stenoquery" ./stenoquery)
echo "stenotype.sh: built $OUT/stenoquery"
