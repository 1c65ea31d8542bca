#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft, broker and controller in one process) for
# poolcap's tests and benchmarks of `probe --kafka`. Kafka is not packaged by Debian, so its
# jars come from Maven Central (the committed pom.xml, Debian's maven and openjdk-17),
# fetched once into $POOLCAP_KAFKA_CACHE (default /var/cache/poolcap-kafka).
#
#   scripts/kafka.sh fetch               fetch the jars if missing; prints the lib directory
#   scripts/kafka.sh run DIR [PORT]      format DIR and run the broker in the foreground on
#                                        127.0.0.1:PORT (default 9092) until SIGTERM
#
# The broker listens on the loopback of the namespace it runs in: run it with
# `ip netns exec NS scripts/kafka.sh run DIR` next to a probe in the same namespace.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${POOLCAP_KAFKA_CACHE:-/var/cache/poolcap-kafka}"
lib="$cache/lib"

fetch() {
  if [ -f "$lib/.complete" ]; then
    echo "$lib"
    return
  fi
  for tool in mvn java; do
    command -v "$tool" >/dev/null || { echo "kafka.sh: $tool is missing (apt-get install maven openjdk-17-jre-headless)" >&2; exit 1; }
  done
  mkdir -p "$cache"
  rm -rf "$lib.tmp"
  mvn -q -B -f "$here/kafka/pom.xml" -Dmaven.repo.local="$cache/m2" \
      dependency:copy-dependencies -DoutputDirectory="$lib.tmp" >&2 \
    || { echo "kafka.sh: cannot fetch Kafka from Maven Central" >&2; exit 1; }
  rm -rf "$lib"
  mv "$lib.tmp" "$lib"
  touch "$lib/.complete"
  echo "$lib"
}

run() {
  local dir="$1" port="${2:-9092}"
  fetch >/dev/null
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$((port + 1))
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=2
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  local cp="$lib/*"
  local id
  id="$(java -cp "$cp" kafka.tools.StorageTool random-uuid)"
  java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" --standalone >&2
  exec java -Xmx512m -XX:+UseSerialGC -cp "$cp" kafka.Kafka "$dir/server.properties"
}

case "${1:-}" in
  fetch) fetch ;;
  run) [ $# -ge 2 ] || { echo "usage: kafka.sh run DIR [PORT]" >&2; exit 2; }; run "$2" "${3:-}" ;;
  *) echo "usage: kafka.sh fetch | run DIR [PORT]" >&2; exit 2 ;;
esac
