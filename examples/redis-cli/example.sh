#!/usr/bin/env bash
# The throttle module from plain redis-cli: every algorithm once, a peek, a
# refund, an error, and redis-cell's CL.THROTTLE when the module has it.
# Each reply is compared with the one docs/commands.md documents; time is driven
# with AT so the numbers are exact. Exits 1 on the first mismatch.
#
#   REDIS_PORT=6399 examples/redis-cli/example.sh      (after `make run`)
set -euo pipefail
cli=(redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6399}")

# check "expected reply, space separated" COMMAND args...
check() {
  local want="$1"; shift
  local got
  got="$("${cli[@]}" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//')"
  printf '> %s\n  %s\n' "$*" "$got"
  if [ "$got" != "$want" ]; then
    printf 'MISMATCH: expected  %s\n' "$want" >&2
    exit 1
  fi
}

p=example:cli
"${cli[@]}" DEL $p:login $p:sms $p:api $p:report $p:cell >/dev/null

# Reply: allowed limit remaining retry_after(ms) reset_after(ms)
echo "# THROTTLE.FIXED: 3 logins a minute; the window opens at the first call"
t=1700000000000000
check "1 3 2 0 60000" THROTTLE.FIXED $p:login 3 1m AT $t
check "1 3 0 0 30000" THROTTLE.FIXED $p:login 3 1m COST 2 AT $((t + 30000000))
check "0 3 0 15000 15000" THROTTLE.FIXED $p:login 3 1m AT $((t + 45000000))
check "thr-fixed" TYPE $p:login

echo "# THROTTLE.SLIDING EXACT: never more than 3 SMS in any hour"
check "1 3 2 0 3600000" THROTTLE.SLIDING $p:sms 3 1h EXACT AT $t
check "1 3 1 0 3600000" THROTTLE.SLIDING $p:sms 3 1h EXACT AT $((t + 1000000000))
check "1 3 0 0 3600000" THROTTLE.SLIDING $p:sms 3 1h EXACT AT $((t + 2000000000))
check "0 3 0 600000 2600000" THROTTLE.SLIDING $p:sms 3 1h EXACT AT $((t + 3000000000))

echo "# THROTTLE.TOKEN: bursts of 20, refilled at 10 a second; COST 0 peeks"
check "1 20 0 0 2000" THROTTLE.TOKEN $p:api 10 1s BURST 20 COST 20 AT 0
check "0 20 0 50 1950" THROTTLE.TOKEN $p:api 10 1s BURST 20 AT 50000
check "1 20 1 0 1900" THROTTLE.TOKEN $p:api 10 1s BURST 20 COST 0 AT 100000
check "1 20 0 0 2000" THROTTLE.TOKEN $p:api 10 1s BURST 20 AT 100000

echo "# THROTTLE.LEAKY: admitted calls learn how long to wait (the queue delay)"
check "1 3 2 0 100" THROTTLE.LEAKY $p:sms:gw 10 1s BURST 3 AT 0
check "1 3 1 100 200" THROTTLE.LEAKY $p:sms:gw 10 1s BURST 3 AT 0
check "1 3 0 200 300" THROTTLE.LEAKY $p:sms:gw 10 1s BURST 3 AT 0
check "0 3 0 100 300" THROTTLE.LEAKY $p:sms:gw 10 1s BURST 3 AT 0

echo "# a refund (negative COST) gives back units a caller reserved but did not use"
check "1 100 90 0 3600000" THROTTLE.FIXED $p:report 100 1h COST 10 AT $t
check "1 100 95 0 3600000" THROTTLE.FIXED $p:report 100 1h COST -5 AT $t

echo "# errors name the argument; being limited is never an error"
check "ERR invalid limit: expected an integer from 1 to 1000000000000000" THROTTLE.FIXED $p:x 0 1s
check "ERR option BURST is not valid for THROTTLE.FIXED" THROTTLE.FIXED $p:x 1 1s BURST 2

# redis-cell's command, when the module registers it (module argument
# cl-throttle yes, the default, in releases that ship it): its README's
# example on a fresh key. Reply: limited max_burst+1 remaining retry_after(s) reset_after(s).
if [ -n "$("${cli[@]}" COMMAND INFO CL.THROTTLE | tr -d '[:space:]')" ]; then
  echo "# CL.THROTTLE: redis-cell clients work unchanged"
  check "0 16 15 -1 2" CL.THROTTLE $p:cell 15 30 60
  check "thr-token" TYPE $p:cell
else
  echo "# CL.THROTTLE is not registered on this server: skipped"
fi

"${cli[@]}" DEL $p:login $p:sms $p:api $p:sms:gw $p:report $p:cell >/dev/null
echo "redis-cli example: every reply as expected"
