# Toxiproxy's faults, for the scripts that put a link through it (e2e/faults.sh, e2e/soak.sh).
# Source it with TOXI set to Toxiproxy's API (http://127.0.0.1:PORT).

toxi() { # method path [json]: Toxiproxy's API; fails on an HTTP error
  curl -sf --max-time 5 -X "$1" "$TOXI$2" ${3:+-H 'Content-Type: application/json' -d "$3"} >/dev/null
}

# The toxic(s) of KIND on LINK (a proxy's name): latency50 (50 ms ± 20), latency400, timeout
# (answers never come: the link accepts and drops what the server sends), reset (each
# connection reset by peer 200 ms after the toxic meets it), bandwidth (64 KB/s each way),
# partition (the proxy disabled: connections cut, new ones refused).
toxic_on() { # link kind
  local p="/proxies/$1/toxics"
  case $2 in
    latency50) toxi POST "$p" '{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":50,"jitter":20}}' ;;
    latency400) toxi POST "$p" '{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":400,"jitter":0}}' ;;
    timeout) toxi POST "$p" '{"name":"f","type":"timeout","stream":"downstream","attributes":{"timeout":0}}' ;;
    reset) toxi POST "$p" '{"name":"f","type":"reset_peer","stream":"downstream","attributes":{"timeout":200}}' ;;
    bandwidth)
      toxi POST "$p" '{"name":"f","type":"bandwidth","stream":"downstream","attributes":{"rate":64}}'
      toxi POST "$p" '{"name":"f2","type":"bandwidth","stream":"upstream","attributes":{"rate":64}}'
      ;;
    partition) toxi POST "/proxies/$1" '{"enabled":false}' ;;
    *) echo "toxic_on: unknown kind '$2'" >&2; return 2 ;;
  esac
}
toxic_off() { # link kind
  case $2 in
    partition) toxi POST "/proxies/$1" '{"enabled":true}' ;;
    bandwidth) toxi DELETE "/proxies/$1/toxics/f" && toxi DELETE "/proxies/$1/toxics/f2" ;;
    *) toxi DELETE "/proxies/$1/toxics/f" ;;
  esac
}
