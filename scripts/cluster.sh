#!/usr/bin/env bash
# cluster.sh — a cluster of "nodes" on one machine, for multi-node tests and benchmarks
# (docs/cluster.md). Root only. Nodes are network namespaces joined by a bridge that lives in a
# namespace of its own, so the host's network is never touched.
#
#   cluster.sh up N                  nodes node1..nodeN, 10.231.0.K/24, own host names and hosts files
#   cluster.sh shape RATE [DELAY]    tbf at RATE (e.g. 100mbit) on both ends of every node's link;
#                                    DELAY (e.g. 1ms) through netem only where the kernel has it
#   cluster.sh shape none            removes the shaping
#   cluster.sh link NODE down|up     cuts / restores NODE's link (its switch port)
#   cluster.sh run HOSTFILE NP ARGS  mpirun from node1 with configs/mpi_cluster.tune, the subnet, the agent
#   cluster.sh down                  removes what up made (safe to call twice)
#   cluster.sh stats                 bytes each switch port sent to its node, one line per node
#
# Every name starts with TED_CLUSTER_PREFIX (default "tedc"): namespaces PREFIX_sw and PREFIX_nodeK,
# host files under /etc/netns/PREFIX_nodeK/. Two clusters need two prefixes.
set -euo pipefail
P=${TED_CLUSTER_PREFIX:-tedc}
SW=${P}_sw
NET=10.231.0
STATE=/run/$P.cluster   # holds N while the cluster is up
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/scripts/cluster.sh

