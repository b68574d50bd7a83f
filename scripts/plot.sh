#!/usr/bin/env bash
# plot.sh LOG.jsonl — draws the training `loss` of every step and the `val_loss` of the
# evaluation lines of a `ted train --log` file into LOG.png (LOG with .png for .jsonl) with
# gnuplot, and prints the PNG's path. `make plot LOG=path.jsonl` calls it.
# A step logged twice (a resumed run appending to its log) counts with its last line; lines that
# are not JSON objects (a line cut off by a crash) are skipped.
# Errors (a missing or empty log, no step in it, no gnuplot): one line on stderr, exit 2.
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

# the columns: train.dat "step loss", val.dat "step val_loss", sorted by step
"$PY" - "$log" "$work" <<'EOF' || exit 2
import json, math, sys
path, out = sys.argv[1], sys.argv[2]
train, val = {}, {}
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
    if not isinstance(o, dict) or not num(o.get('step')):
        continue
    if num(o.get('val_loss')):
        val[o['step']] = o['val_loss']
    elif num(o.get('loss')):
        train[o['step']] = o['loss']
if not train and not val:
    sys.exit(f'plot.sh: {path}: no "loss" or "val_loss" lines (not a ted train --log file?)')
for name, d in (('train.dat', train), ('val.dat', val)):
    with open(f'{out}/{name}', 'w') as f:
        for s in sorted(d):
            f.write(f'{s!r} {d[s]!r}\n')
EOF
ntrain=$(wc -l <"$work/train.dat")
nval=$(wc -l <"$work/val.dat")

if gnuplot -e 'set terminal' 2>&1 | grep -qw pngcairo; then
  term='pngcairo size 1000,600 font ",11"'
else
  term='png size 1000,600'
fi
# few points: draw the markers too, or a single point would not show
tstyle='lines lw 1.5'
[ "$ntrain" -lt 40 ] && tstyle='linespoints lw 1.5 pt 7 ps 0.6'

cat >"$work/plot.gp" <<EOF
set terminal $term
set output ARG1
set title ARG4 noenhanced
set xlabel "step"
set ylabel "loss (nats/token)"
set grid
set key top right
EOF
{
  if [ "$ntrain" -gt 0 ] && [ "$nval" -gt 0 ]; then
    echo "plot ARG2 using 1:2 with $tstyle lc rgb '#1f77b4' title 'train loss', \\"
    echo "     ARG3 using 1:2 with linespoints lw 2 pt 7 ps 1 lc rgb '#d62728' title 'val loss'"
  elif [ "$ntrain" -gt 0 ]; then
    echo "plot ARG2 using 1:2 with $tstyle lc rgb '#1f77b4' title 'train loss'"
  else
    echo "plot ARG3 using 1:2 with linespoints lw 2 pt 7 ps 1 lc rgb '#d62728' title 'val loss'"
  fi
} >>"$work/plot.gp"

title="$log: $ntrain steps, $nval evaluations"
if ! gnuplot -c "$work/plot.gp" "$png" "$work/train.dat" "$work/val.dat" "$title" 2>"$work/gnuplot.err"; then
  die "gnuplot failed: $(tr '\n' ' ' <"$work/gnuplot.err")"
fi
[ -s "$png" ] || die "$png: gnuplot wrote nothing"
echo "$png"
