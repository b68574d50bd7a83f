#!/usr/bin/env bash
# plot.sh LOG.jsonl — draws a `ted train --log` file into LOG.png (LOG with .png for .jsonl)
# with gnuplot, and prints the PNG's path. `make plot LOG=path.jsonl` calls it.
# - the training `loss` of every step, faint, and its exponential moving average (over about
#   1/40 of the run), bold; the `val_loss` of the evaluation lines as large points;
# - a log-scale y-axis clipped to the useful range: from just under the lowest loss up to the
#   smoothed loss after the first 5 % of the steps (the first steps' loss would squash the rest);
# - tokens seen on the top axis (step x tokens_per_step of the log's run record, when present).
# A step logged twice (a resumed run appending to its log) counts with its last line, so a
# resumed log plots as one run; lines that are not JSON objects (a line cut off by a crash) are
# skipped. Errors (a missing or empty log, no step in it, no gnuplot): one line on stderr, exit 2.
set -euo pipefail
PY=/usr/bin/python3
die() { echo "plot.sh: $*" >&2; exit 2; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: bash scripts/plot.sh LOG.jsonl (or make plot LOG=LOG.jsonl)"
log=$1
[ -e "$log" ] || die "$log: no such file"
[ -f "$log" ] || die "$log: not a regular file"
[ -r "$log" ] || die "$log: cannot read"
[ -s "$log" ] || die "$log: empty log"
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"
[ -x "$PY" ] || die "$PY is needed to read the log"

case "$log" in
  *.jsonl) png=${log%.jsonl}.png ;;
  *) png=$log.png ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the columns: train.dat "step loss", smooth.dat "step average", val.dat "step val_loss", sorted
# by step; range.txt "ymin ymax tokens_per_step ytick,ytick,..."
"$PY" - "$log" "$work" <<'PYEOF' || exit 2
import json, math, sys
path, out = sys.argv[1], sys.argv[2]
train, val, tps = {}, {}, 0
try:
    lines = open(path, encoding='utf-8', errors='replace').read().splitlines()
except OSError as e:
    sys.exit(f'plot.sh: {path}: cannot read: {e.strerror}')
def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
for line in lines:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if not isinstance(o, dict):
        continue
    if isinstance(o.get('run'), dict) and num(o['run'].get('tokens_per_step')):
        tps = o['run']['tokens_per_step']
    if not num(o.get('step')):
        continue
    if num(o.get('val_loss')):
        val[o['step']] = o['val_loss']
    elif num(o.get('loss')):
        train[o['step']] = o['loss']
if not train and not val:
    sys.exit(f'plot.sh: {path}: no "loss" or "val_loss" lines (not a ted train --log file?)')
steps = sorted(train)
alpha = min(1.0, 40.0 / max(len(steps), 1))
smooth, avg = {}, None
for s in steps:
    avg = train[s] if avg is None else avg + alpha * (train[s] - avg)
    smooth[s] = avg
for name, d in (('train.dat', train), ('smooth.dat', smooth), ('val.dat', val)):
    with open(f'{out}/{name}', 'w') as f:
        for s in sorted(d):
            f.write(f'{s!r} {d[s]!r}\n')
positive = [v for v in list(train.values()) + list(val.values()) if v > 0]
lo = min(positive) if positive else 1e-3
hi = max([smooth[steps[len(steps) // 20]]] if steps else [] + [lo])
hi = max([hi] + list(val.values()))
if hi <= lo:
    hi = lo * 1.5
lo, hi = lo * 0.97, hi * 1.05
# about six labelled ticks (a log axis over less than a decade would show none)
step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 1e9) if (hi - lo) / s <= 7)
ticks = [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)] or [lo]
with open(f'{out}/range.txt', 'w') as f:
    f.write(f'{lo!r} {hi!r} {tps!r} ' + ','.join(f'{t:g}' for t in ticks) + '\n')
PYEOF
ntrain=$(wc -l <"$work/train.dat")
nval=$(wc -l <"$work/val.dat")
read -r ymin ymax tps yticks <"$work/range.txt"

if gnuplot -e 'set terminal' 2>&1 | grep -qw pngcairo; then
  term='pngcairo size 1000,600 font ",11"'
else
  term='png size 1000,600'
fi
# few points: draw the markers too, or a single point would not show
tstyle='lines lw 1'
[ "$ntrain" -lt 40 ] && tstyle='linespoints lw 1 pt 7 ps 0.6'

cat >"$work/plot.gp" <<EOF
set terminal $term
set output ARG1
set title ARG4 noenhanced
set xlabel "step"
set ylabel "loss (nats/token, log scale)"
set logscale y
set yrange [$ymin:$ymax]
set ytics ($yticks)
set mytics 1
set grid
set key top right
EOF
if "$PY" -c "import sys; sys.exit(0 if float('$tps') > 0 else 1)"; then
  cat >>"$work/plot.gp" <<EOF
set xtics nomirror
set link x2 via x*$tps inverse x/$tps
set x2label "tokens seen"
set x2tics
set format x2 "%.1s%c"
EOF
fi
plots=()
if [ "$ntrain" -gt 0 ]; then
  plots+=("ARG2 using 1:2 with $tstyle lc rgb '#a6c8e6' title 'train loss'")
  plots+=("ARG5 using 1:2 with lines lw 2.5 lc rgb '#1f4e9c' title 'train loss, moving average'")
fi
[ "$nval" -gt 0 ] && plots+=("ARG3 using 1:2 with linespoints lw 2 pt 7 ps 1.5 lc rgb '#d62728' title 'val loss'")
{
  printf 'plot %s' "${plots[0]}"
  for p in "${plots[@]:1}"; do printf ', \\\n     %s' "$p"; done
  echo
} >>"$work/plot.gp"

title="$log: $ntrain steps, $nval evaluations"
if ! gnuplot -c "$work/plot.gp" "$png" "$work/train.dat" "$work/val.dat" "$title" "$work/smooth.dat" 2>"$work/gnuplot.err"; then
  die "gnuplot failed: $(tr '\n' ' ' <"$work/gnuplot.err")"
fi
[ -s "$png" ] || die "$png: gnuplot wrote nothing"
echo "$png"
