# The buyer's page's pieces, shared by e2e/browser.sh (the browser tests) and e2e/demo.sh
# (sourced, not run): the browser and its driver, and the demo's stand-in shop login.

# Installs what the browser tests need when missing: Chromium from Debian (with a CJK font, so
# the page's Chinese renders in screenshots), Node.js and npm, and the npm packages pinned in
# e2e/browser/package-lock.json (`npm ci`).
browser_install() {
  local missing=()
  [[ -x /usr/bin/chromium ]] || missing+=(chromium)
  fc-list 2>/dev/null | grep -qi 'CJK' || missing+=(fonts-noto-cjk)
  command -v npm >/dev/null || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    printf '%s page: installing %s\n' "$(date -u +%H:%M:%S)" "${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if [[ ! -d "$ROOT/e2e/browser/node_modules/playwright-core" ]]; then
    (cd "$ROOT/e2e/browser" && npm ci --no-audit --no-fund)
  fi
}

# Appends to gateway server file FILE the shop route /login to the demo's stand-in login
# (demo-login, on 127.0.0.1:PORT). Only the demo's and the tests' own files have it: a real
# shop's /login is its own auth service.
# -- the rest of the shop during the sale --
# THE DEMO'S shop route: demo-login's /shop page, read every 10 ms by seckill-load --shop.
demo_shop_route() { # file port
  cat >>"$1" <<TOML

# THE DEMO'S stand-in shop page (demo-login): the rest of the shop, measured during the sale.
[[route]]
name = "shop"
path_prefix = "/shop"
upstreams = ["127.0.0.1:$2"]
connect_timeout_ms = 200
read_timeout_ms = 2000
health_check_interval_ms = 1000
TOML
}
# -- end of the shop --

demo_login_route() { # file port
  cat >>"$1" <<TOML

# THE DEMO'S stand-in shop login (demo-login): never in a real deployment.
[[route]]
name = "demo-login"
path_prefix = "/login"
upstreams = ["127.0.0.1:$2"]
connect_timeout_ms = 200
read_timeout_ms = 2000
health_check_interval_ms = 1000
TOML
}
