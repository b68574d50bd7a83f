// agree.h — ranks agree before training: each rank digests what it resolved (the config, the
// layout, the resumed trainer state) field by field, and the digests are compared across the
// world with fixed-size messages (ranks may have been given different argv). A mismatch is one
// line naming the first field that differs and the ranks, and every rank exits 2. No hang.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"

// FNV-1a 64 of n bytes, continuing from h (0: a fresh digest).
uint64_t agree_hash(const void *p, size_t n, uint64_t h);

// Collective over the world, before the topology is made: compares this rank's resolved
// config, layout (world size) and resumed trainer state (ckdir/trainer_state.json when
// ckdir is not empty) with every other rank's. 0 when all agree; else 1 on every rank,
// after one line (the lowest rank that differs from rank 0, the field, both values).
int agree_run(const Config *c, const char *ckdir);
