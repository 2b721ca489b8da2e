#!/bin/sh
# deps.sh -- installs the Debian packages a make target needs, if missing.
# Usage: scripts/deps.sh build|test|fuzz|bench
# Only packages that are absent are installed (apt-get install -y); nothing
# happens when all are present, so every make target can call it cheaply.
set -e

build="gcc make pkg-config libevent-dev libhiredis-dev libjansson-dev"
# prometheus: a real scrape of /metrics; nodejs + npm: ioredis and node-redis
# (installed from tests/node/package.json by the tests) beside redis-py
test="$build libcmocka-dev python3 python3-pytest python3-redis redis-server redis-tools redis-sentinel prometheus nodejs"
fuzz="$build clang libclang-rt-14-dev"
bench="$test beanstalkd wrk"

case "$1" in
build) want=$build ;;
test) want=$test ;;
fuzz) want=$fuzz ;;
bench) want=$bench ;;
*) echo "usage: $0 build|test|fuzz|bench" >&2; exit 2 ;;
esac

missing=""
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing="$missing $p"
done
# npm comes with some builds of nodejs and as its own package with Debian's
if [ "$1" = test ] || [ "$1" = bench ]; then
    command -v npm >/dev/null 2>&1 || missing="$missing npm"
fi
[ -z "$missing" ] && exit 0

echo "deps: installing$missing" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2 || true
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >&2
