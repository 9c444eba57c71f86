#!/usr/bin/env bash
# Session 57's device job (after the two toolchain calls; snap.tar at the repository root): MhcConfig.whole_wave
# (prediction in docs/predictions/norm_mhc.md, session 56) timed by `s56_a.sh waves`, decided here, then the norm gpu
# tier on the snapshot, with whole_wave=True written into sm_90a's default_config first when it passed (COMMIT gets
# "+ww"), so one machine start measures, decides and validates (~7 min on an H100).
# TIER=0 stops after the decision (a short budget: ~4 min instead of ~8).
# The rule: whole_wave's pre at least 1% faster at every T >= 2048 and both H, its post_pre no more than 1% slower.
set -uo pipefail
WAVES="whole_wave whole_wave_s3c5" bash scripts/jobs/s56_a.sh waves
verdict=$(python3 - "$OUT/norm56_waves.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception as exc:  # no report: no decision
    print(f"none ({type(exc).__name__})"); sys.exit()
t = {(r["case"], r["shape"]["T"], r["shape"]["H"], r["impl"]): r["time_us"] for r in rows if r["case"] in ("pre", "post_pre")}
ok, lines = True, []
for (case, T, H, impl), base in sorted(t.items()):
    if impl != "b12x" or T < 2048 or (case, T, H, "whole_wave") not in t:
        continue
    ww = t[(case, T, H, "whole_wave")]
    rel = ww / base - 1
    good = rel <= -0.01 if case == "pre" else rel <= 0.01
    ok &= good
    lines.append(f"{case} T={T} H={H}: {base:.1f} -> {ww:.1f} us ({100 * rel:+.1f}%) {'ok' if good else 'MISS'}")
print("\n".join(lines), file=sys.stderr)
print("pass" if ok and lines else "fail")
PY
)
echo "whole_wave rule: $verdict"
if [[ $verdict == pass ]]; then
  rm -rf /tmp/ww && mkdir -p /tmp/ww && tar xf snap.tar -C /tmp/ww && f=/tmp/ww/flashinfer/experimental/b12x/norm/mhc/_config.py
  sed -i 's/return dataclasses.replace(base, wide=wide, small_launches=SMALL_LAUNCHES_90)/return dataclasses.replace(base, wide=wide, small_launches=SMALL_LAUNCHES_90, whole_wave=True)/' "$f"
  grep -c "whole_wave=True)" "$f" && echo "$(cat /tmp/ww/COMMIT)+ww" >/tmp/ww/COMMIT && tar cf snap.tar -C /tmp/ww .
fi
[[ ${TIER:-1} == 0 ]] || bash scripts/jobs/s56_b.sh
