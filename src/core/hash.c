// hash.c — FNV-1a 64 (see hash.h).
#include "core/hash.h"

uint64_t hash_fnv1a(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    if (!h) h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
