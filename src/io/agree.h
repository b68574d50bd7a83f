// agree.h — ranks agree before training: each rank serialises what it resolved (every setting
// the run record prints, the layout, the resumed trainer state) as named entries, and digests
// are compared across the world with fixed-size messages (ranks may have been given different
// argv). A mismatch is one line naming the first entry that differs and both values, and every
// rank exits 2. No hang.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"

// FNV-1a 64 of n bytes, continuing from h (0: a fresh digest).
uint64_t agree_hash(const void *p, size_t n, uint64_t h);

// Collective over the world, before the topology is made: compares this rank's resolved
// settings (config_each_setting), layout (world size; tp, ep, pp are settings) and resumed
// trainer state (ckdir/trainer_state.json when ckdir is not empty) with every other rank's.
// 0 when all agree; else 1 on every rank, after one line (the first entry that differs, the
// lowest rank that differs there from rank 0, both values).
int agree_run(const Config *c, const char *ckdir);
