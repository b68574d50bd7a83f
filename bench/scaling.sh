#!/usr/bin/env bash
# ted bench (the benchmark model, micro-batch 8 per data-parallel rank) at 1, 2, 4 and 8 ranks:
# ms/step and where the step time goes (compute and each collective, rank 0).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi_env.sh
steps=${STEPS:-3}
echo "== 1 rank"; build/ted bench --steps "$steps"
for layout in "2 1 2" "2 2 1" "4 2 2" "8 2 4"; do
  read -r np tp ep <<<"$layout"
  echo "== $np ranks, tp $tp ep $ep"
  "${MPIRUN[@]}" -np "$np" build/ted bench --steps "$steps" --tp "$tp" --ep "$ep" 2>&1
done