die() { echo "cluster.sh: $*" >&2; exit 2; }
need_root() { [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces); run it as root"; }
nodes() { [ -f "$STATE" ] || die "no cluster is up (cluster.sh up N first)"; cat "$STATE"; }
ns() { echo "${P}_$1"; }   # node1 -> tedc_node1

up() {
  local n=${1:-}
  [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "up: N must be 1..99, got '${n}'"
  [ -f "$STATE" ] && die "a cluster '$P' is already up ($(cat "$STATE") nodes); cluster.sh down first"
  ! ip netns list | grep -q "^${P}_" || die "namespaces named ${P}_* exist and are not this cluster's; set TED_CLUSTER_PREFIX"
  echo "$n" > "$STATE"   # first, so that down can clean up a partial up
  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  for k in $(seq "$n"); do
    local node=node$k; local nsn; nsn=$(ns $node)
    ip netns add "$nsn"
    ip -n "$SW" link add "p$k" type veth peer name eth0 netns "$nsn"
    ip -n "$SW" link set "p$k" master br0 up
    ip -n "$nsn" link set lo up
    ip netns exec "$nsn" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
    ip -n "$nsn" addr add "$NET.$k/24" dev eth0
    ip -n "$nsn" link set eth0 up
    mkdir -p "/etc/netns/$nsn"
    { echo "127.0.0.1 localhost"; for j in $(seq "$n"); do echo "$NET.$j node$j"; done; } > "/etc/netns/$nsn/hosts"
  done
  echo "cluster '$P': $n nodes node1..node$n on $NET.0/24"
}

down() {
  local n=0
  [ -f "$STATE" ] && n=$(cat "$STATE")
  for k in $(seq "$n"); do
    local nsn; nsn=$(ns node$k)
    ip netns pids "$nsn" 2>/dev/null | xargs -r kill -9 2>/dev/null || true   # processes left in the node
    ip netns del "$nsn" 2>/dev/null || true
    rm -rf "/etc/netns/${nsn:?}"
  done
  ip netns del "$SW" 2>/dev/null || true
  rm -f "$STATE"
}

# tbf on the node's eth0 (node -> switch) and on its switch port (switch -> node)
shape() {
  local rate=${1:-} delay=${2:-} n; n=$(nodes)
  [ -n "$rate" ] || die "shape: give a RATE (e.g. 100mbit, 1gbit) or 'none'"
  local netem=0
  if [ -n "$delay" ]; then
    if ip -n "$SW" link add tnetem type dummy 2>/dev/null && ip -n "$SW" link set tnetem up \
       && tc -n "$SW" qdisc add dev tnetem root netem delay "$delay" 2>/dev/null; then netem=1
    else echo "cluster.sh: this kernel has no netem: delay $delay skipped"; fi
    ip -n "$SW" link del tnetem 2>/dev/null || true
  fi
  for k in $(seq "$n"); do
    local a=("-n" "$(ns node$k)" "eth0") b=("-n" "$SW" "p$k")
    for d in a b; do
      local -n e=$d
      tc "${e[0]}" "${e[1]}" qdisc del dev "${e[2]}" root 2>/dev/null || true
      [ "$rate" = none ] && continue
      if [ $netem = 1 ]; then
        tc "${e[0]}" "${e[1]}" qdisc add dev "${e[2]}" root handle 1: netem delay "$delay"
        tc "${e[0]}" "${e[1]}" qdisc add dev "${e[2]}" parent 1: handle 2: tbf rate "$rate" burst 256kb latency 50ms
      else
        tc "${e[0]}" "${e[1]}" qdisc add dev "${e[2]}" root tbf rate "$rate" burst 256kb latency 50ms
      fi
    done
  done
  if [ "$rate" = none ]; then echo "links unshaped"
  else echo "links shaped: $rate$([ $netem = 1 ] && echo ", delay $delay")"; fi
}

link() {
  local node=${1:-} st=${2:-} n; n=$(nodes)
  [[ "$node" =~ ^node([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -le "$n" ] \
    || die "link: no node '$node' (node1..node$n)"
  [[ "$st" = up || "$st" = down ]] || die "link: say up or down, got '$st'"
  local k=${BASH_REMATCH[1]}
  ip -n "$SW" link set "p$k" "$st"
  [ "$st" = up ] || return 0
  # back when the node and another node reach each other (a refused TCP connection is an answer)
  local other=$((k == 1 ? 2 : 1)) i
  [ "$n" -ge 2 ] || return 0
  for i in $(seq 50); do
    if reaches "node$k" "$NET.$other" && reaches "node$other" "$NET.$k"; then return 0; fi
    sleep 0.2
  done
  die "link: node$k does not answer after 10 s"
}
reaches() {   # NODE ADDR: a TCP connection from NODE to ADDR is answered (port 9: refused)
  local out; out=$(ip netns exec "$(ns "$1")" timeout 1 bash -c "echo > /dev/tcp/$2/9" 2>&1 || true)
  [[ "$out" == *refused* ]]
}

# The remote-shell agent Open MPI calls as `AGENT HOST CMD...`: enters HOST's namespace with its own
# host name (unshare -u) and runs CMD with a shell, as ssh would.
agent() {
  local host=$1; shift
  [ -d "/etc/netns/$(ns "$host")" ] || die "agent: no node '$host' in cluster '$P'"
  exec ip netns exec "$(ns "$host")" unshare -u sh -c 'hostname "$0"; eval "$1"' "$host" "$*"
}

run() {
  local hostfile=${1:-} np=${2:-}
  [ -f "$hostfile" ] || die "run: no hostfile '$hostfile'"
  [[ "$np" =~ ^[1-9][0-9]*$ ]] || die "run: NP must be a positive number, got '$np'"
  shift 2
  nodes >/dev/null
  local hf; hf=$(cd "$(dirname "$hostfile")" && pwd)/$(basename "$hostfile")
  agent node1 mpirun --allow-run-as-root --tune "$ROOT/configs/mpi_cluster.tune" \
    --mca plm_rsh_agent "'$SELF agent'" --mca btl tcp,vader,self \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    --hostfile "'$hf'" -np "$np" "$(printf "'%s' " "$@")"
}

# bytes each switch port sent to its node (the port's kernel counter): the traffic between nodes
stats() {
  local n; n=$(nodes)
  for k in $(seq "$n"); do echo "node$k $(ip netns exec "$SW" cat "/sys/class/net/p$k/statistics/tx_bytes")"; done
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  up) need_root; up "$@" ;;
  down) need_root; down ;;
  shape) need_root; shape "$@" ;;
  link) need_root; link "$@" ;;
  run) need_root; run "$@" ;;
  agent) agent "$@" ;;
  stats) need_root; stats ;;
  *) die "usage: cluster.sh up N | shape RATE [DELAY] | link NODE down|up | run HOSTFILE NP ARGS... | down" ;;
esac
