#!/bin/sh
# install.sh PREFIX: installs the redis-rl module of this tarball under PREFIX.
#   PREFIX/lib/libredis_rl.so               the module
#   PREFIX/etc/redis.conf                   a redis.conf loading it by absolute path, so
#                                           `redis-server PREFIX/etc/redis.conf` works from any
#                                           directory (an existing one is kept: the new one is
#                                           written as redis.conf.new)
#   PREFIX/var/                             redis-server's working directory (dump.rdb)
#   PREFIX/share/redis-rl/redis-rl.service  a hardened systemd unit for that redis.conf
#   PREFIX/share/doc/redis-rl/              README, CHANGELOG, LICENSE, THIRD-PARTY-NOTICES
# For a Redis you run already, add the line this prints to its configuration instead.
set -eu

usage() { echo "usage: $0 PREFIX   (for example: $0 /opt/redis-rl)" >&2; exit 2; }
[ $# -eq 1 ] && [ -n "$1" ] || usage
here=$(cd "$(dirname "$0")" && pwd)
case $1 in /*) prefix=$1 ;; *) prefix=$(pwd)/$1 ;; esac
# redis.conf quotes the paths; the systemd unit reads % as a specifier; sed uses #.
case $prefix in
*'"'* | *'\'* | *%* | *'#'* | *"
"*) echo "install.sh: PREFIX may not hold a quote, a backslash, %, # or a newline: $prefix" >&2; exit 2 ;;
esac
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

mkdir -p "$prefix/lib" "$prefix/etc" "$prefix/var" "$prefix/share/redis-rl" "$prefix/share/doc/redis-rl"
# A new file renamed over the old one: a running server keeps the mapping it loaded.
cp "$here/libredis_rl.so" "$prefix/lib/.libredis_rl.so.new"
chmod 0755 "$prefix/lib/.libredis_rl.so.new"
mv -f "$prefix/lib/.libredis_rl.so.new" "$prefix/lib/libredis_rl.so"
for doc in README.md CHANGELOG.md LICENSE THIRD-PARTY-NOTICES.md; do
  cp "$here/$doc" "$prefix/share/doc/redis-rl/$doc"
done

conf=$prefix/etc/redis.conf
[ -e "$conf" ] && conf=$prefix/etc/redis.conf.new
cat > "$conf" <<EOF
# Written by redis-rl's install.sh $(cat "$here/VERSION") for $prefix. The module is named
# by absolute path, so \`redis-server $prefix/etc/redis.conf\` works from any directory.
port 6379
bind 127.0.0.1 -::1
protected-mode yes
loadmodule "$prefix/lib/libredis_rl.so"
# Limiter state, bans and quotas survive a restart through RDB snapshots in this directory
# (the systemd unit passes --dir /var/lib/redis-rl instead).
dir "$prefix/var"
save 3600 1 300 100 60 10000
appendonly no
EOF
# The unit names PREFIX in a quoted ExecStart argument and in a file:// URL (a space as %20,
# written %%20 since % starts a systemd specifier).
url_prefix=$(printf '%s' "$prefix" | sed 's/ /%%20/g')
sed -e "/^Documentation=/s#/opt/redis-rl#$url_prefix#" -e "s#/opt/redis-rl#$prefix#g" \
  "$here/redis-rl.service" > "$prefix/share/redis-rl/redis-rl.service"

echo "installed redis-rl $(cat "$here/VERSION") in $prefix"
echo "  start:   redis-server $conf"
echo "  systemd: cp $prefix/share/redis-rl/redis-rl.service /etc/systemd/system/ && systemctl enable --now redis-rl"
echo "  an existing Redis: add to its configuration"
echo "    loadmodule \"$prefix/lib/libredis_rl.so\""
